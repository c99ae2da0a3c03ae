"""TRES billing weights, billing (sum and MAX_TRES) and TRES strings (batchd.slurm.tres)."""

import math

import pytest

from batchd.slurm.tres import BillingWeights, billing, format_tres, parse_billing_weights, parse_tres

GIB = 1024.0


def w(s, flags=""):
    return parse_billing_weights(s, flags)


# slurm_spec section 3 worked examples: CPU=1,Mem=.25G on a 16 CPU / 64 GiB node.
@pytest.mark.parametrize(
    "cpus,mem_gib,want_sum,want_max",
    [(1, 60, 16.0, 15.0), (16, 1, 16.25, 16.0), (16, 60, 31.0, 16.0), (1, 8, 3.0, 2.0)],
    ids=["1cpu-60G", "16cpu-1G", "16cpu-60G", "1cpu-8G"],
)
def test_spec_examples_sum_and_max(cpus, mem_gib, want_sum, want_max):
    tres = {"cpu": cpus, "mem": mem_gib * GIB, "node": 1}
    assert billing(w("CPU=1,Mem=.25G"), tres) == pytest.approx(want_sum)
    assert billing(w("CPU=1,Mem=.25G", "MAX_TRES"), tres) == pytest.approx(want_max)


def test_licence_is_added_outside_the_max():
    weights = "CPU=1.0,Mem=0.25G,license/licA=1.5"
    tres = {"cpu": 1, "mem": 8 * GIB, "node": 1, "license/lica": 1}
    assert billing(w(weights), tres) == pytest.approx(4.5)
    assert format_tres(tres, billing(w(weights), tres)).startswith("cpu=1,mem=8G,node=1,billing=4")
    assert billing(w(weights, "MAX_TRES"), tres) == pytest.approx(2.0 + 1.5)
    tres10 = {"cpu": 1, "mem": 10 * GIB, "license/lica": 1}
    assert billing(w("Mem=0.25G,license/licA=1.5"), tres10) == pytest.approx(4.0)


def test_max_tres_gres_adds_gpus_outside_the_max():
    weights = "CPU=1.0,Mem=0.25G,GRES/gpu=1.0"
    tres = {"cpu": 1, "mem": 8 * GIB, "node": 1}
    assert billing(w(weights, "MAX_TRES_GRES"), tres) == pytest.approx(2.0)
    tres_gpu = dict(tres, **{"gres/gpu": 1})
    assert billing(w(weights, "MAX_TRES_GRES"), tres_gpu) == pytest.approx(3.0)
    # MAX_TRES: the GPU is inside the max
    assert billing(w(weights, "MAX_TRES"), tres_gpu) == pytest.approx(2.0)


def test_units():
    assert w("Mem=0.25G").weights["mem"] == pytest.approx(0.25 / 1024)
    assert w("Mem=0.25").weights["mem"] == pytest.approx(0.25)
    assert w("Mem=1K").weights["mem"] == pytest.approx(1.0)  # Slurm's quirk: K on mem is M
    assert w("Mem=2T").weights["mem"] == pytest.approx(2.0 / 1024**2)
    assert w("CPU=1K").weights["cpu"] == pytest.approx(1 / 1024)
    assert w("cpu=3,MEM=1g,gres/GPU:H200=4").weights == pytest.approx(
        {"cpu": 3, "mem": 1 / 1024, "gres/gpu:h200": 4})
    assert billing(w("Mem=0.25"), {"mem": 8 * GIB}) == pytest.approx(2048)


@pytest.mark.parametrize("bad", ["CPU", "CPU=x", "foo=1", "GRES=1", "CPU/x=1", "CPU=1Q", "billing=1",
                                 "CPU=1,CPU=2", "Mem=nan"])
def test_bad_weights_raise(bad):
    with pytest.raises(ValueError):
        parse_billing_weights(bad)


def test_no_weights_bills_cpus():
    assert billing(parse_billing_weights(""), {"cpu": 6, "mem": 4096, "gres/gpu": 2}) == 6.0


# The recorded Slurm 22.05 cluster: TRESBillingWeights=CPU=1.0,Mem=0.25G,GRES/gpu=2.0
REF = "CPU=1.0,Mem=0.25G,GRES/gpu=2.0"


@pytest.mark.parametrize(
    "alloc",
    [
        "billing=5,cpu=1,gres/gpu:h200=2,gres/gpu=2,mem=1G,node=1",
        "billing=7,cpu=1,gres/gpu:h200=2,gres/gpu=2,mem=8G,node=1",
        "billing=5,cpu=3,gres/gpu:h200=1,gres/gpu=1,mem=3G,node=1",
        "billing=6,cpu=2,gres/gpu:h200=2,gres/gpu=2,mem=1500M,node=1",
        "billing=28,cpu=16,gres/gpu:h200=4,gres/gpu=4,mem=16G,node=1",
        "billing=9,cpu=1,gres/gpu:h200=4,gres/gpu=4,mem=1G,node=1",
        "billing=2,cpu=2,mem=2G,node=1",
        "billing=6,cpu=2,gres/gpu:h200=1,gres/gpu=1,mem=8G,node=1",
    ],
)
def test_reference_alloc_tres_strings(alloc):
    tres = parse_tres(alloc)
    want = int(tres.pop("billing"))
    b = billing(w(REF), tres)
    assert math.trunc(b) == want
    assert format_tres(tres, b, alphabetical=True) == alloc


