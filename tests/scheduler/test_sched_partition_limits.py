"""A partition's MaxTime as Slurm applies it with EnforcePartLimits=NO (issue 15.1: a job of
`sbatch -t 8-00:00:00` on a partition with `max_time = "7-00:00:00"` ran). Slurm 22.05 keeps
such a job pending with reason `PartitionTimeLimit` (recorded in
tests/compat/test_time_limits.py) until its limit is lowered, or an administrator sets one
(ADMIN_SET_LIMIT, snapshot `time_limit_admin`) that may exceed MaxTime.

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares) on one node of
4 GPUs and one account: `partitions`, `jobs` in (each names its `partition`); `want_started`,
`want_reasons`.
"""

import pytest

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot

DAY = 86400
PARTS = [{"name": "gpu", "max_time_s": 7 * DAY}, {"name": "free", "max_time_s": -1},
         {"name": "nolimit", "max_time_s": None}]


def pj(jid, part, tl, **kw):
    return job(jid, "a", partition=part, time_limit_s=tl, **kw)


def case(**kw) -> Scenario:
    return Scenario(nodes=[node("n0", 4)], accounts=[account("a", quota=-1)], **kw)


CASES = [
    case(id="over-max-pends", partitions=PARTS, jobs=[pj("over", "gpu", 8 * DAY), pj("ok", "gpu", 7 * DAY)],
         want_started={"ok"}, want_reasons={"over": "PartitionTimeLimit"}),
    case(id="unlimited-job-over-finite-max", partitions=PARTS, jobs=[pj("inf", "gpu", None), pj("neg", "gpu", -1)],
         want_started=set(), want_reasons={"inf": "PartitionTimeLimit", "neg": "PartitionTimeLimit"}),
    case(id="unlimited-partitions-limit-nothing", partitions=PARTS,
         jobs=[pj("f", "free", 30 * DAY), pj("n", "nolimit", None), pj("unlisted", "other", 99 * DAY)],
         want_started={"f", "n", "unlisted"}, want_reasons={}),
    case(id="admin-set-limit-may-exceed", partitions=PARTS, jobs=[pj("adm", "gpu", 8 * DAY, time_limit_admin=True)],
         want_started={"adm"}, want_reasons={}),
    # a held job shows its hold, as Slurm's squeue does (the limit shows once released)
    case(id="hold-reason-first", partitions=PARTS,
         jobs=[pj("held", "gpu", 8 * DAY, eligible=False, reason="JobHeldUser")],
         want_started=set(), want_reasons={"held": "JobHeldUser"}),
    case(id="no-partitions-in-snapshot", partitions=None, jobs=[pj("x", "gpu", 8 * DAY)],
         want_started={"x"}, want_reasons={}),
    # a job over its limit takes nothing: the next one starts on the only GPU
    case(id="takes-no-resources", partitions=PARTS, jobs=[pj("over", "gpu", 8 * DAY, gpus=4), pj("next", "gpu", 60, gpus=4)],
         want_started={"next"}, want_reasons={"over": "PartitionTimeLimit"}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_partition_time_limit(case):
    case.verify()


def test_over_limit_job_blocks_no_backfill_and_no_preemption():
    """It holds no reservation (a lower job starts) and preempts nobody."""
    jobs = [pj("low", "gpu", 60, gpus=1, prio=10, running_on={"n0": [0]}),
            pj("over", "gpu", 8 * DAY, gpus=1, prio=200), pj("small", "gpu", 60, gpus=0)]
    out = run(snapshot([node("n0", 1)], [account("a", quota=-1)], jobs, partitions=PARTS,
                       policy={"backfill": True}))
    assert out.preempted == set()
    assert out.started == {"small"}
    assert out.reasons["over"] == "PartitionTimeLimit"
    assert "over" not in out.decisions["planned_start"]


@pytest.mark.parametrize("bad, path", [
    ({"partitions": "gpu"}, "partitions"),
    ({"partitions": [{"max_time_s": 5}]}, "partitions[0]"),
    ({"partitions": [{"name": "gpu", "max_time_s": "7-00:00:00"}]}, "partitions[0].max_time_s"),
])
def test_malformed_partitions_named(bad, path):
    from batchd.scheduler import load_snapshot

    with pytest.raises(ValueError, match=rf"^{path.replace('[', '.').replace(']', '.')}"):
        load_snapshot(snapshot([node("n0", 1)], [account("a", quota=-1)], [], **bad))
