"""Fair-share division (KAI's proportion plugin): phases, buckets, weights, rounding, hierarchy,
limits, lending limits. `want_fair_share` = {account: gres/gpu fair share}."""

import pytest

from batchd.scheduler.fairshare import Queue, divide

from .sched_builders import account, job, node, run, snapshot


def pend(acct: str, n: int, gpus: int = 1) -> list[dict]:
    return [job(f"{acct}-{i}", acct, gpus=gpus) for i in range(n)]


CASES = [
    dict(id="deserved_capped_by_request",
         gpus=8, accounts=[account("a", quota=4), account("b", quota=4)], jobs=pend("a", 2) + pend("b", 6),
         want={"a": 2, "b": 4}),
    dict(id="phase1_not_capped_by_capacity",
         gpus=2, accounts=[account("a", quota=4), account("b", quota=4)], jobs=pend("a", 4) + pend("b", 4),
         want={"a": 4, "b": 4}),
    dict(id="over_quota_split_by_weight",
         gpus=10, accounts=[account("a", quota=2, weight=1), account("b", quota=2, weight=2)],
         jobs=pend("a", 8) + pend("b", 8), want={"a": 4, "b": 6}),
    dict(id="weight_zero_gets_no_surplus",
         gpus=10, accounts=[account("a", quota=2, weight=0), account("b", quota=2, weight=1)],
         jobs=pend("a", 8) + pend("b", 3), want={"a": 2, "b": 3}),
    dict(id="whole_units_then_leftover_by_largest_remainder",
         gpus=4, accounts=[account("a", weight=1), account("b", weight=1), account("c", weight=1)],
         jobs=pend("a", 4) + pend("b", 4) + pend("c", 4), want={"a": 2, "b": 1, "c": 1}),
    dict(id="leftover_to_older_account_on_equal_remainder",
         gpus=1, accounts=[account("a", weight=1), account("b", weight=1)],
         jobs=pend("b", 4) + pend("a", 4), want={"a": 1, "b": 0}),
    dict(id="higher_priority_bucket_first",
         gpus=6, accounts=[account("lo", quota=1, weight=1, priority=100), account("hi", quota=1, weight=1, priority=200)],
         jobs=pend("lo", 6) + pend("hi", 6), want={"lo": 1, "hi": 5}),
    dict(id="leftovers_only_after_all_buckets",
         gpus=5, accounts=[account("a", weight=1, priority=200), account("b", weight=1, priority=200),
                           account("c", weight=1, priority=100)],
         jobs=pend("a", 5) + pend("b", 5) + pend("c", 5), want={"a": 2, "b": 2, "c": 1}),
    dict(id="satisfied_account_returns_surplus_next_round",
         gpus=9, accounts=[account("a", weight=1), account("b", weight=1), account("c", weight=1)],
         jobs=pend("a", 1) + pend("b", 9) + pend("c", 9), want={"a": 1, "b": 4, "c": 4}),
    dict(id="limit_clips_requestable",
         gpus=10, accounts=[account("a", quota=1, limit=3, weight=1), account("b", quota=1, weight=1)],
         jobs=pend("a", 10) + pend("b", 10), want={"a": 3, "b": 7}),
    dict(id="unlimited_quota_takes_what_it_requests",
         gpus=4, accounts=[account("a", quota=-1), account("b", quota=1)], jobs=pend("a", 3) + pend("b", 3),
         want={"a": 3, "b": 1}),
    dict(id="hierarchy_children_split_parent_share",
         gpus=12, accounts=[account("d1", quota=4, weight=1, parent=None), account("d2", quota=4, weight=1, parent=None),
                            account("d1a", quota=1, weight=1, parent="d1"), account("d1b", quota=1, weight=1, parent="d1"),
                            account("d2a", quota=4, weight=1, parent="d2")],
         jobs=pend("d1a", 8) + pend("d1b", 8) + pend("d2a", 2), want={"d1": 10, "d2": 2, "d1a": 5, "d1b": 5, "d2a": 2}),
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_fair_share(case):
    out = run(snapshot([node("n0", case["gpus"])], case["accounts"], case["jobs"]), passes=[])
    for acct, want in case["want"].items():
        assert out.fair_share[acct] == want, acct


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
