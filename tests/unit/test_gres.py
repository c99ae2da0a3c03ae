"""The GPU model (batchd/slurm/gres.py): one rule for a MIG instance's and a shard's share of its
card, the charge of an allocation, and billing by its parts. Crafted arithmetic."""

import pytest

from batchd.slurm.gres import (
    Charge,
    card_slices,
    charge_of_allocation,
    parse_node_gpus,
    profile_slices,
    share_key,
    split_share_key,
)
from batchd.slurm.tres import billing, format_tres, parse_billing_weights

RTX_MIG = {"index": 0, "uuid": "GPU-r0", "type": "rtxpro6000",
           "mig": [{"profile": "1g.24gb", "uuid": f"MIG-r{i}"} for i in range(4)]}
H200_MIG = {"index": 1, "uuid": "GPU-h1", "type": "h200",
            "mig": [{"profile": "3g.71gb", "uuid": "MIG-h3"}, {"profile": "1c.3g.71gb", "uuid": "MIG-hc"},
                    {"profile": "1g.18gb", "uuid": "MIG-h1"}]}
WHOLE = {"index": 2, "uuid": "GPU-h2", "type": "h200"}


@pytest.mark.parametrize("profile, slices", [("1g.24gb", 1), ("2g.48gb", 2), ("3g.71gb", 3), ("7g.141gb", 7),
                                             ("1c.3g.40gb", 1), ("2c.4g.48gb", 2), ("h200_2g.35gb", 2),
                                             ("h200", 1), ("weird", 1)])
def test_profile_compute_slices(profile, slices):
    assert profile_slices(profile) == slices


def test_card_slices_by_inventory_then_type():
    assert card_slices("rtxpro6000") == 4 and card_slices("a30") == 4
    assert card_slices("h200") == 7 and card_slices("h100") == 7
    assert card_slices("h200", 8) == 8  # NVML's own count wins
    assert card_slices("h200", 0) == 7 and card_slices("h200", True) == 7


def test_mig_share_uses_the_cards_own_slice_count():
    inv = parse_node_gpus([RTX_MIG, H200_MIG, WHOLE])
    r = inv.card(0)
    assert r is not None and not r.whole and r.slices == 4
    assert [m.share for m in r.mig] == [0.25] * 4  # 1/4 on an RTX PRO 6000, not 1/7
    h = inv.card(1)
    assert h is not None and [round(m.share, 6) for m in h.mig] == [round(3 / 7, 6), round(1 / 7, 6), round(1 / 7, 6)]


def test_shards_split_evenly_over_whole_cards_only():
    inv = parse_node_gpus([RTX_MIG, WHOLE, {"index": 3, "type": "h200"}], shards=9)
    assert [(c.index, c.shards) for c in inv.cards] == [(0, 0), (2, 5), (3, 4)]
    assert parse_node_gpus([RTX_MIG], shards=4).cardless_shards == 4


def test_capacity_in_charge_keys():
    cap = parse_node_gpus([RTX_MIG, WHOLE], shards=8).capacity()
    assert cap == {"gres/gpu": 2.0, "gres/gpu:1g.24gb": 4.0, "gres/gpu:rtxpro6000@1g.24gb": 1.0,
                   "gres/gpu:h200": 1.0, "gres/shard": 8.0}


def test_count_form_inventory():
    inv = parse_node_gpus([{"type": "h200", "count": 2}, {"type": "l40s", "count": 1}], shards=6)
    assert [(c.index, c.type, c.shards) for c in inv.cards] == [(0, "h200", 2), (1, "h200", 2), (2, "l40s", 2)]


@pytest.mark.parametrize("raw, msg", [("x", "must be a list"), ([{"count": 1}], "gpus[0].type"),
                                      ([{"type": "h", "index": 0}, {"type": "h", "index": 0}], "duplicate"),
                                      ([{"type": "h", "mig": [{"profile": 1}]}], "mig[0]")])
