"""Why no node holds a job (`batchd.server.nofit` through `jobspec.resolve`): Slurm's message stays
the message, batchd's reason is the `detail` the commands print on the next line (issue 15.6).

Each case: the request's spec keys, then the wanted error code and detail. The cluster is the
reference one (node vm: 16 CPUs, 23081 MiB, 4 h200) unless the case adds nodes.
"""

from __future__ import annotations

import copy

import pytest
from sbatch_helpers import CLUSTER

from batchd.errors import SubmitError
from batchd.server import jobspec

MIG_NODE = {"name": "mig1", "cpus": 64, "memory_mb": 500000, "state": "IDLE",
            "gpus": [{"type": "h200", "index": 0, "mig": [{"profile": "3g.71gb", "uuid": "MIG-a"},
                                                             {"profile": "3g.71gb", "uuid": "MIG-b"}]}]}
A100_NODE = {"name": "old1", "cpus": 8, "memory_mb": 65536, "state": "IDLE", "gpus": [{"type": "a100", "count": 2}]}
LEAN_NODE = {"name": "lean1", "cpus": 128, "memory_mb": 16384, "state": "IDLE", "gpus": []}


def cluster(*extra: dict, part_nodes: tuple[str, ...] = ()) -> dict:
    c = copy.deepcopy(CLUSTER)
    c["nodes"] += [dict(n) for n in extra]
    for p in c["partitions"]:
        if p["name"] == "gpu":
            p["nodes"] = p["nodes"] + list(part_nodes)
    return c


def gres(count: int, gtype: str | None = None) -> dict:
    return {"gres": [{"name": "gpu", "type": gtype, "count": count}]}


CASES = [
    # (id, spec, extra nodes, nodes added to partition gpu, want code, want detail)
    ("unknown-gpu-type", gres(1, "nonexistent"), (), (), "NodeConfigUnavailable",
     "no node of partition gpu offers gres/gpu:nonexistent; GPU types there: h200"),
    ("type-only-outside-the-partition", gres(1, "a100"), (A100_NODE,), (), "NodeConfigUnavailable",
     "no node of partition gpu offers gres/gpu:a100 (node old1 outside it has); GPU types there: h200"),
    ("mig-profiles-are-named", gres(1, "1g.24gb"), (MIG_NODE,), ("mig1",), "NodeConfigUnavailable",
     "no node of partition gpu offers gres/gpu:1g.24gb; GPU types there: h200; MIG profiles: 3g.71gb"),
    ("too-many-gpus-on-one-node", gres(8), (), (), "NodeConfigUnavailable",
     "8 GPUs asked on one node; the most on one node of partition gpu is 4 (vm), 4 in the partition"),
    ("too-many-of-a-type", gres(5, "h200"), (), (), "NodeConfigUnavailable",
     "5 gres/gpu:h200 asked on one node; the most on one node of partition gpu is 4 (vm), 4 in the partition"),
    ("gpus-per-task-more-than-the-partition", {"gpus_per_task": {"type": None, "count": 1}, "ntasks": 8}, (), (),
     "NodeConfigUnavailable", "8 GPUs asked in all; partition gpu has 4"),
    # -c 65 said "Memory specification can not be satisfied" (65 x 1024 MiB default): CPUs first
    ("cpus-before-default-memory", {"cpus_per_task": 65}, (), (), "NodeConfigUnavailable",
     "65 CPUs asked on one node; the most on one node of partition gpu is 16 (vm)"),
    ("cpus-17-of-16", {"cpus_per_task": 17}, (), (), "NodeConfigUnavailable",
     "17 CPUs asked on one node; the most on one node of partition gpu is 16 (vm)"),
    ("tasks-over-the-partition", {"ntasks": 32}, (), (), "NodeConfigUnavailable",
     "32 CPUs asked in all; partition gpu has 16"),
    ("tasks-fixed-on-one-node", {"ntasks": 32, "nodes_min": 1, "nodes_max": 1}, (), (), "NodeConfigUnavailable",
     "32 CPUs asked on one node; the most on one node of partition gpu is 16 (vm)"),
    ("memory-per-cpu", {"cpus_per_task": 8, "mem_per_cpu_mb": 4096}, (), (), "MemoryNotSatisfiable",
     "32768M memory asked on one node; the most on one node of partition gpu is 23081M (vm)"),
    ("default-memory-per-cpu-is-named", {"cpus_per_task": 24}, (LEAN_NODE,), ("lean1",), "MemoryNotSatisfiable",
     "24576M memory asked on one node; the most on one node of partition gpu is 23081M (vm); "
     "1024M per CPU by default, --mem or --mem-per-cpu asks for less"),
]


@pytest.mark.parametrize("spec, extra, part_nodes, want_code, want_detail",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refusal_names_its_cause(spec, extra, part_nodes, want_code, want_detail):
    with pytest.raises(SubmitError) as e:
        jobspec.resolve(dict(spec), cluster(*extra, part_nodes=part_nodes), "root", 0)
    assert e.value.message == jobspec.NODE_CONFIG  # Slurm's words stay the message
    assert (e.value.code, e.value.detail) == (want_code, want_detail)
    assert e.value.envelope()["error"]["detail"] == want_detail


def test_explicit_memory_over_every_node_keeps_slurms_two_lines_only():
    # recorded: `sbatch --mem=100T` -> "Memory specification can not be satisfied" + NODE_CONFIG
    with pytest.raises(SubmitError) as e:
        jobspec.resolve({"mem_mb": 100 * 1024 * 1024 * 1024}, cluster(), "root", 0)
    assert (e.value.code, e.value.detail) == ("MemoryNotSatisfiable", None)
    assert "detail" not in e.value.envelope()["error"]


def test_a_request_that_fits_is_not_refused():
    assert jobspec.resolve({"cpus_per_task": 16, **gres(4, "h200")}, cluster(), "root", 0)
