"""Concrete CPU ids per node: `allocation[node]["cpu_ids"]` (ascending ints), what the launcher
pins the job to (AllowedCPUs / sched_setaffinity).

A node's CPUs are ids 0..cpus-1. A started job gets as many ids as its CPU count on the node,
among those no running job holds, preferring the CPUs local to its GPUs (the inventory's
per-GPU `"cpus"`), then the lowest. A running job stored without `cpu_ids` (an allocation
made before ids existed) holds its CPUs by count only: no particular ids.

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares) of one
account `a`: `nodes`, `jobs` in; `passes` (default allocate only); `want_cpu_ids`;
`want_reasons` (default: none pending), `want_preempted` (default: none).
"""

import pytest

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot


def cpu_job(jid: str, cpus: int, gpus: int = 0, **kw) -> dict:
    pt = {"cpu": cpus, "mem": 1}
    if gpus:
        pt["gres/gpu"] = gpus
    return job(jid, "a", per_task=pt, **kw)


def running(jid: str, cpus: int, ids: list[int] | None, gpus: list[int] | None = None, node_name: str = "n0",
            **kw) -> dict:
    d = cpu_job(jid, cpus, len(gpus or []), **kw)
    a = {"tasks": 1, "gpus": list(gpus or []), "cpus": cpus, "memory_mb": 1}
    if ids is not None:
        a["cpu_ids"] = ids
    d.update(state="RUNNING", start_time=1_999_000, allocation={node_name: a})
    return d


TWO_SOCKETS = [{"index": 0, "uuid": "GPU-0", "type": "h200", "numa": 0, "cpus": [0, 1, 2, 3]},
               {"index": 1, "uuid": "GPU-1", "type": "h200", "numa": 1, "cpus": [4, 5, 6, 7]}]

def case(**kw) -> Scenario:
    kw.setdefault("want_reasons", {})
    kw.setdefault("want_preempted", set())
    return Scenario(accounts=[account("a", quota=-1)], **kw)


CASES = [
    case(id="lowest_free_ids",
         nodes=[node("n0", cpus=8)],
         jobs=[running("r", 2, [0, 1]), cpu_job("j", 3)],
         want_cpu_ids={"j": {"n0": [2, 3, 4]}}),
    case(id="ids_skip_holes_left_by_running_jobs",
         nodes=[node("n0", cpus=8)],
         jobs=[running("r1", 2, [0, 1]), running("r2", 1, [3]), cpu_job("j", 3)],
         want_cpu_ids={"j": {"n0": [2, 4, 5]}}),
    case(id="two_jobs_of_one_cycle_never_share_ids",
         nodes=[node("n0", cpus=4)],
         jobs=[cpu_job("j1", 2), cpu_job("j2", 2), cpu_job("j3", 1)],
         want_cpu_ids={"j1": {"n0": [0, 1]}, "j2": {"n0": [2, 3]}}, want_reasons={"j3": "Resources"}),
    case(id="cpus_local_to_the_gpu_first",
         nodes=[node("n0", cpus=8, devices=TWO_SOCKETS)],
         jobs=[running("r", 1, [0], gpus=[0]), cpu_job("j", 2, gpus=1)],
         want_cpu_ids={"j": {"n0": [4, 5]}}),
    case(id="local_cpus_then_lowest_when_not_enough",
         nodes=[node("n0", cpus=8, devices=TWO_SOCKETS)],
         jobs=[running("r", 2, [4, 5], gpus=[0]), cpu_job("j", 4, gpus=1)],
         want_cpu_ids={"j": {"n0": [0, 1, 6, 7]}}),
    case(id="cpu_only_job_takes_lowest_ids",
         nodes=[node("n0", cpus=8, devices=TWO_SOCKETS)],
         jobs=[cpu_job("j", 2)],
         want_cpu_ids={"j": {"n0": [0, 1]}}),
    case(id="shard_job_prefers_its_cards_cpus",
         nodes=[dict(node("n0", cpus=8, devices=TWO_SOCKETS), shards=4)],
         jobs=[running("r", 1, [0], gpus=[0]), job("s", "a", per_task={"gres/shard": 1, "cpu": 2, "mem": 1})],
         want_cpu_ids={"s": {"n0": [4, 5]}}),
    case(id="stored_allocation_without_ids_holds_by_count_only",
         nodes=[node("n0", cpus=4)],
         jobs=[running("old", 2, None), cpu_job("j", 2), cpu_job("k", 1)],
         want_cpu_ids={"j": {"n0": [0, 1]}}, want_reasons={"k": "Resources"}),
    case(id="each_node_of_a_gang_gets_its_ids",
         nodes=[node("n0", cpus=2), node("n1", cpus=2)],
         jobs=[running("r", 1, [0], node_name="n1"), cpu_job("g", 1, tasks=2, nodes=2)],
         want_cpu_ids={"g": {"n0": [0], "n1": [1]}}),
    case(id="exclusive_job_takes_every_id",
         nodes=[node("n0", cpus=4)],
         jobs=[cpu_job("x", 1, exclusive=True)],
         want_cpu_ids={"x": {"n0": [0, 1, 2, 3]}}),
    case(id="preemptor_gets_the_victims_ids",
         nodes=[node("n0", cpus=4)], passes=["preempt"],
         jobs=[running("lo", 3, [1, 2, 3], prio=50), running("other", 1, [0], prio=125), cpu_job("hi", 3, prio=125)],
         want_cpu_ids={"hi": {"n0": [1, 2, 3]}}, want_preempted={"lo"}, want_reasons={}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_cpu_ids(case):
    case.verify(passes=["allocate"])


def test_stored_ids_that_overlap_or_fall_outside_the_node_are_ignored():
    jobs = [running("r1", 2, [0, 1]), running("r2", 2, [1, 9]), cpu_job("j", 1)]
    out = run(snapshot([node("n0", cpus=4)], [account("a", quota=-1)], jobs), passes=["allocate"])
    assert out.started == set() and out.reasons == {"j": "Resources"}
    out = run(snapshot([node("n0", cpus=5)], [account("a", quota=-1)], jobs), passes=["allocate"])
    assert out.decisions["start"][0]["allocation"]["n0"]["cpu_ids"] == [2]


def test_bad_cpu_ids_name_the_key():
    from batchd.scheduler import load_snapshot

    snap = snapshot([node("n0", cpus=4)], [account("a", quota=-1)], [running("r", 1, ["x"])])
    with pytest.raises(ValueError, match=r"jobs\[0\]\.allocation\.n0\.cpu_ids"):
        load_snapshot(snap)