def test_bad_inventory_names_the_entry(raw, msg):
    with pytest.raises(ValueError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        parse_node_gpus(raw)


def test_charge_of_a_mixed_allocation():
    nodes = {"n": parse_node_gpus([RTX_MIG, H200_MIG, WHOLE, {"index": 3, "type": "h200"}], shards=8)}
    alloc = {"n": {"tasks": 1, "cpus": 4, "memory_mb": 1024, "gpus": [2, "0:MIG-r1", "0:MIG-r2", "1:MIG-hc"],
                   "shards": 2, "shard_gpus": [3]}}
    ch = charge_of_allocation(alloc, nodes)
    assert ch.tres["gres/gpu:h200"] == 1 and ch.tres["gres/gpu:1g.24gb"] == 2 and ch.tres["gres/gpu:1c.3g.71gb"] == 1
    assert ch.tres["gres/shard"] == 2 and ch.tres["cpu"] == 4 and ch.tres["node"] == 1
    # 1 whole + 2 x 1/4 + 1/7 + 2 of 4 shards = 2.142857...
    assert ch.tres["gres/gpu"] == pytest.approx(1 + 0.5 + 1 / 7 + 0.5)
    rec = ch.record()
    assert rec["gres/gpu:rtxpro6000@1g.24gb"] == 0.5 and rec["gres/gpu:h200@shard"] == 0.5
    assert rec["gres/gpu:h200@1c.3g.71gb"] == pytest.approx(1 / 7)
    back = Charge.from_record(rec)
    assert [(t, c, ct, round(sh, 9)) for t, c, ct, sh in sorted(back.billing_parts())] == \
        [(t, c, ct, round(sh, 9)) for t, c, ct, sh in sorted(ch.billing_parts())]
    assert Charge.from_json(ch.to_json()).record() == rec
    # AllocTRES shows Slurm's TRES, never the card-share keys
    assert "@" not in format_tres(rec, 1.0)


def test_share_keys_round_trip():
    assert share_key("h200", "gres/shard") == "gres/gpu:h200@shard"
    assert split_share_key("gres/gpu:h200@shard") == ("h200", "gres/shard")
    assert split_share_key("gres/gpu:rtxpro6000@1g.24gb") == ("rtxpro6000", "gres/gpu:1g.24gb")


def test_unknown_devices_count_as_a_whole_untyped_card():
    ch = charge_of_allocation({"gone": {"gpus": [0], "cpus": 1}}, {})
    assert ch.tres["gres/gpu"] == 1 and ch.tres["gres/gpu:gpu"] == 1


@pytest.mark.parametrize("weights, want", [
    # a 1g.24gb instance (1/4 of an RTX PRO 6000) and 2 of 4 shards of an h200
    ("CPU=0,GRES/gpu=2.0", 0.25 * 2 + 0.5 * 2),  # generic weight x shares
    ("CPU=0,GRES/gpu=2.0,GRES/gpu:rtxpro6000=4.0,GRES/gpu:h200=8.0", 0.25 * 4 + 0.5 * 8),  # card type x share
    ("CPU=0,GRES/gpu=2.0,GRES/gpu:1g.24gb=0.6,GRES/shard=0.1", 0.6 + 2 * 0.1),  # their own weights
    ("CPU=0,GRES/gpu:h200=8.0,GRES/shard=0.1", 0.2),  # no generic weight: the MIG part is free
])
def test_billing_by_parts(weights, want):
    nodes = {"n": parse_node_gpus([RTX_MIG, WHOLE], shards=4)}
    ch = charge_of_allocation({"n": {"gpus": ["0:MIG-r0"], "shards": 2, "shard_gpus": [2], "cpus": 1}}, nodes)
    w = parse_billing_weights(weights)
    assert billing(w, ch.tres, parts=ch.billing_parts()) == pytest.approx(want)


def test_billing_by_parts_equals_the_old_rule_for_whole_cards():
    w = parse_billing_weights("CPU=1,Mem=0.25G,GRES/gpu=2.0,GRES/gpu:h200=4.0")
    nodes = {"n": parse_node_gpus([{"type": "h200", "count": 2}, {"type": "l40s", "count": 2}])}
    ch = charge_of_allocation({"n": {"gpus": [0, 1, 2], "cpus": 8, "memory_mb": 8192}}, nodes)
    assert billing(w, ch.tres, parts=ch.billing_parts()) == pytest.approx(billing(w, ch.tres)) == 8 + 2 + 8 + 2
