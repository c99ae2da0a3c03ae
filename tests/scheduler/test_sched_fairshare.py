"""Fair-share division (KAI's proportion plugin): phases, buckets, weights, rounding, hierarchy,
limits, lending limits. Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*`
compares) decided without passes: `want_fair_share`."""

import pytest

from batchd.scheduler.fairshare import Queue, divide

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot


def pend(acct: str, n: int, gpus: int = 1) -> list[dict]:
    return [job(f"{acct}-{i}", acct, gpus=gpus) for i in range(n)]


CASES = [
    Scenario(id="deserved_capped_by_request",
             nodes=[node("n0", 8)], accounts=[account("a", quota=4), account("b", quota=4)], jobs=pend("a", 2) + pend("b", 6),
             want_fair_share={"a": 2, "b": 4}),
    Scenario(id="phase1_not_capped_by_capacity",
             nodes=[node("n0", 2)], accounts=[account("a", quota=4), account("b", quota=4)], jobs=pend("a", 4) + pend("b", 4),
             want_fair_share={"a": 4, "b": 4}),
    Scenario(id="over_quota_split_by_weight",
             nodes=[node("n0", 10)], accounts=[account("a", quota=2, weight=1), account("b", quota=2, weight=2)],
             jobs=pend("a", 8) + pend("b", 8), want_fair_share={"a": 4, "b": 6}),
    Scenario(id="weight_zero_gets_no_surplus",
             nodes=[node("n0", 10)], accounts=[account("a", quota=2, weight=0), account("b", quota=2, weight=1)],
             jobs=pend("a", 8) + pend("b", 3), want_fair_share={"a": 2, "b": 3}),
    Scenario(id="whole_units_then_leftover_by_largest_remainder",
             nodes=[node("n0", 4)], accounts=[account("a", weight=1), account("b", weight=1), account("c", weight=1)],
             jobs=pend("a", 4) + pend("b", 4) + pend("c", 4), want_fair_share={"a": 2, "b": 1, "c": 1}),
    Scenario(id="leftover_to_older_account_on_equal_remainder",
             nodes=[node("n0", 1)], accounts=[account("a", weight=1), account("b", weight=1)],
             jobs=pend("b", 4) + pend("a", 4), want_fair_share={"a": 1, "b": 0}),
    Scenario(id="higher_priority_bucket_first",
             nodes=[node("n0", 6)], accounts=[account("lo", quota=1, weight=1, priority=100), account("hi", quota=1, weight=1, priority=200)],
             jobs=pend("lo", 6) + pend("hi", 6), want_fair_share={"lo": 1, "hi": 5}),
    Scenario(id="leftovers_only_after_all_buckets",
             nodes=[node("n0", 5)], accounts=[account("a", weight=1, priority=200), account("b", weight=1, priority=200),
                               account("c", weight=1, priority=100)],
             jobs=pend("a", 5) + pend("b", 5) + pend("c", 5), want_fair_share={"a": 2, "b": 2, "c": 1}),
    Scenario(id="satisfied_account_returns_surplus_next_round",
             nodes=[node("n0", 9)], accounts=[account("a", weight=1), account("b", weight=1), account("c", weight=1)],
             jobs=pend("a", 1) + pend("b", 9) + pend("c", 9), want_fair_share={"a": 1, "b": 4, "c": 4}),
    Scenario(id="limit_clips_requestable",
             nodes=[node("n0", 10)], accounts=[account("a", quota=1, limit=3, weight=1), account("b", quota=1, weight=1)],
             jobs=pend("a", 10) + pend("b", 10), want_fair_share={"a": 3, "b": 7}),
    Scenario(id="unlimited_quota_takes_what_it_requests",
             nodes=[node("n0", 4)], accounts=[account("a", quota=-1), account("b", quota=1)], jobs=pend("a", 3) + pend("b", 3),
             want_fair_share={"a": 3, "b": 1}),
    Scenario(id="hierarchy_children_split_parent_share",
             nodes=[node("n0", 12)], accounts=[account("d1", quota=4, weight=1, parent=None), account("d2", quota=4, weight=1, parent=None),
                                account("d1a", quota=1, weight=1, parent="d1"), account("d1b", quota=1, weight=1, parent="d1"),
                                account("d2a", quota=4, weight=1, parent="d2")],
             jobs=pend("d1a", 8) + pend("d1b", 8) + pend("d2a", 2), want_fair_share={"d1": 10, "d2": 2, "d1a": 5, "d1b": 5, "d2a": 2}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_fair_share(case):
    case.verify(passes=[])


def test_running_jobs_count_in_request():
    snap = snapshot([node("n0", 4)], [account("a", quota=1, weight=1), account("b", quota=1, weight=1)],
                    [job("r", "a", gpus=3, running_on={"n0": [0, 1, 2]}), job("p", "b")])
    assert run(snap, passes=[]).fair_share == {"default": 4, "a": 3, "b": 1}


def test_lending_limit_keeps_unused_quota():
    """b lends at most 1 of its 4 unused GPUs: a's share is 2 (quota) + 1, not 6."""
    b = account("b", quota=4, weight=1)
    b["resources"]["gres/gpu"]["lending_limit"] = 1
    snap = snapshot([node("n0", 6)], [account("a", quota=2, weight=1), b], pend("a", 6))
    out = run(snap, passes=["allocate"])
    assert out.fair_share["a"] == 3
    assert out.started == {"a-0", "a-1", "a-2"}
    assert out.reasons == {"a-3": "Resources", "a-4": "Priority", "a-5": "Priority"}


def test_division_keeps_fraction_arithmetic_of_kai():
    qs = []
    for i, w in enumerate((1.0, 2.0)):
        q = Queue(f"q{i}", 100, i)
        q.deserved["g"], q.limit["g"], q.weight["g"], q.lending["g"] = 2.0, -1.0, w, None
        q.fs["g"] = q.alloc["g"] = q.alloc_np["g"] = 0.0
        q.request["g"] = 8.0 if i == 0 else 6.0
        qs.append(q)
    left = divide(10.0, qs, "g", 1.0)
    assert (qs[0].fs["g"], qs[1].fs["g"], left) == (4.0, 6.0, 0.0)


def test_decayed_usage_lowers_over_quota_share():
    accts = [account("a", weight=1), account("b", weight=1)]
    base = snapshot([node("n0", 8)], accts, pend("a", 8) + pend("b", 8))
    assert run(base, passes=[]).fair_share["a"] == 4
    heavy = dict(base, usage={"accounts": {"a": 900.0, "b": 100.0}})
    out = run(heavy, passes=[])
    assert out.fair_share["a"] < out.fair_share["b"]
    assert out.fair_share["a"] + out.fair_share["b"] == 8
