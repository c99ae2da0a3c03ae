"""Preempt inside one account by QOS priority (one preempt pass).

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares):
`want_started`, `want_preempted`; every victim is a preemption within its account."""

import pytest

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot

CASES = [
    Scenario(id="higher_priority_preempts_lower_preemptible",
             nodes=[node("n0", 1)], accounts=[account("q", quota=10)],
             jobs=[job("train", "q", prio=50, running_on={"n0": [0]}), job("infer", "q", prio=125)],
             want_started={"infer"}, want_preempted={"train"}),
    Scenario(id="equal_priority_never_preempts",
             nodes=[node("n0", 1)], accounts=[account("q", quota=1)],
             jobs=[job("a", "q", running_on={"n0": [0]}), job("b", "q")],
             want_started=set(), want_preempted=set()),
    Scenario(id="non_preemptible_victim_is_safe",
             nodes=[node("n0", 1)], accounts=[account("q", quota=10)],
             jobs=[job("build", "q", prio=100, running_on={"n0": [0]}), job("infer", "q", prio=125)],
             want_started=set(), want_preempted=set()),
    Scenario(id="never_across_accounts",
             nodes=[node("n0", 1)], accounts=[account("q0", quota=10), account("q1", quota=10)],
             jobs=[job("train", "q0", prio=50, running_on={"n0": [0]}), job("infer", "q1", prio=125)],
             want_started=set(), want_preempted=set()),
    Scenario(id="lowest_priority_then_newest_first",
             nodes=[node("n0", 3)], accounts=[account("q", quota=10)],
             jobs=[job("old40", "q", prio=40, running_on={"n0": [0]}),
                   job("new40", "q", prio=40, running_on={"n0": [1]}),
                   job("p45", "q", prio=45, running_on={"n0": [2]}),
                   job("infer", "q", prio=125)],
             want_started={"infer"}, want_preempted={"new40"}),
    Scenario(id="gang_victims_whole",
             nodes=[node("n0", 2)], accounts=[account("q", quota=10)],
             jobs=[job("gang", "q", prio=50, tasks=2, running_on={"n0": [0, 1]}), job("infer", "q", prio=125)],
             want_started={"infer"}, want_preempted={"gang"}),
    Scenario(id="non_preemptible_preemptor_must_fit_quota",
             nodes=[node("n0", 2)], accounts=[account("q", quota=1)],
             jobs=[job("infer0", "q", prio=125, running_on={"n0": [0]}),
                   job("train", "q", prio=50, running_on={"n0": [1]}), job("infer1", "q", prio=125)],
             want_started=set(), want_preempted=set()),
    Scenario(id="enough_victims_for_a_gang_preemptor",
             nodes=[node("n0", 2), node("n1", 2)], accounts=[account("q", quota=10)],
             jobs=[job("t0", "q", prio=50, running_on={"n0": [0]}), job("t1", "q", prio=50, running_on={"n1": [0]}),
                   job("t2", "q", prio=50, running_on={"n0": [1]}), job("big", "q", prio=75, gpus=2)],
             want_started={"big"}, want_preempted={"t1"}),  # t2 is tried first but not needed
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_preempt(case):
    out = case.verify(passes=["preempt"])
    assert {p["reason"] for p in out.decisions["preempt"]} <= {"preempt"}


def test_full_cycle_preempt_is_stable():
    """After the preemption is applied, a second cycle changes nothing (no ping-pong)."""
    from .sched_builders import apply
    snap = snapshot([node("n0", 1)], [account("q", quota=10)],
                    [job("train", "q", prio=50, running_on={"n0": [0]}), job("infer", "q", prio=125)])
    first = run(snap).decisions
    assert apply(snap, first)
    second = run(snap).decisions
    assert second["start"] == [] and second["preempt"] == []
    assert second["pending"] == [{"job": "train", "reason": "Resources"}]