def test_scontrol_order_and_node_cfg():
    tres = parse_tres("cpu=16,mem=23081M,gres/gpu=4,gres/gpu:h200=4")
    b = billing(w(REF), tres)
    assert format_tres(tres, b) == "cpu=16,mem=23081M,billing=29,gres/gpu=4,gres/gpu:h200=4"
    assert format_tres({"gres/gpu:h200": 2, "node": 1, "mem": 4096, "cpu": 4, "gres/gpu": 2}, 9.25) == \
        "cpu=4,mem=4G,node=1,billing=9,gres/gpu=2,gres/gpu:h200=2"


def test_typed_weight_replaces_generic():
    weights = w("CPU=1.0,GRES/gpu=2.0,GRES/gpu:h200=4.0")
    # two h200: billed at 4 each, not 2+4
    assert billing(weights, {"cpu": 1, "gres/gpu": 2, "gres/gpu:h200": 2}) == pytest.approx(9.0)
    # an untyped-weight GPU type keeps the generic weight
    assert billing(weights, {"cpu": 1, "gres/gpu": 2, "gres/gpu:rtxpro6000": 2}) == pytest.approx(5.0)
    # mixed: one h200 + one other
    assert billing(weights, {"gres/gpu": 2, "gres/gpu:h200": 1, "gres/gpu:l4": 1}) == pytest.approx(6.0)


def test_mig_and_shard_weighted_as_own_types():
    weights = w("GRES/gpu=2.0,GRES/gpu:1g.24gb=0.6,GRES/shard=0.1")
    # a 1-slice instance of a 4-slice card counts 0.25 toward gres/gpu
    tres = {"gres/gpu": 0.25, "gres/gpu:1g.24gb": 1}
    assert billing(weights, tres, gpu_fraction={"gres/gpu:1g.24gb": 0.25}) == pytest.approx(0.6)
    # without a fraction the profile name gives slices/7
    tres7 = {"gres/gpu": 2 / 7, "gres/gpu:2g.35gb": 1}
    assert billing(w("GRES/gpu=2.0,GRES/gpu:2g.35gb=0.5"), tres7) == pytest.approx(0.5)
    # a MIG profile without its own weight is billed by the generic weight on its fraction
    assert billing(weights, {"gres/gpu": 0.25, "gres/gpu:2g.48gb": 1}) == pytest.approx(0.5)
    assert billing(weights, {"gres/shard": 8}) == pytest.approx(0.8)


def test_parse_tres_units():
    assert parse_tres("cpu=4,mem=16G,node=1,billing=4,gres/gpu=1") == {
        "cpu": 4, "mem": 16384, "node": 1, "billing": 4, "gres/gpu": 1}
    assert parse_tres("mem=500M")["mem"] == 500
    assert parse_tres("mem=1T")["mem"] == 1024 * 1024
    assert parse_tres("") == {}
    with pytest.raises(ValueError):
        parse_tres("cpu")
    with pytest.raises(ValueError):
        parse_tres("cpu=abc")


def test_format_tres_mem_units_and_zero():
    assert format_tres({"cpu": 1, "mem": 500}, None) == "cpu=1,mem=500M"
    assert format_tres({"cpu": 1, "mem": 1024 * 1024, "gres/gpu": 0}, 0.9) == "cpu=1,mem=1T,billing=0"


def test_billing_weights_mode_checked():
    with pytest.raises(ValueError):
        BillingWeights({}, "avg")


@pytest.mark.parametrize("mem_mb, shown", [
    # Slurm 22.05 (peer): `sbatch --mem=1536M` -> scontrol `TRES=cpu=1,mem=1.50G,node=1,billing=1`
    # and sacct AllocTRES `mem=1.50G` (batchd wrote mem=1536M)
    (1536, "1.50G"), (2560, "2.50G"), (2048, "2G"), (1025, "1025M"), (1048576, "1T"),
    # batchd stops at a fraction where Slurm goes on (1.50T), so the string reads back exactly
    (1573376, "1536.50G"),
])
def test_mem_in_tres_strings_converts_as_slurm_and_reads_back(mem_mb, shown):
    s = format_tres({"cpu": 1, "mem": mem_mb}, None)
    assert s == f"cpu=1,mem={shown}"
    assert parse_tres(s)["mem"] == mem_mb
