"""Slurm's array throttle (`--array=0-3%1`, `bsub -J "x[1-4]%2"`): at most N tasks of the array
run, counting the tasks running and those the same cycle starts (issue 15: every task started
at once, the limit being counted over the jobs running before the cycle only).

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares) on one node of
8 GPUs and one account: `jobs` in (tasks carry `array_job_id` and `array_max_running`);
`want_started`, `want_reasons`.
"""

import pytest

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot


def task(jid, array, limit, **kw):
    return job(jid, "a", array_job_id=array, array_max_running=limit, **kw)


def case(**kw) -> Scenario:
    return Scenario(nodes=[node("n0", 8)], accounts=[account("a", quota=-1)], **kw)


CASES = [
    case(id="throttle-1-starts-one", jobs=[task(f"t{i}", 7, 1) for i in range(4)],
         want_started={"t0"}, want_reasons={"t1": "JobArrayTaskLimit", "t2": "JobArrayTaskLimit",
                                             "t3": "JobArrayTaskLimit"}),
    case(id="throttle-2-counts-running", jobs=[task("r", 7, 2, running_on={"n0": [0]})]
         + [task(f"t{i}", 7, 2) for i in range(3)],
         want_started={"t0"}, want_reasons={"t1": "JobArrayTaskLimit", "t2": "JobArrayTaskLimit"}),
    # another array and a plain job of the same shape are not held by this array's limit
    case(id="other-jobs-unaffected", jobs=[task("a0", 7, 1), task("a1", 7, 1), task("b0", 8, 1), job("p", "a")],
         want_started={"a0", "b0", "p"}, want_reasons={"a1": "JobArrayTaskLimit"}),
    case(id="no-throttle", jobs=[job(f"t{i}", "a", array_job_id=9) for i in range(3)],
         want_started={"t0", "t1", "t2"}, want_reasons={}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_array_throttle(case):
    case.verify()


def test_throttle_holds_through_reclaim_and_backfill():
    jobs = [task(f"t{i}", 7, 2, time_limit_s=60) for i in range(5)]
    out = run(snapshot([node("n0", 8)], [account("a", quota=-1)], jobs, policy={"backfill": True}))
    assert len(out.started) == 2
