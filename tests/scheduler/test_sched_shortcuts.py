"""The scheduler's shortcuts change nothing it decides.

`Backfill.reserve` passes over times where no vector can reach the gang's task count within
the later reservations' spare room, and starts the search of a job of an already reserved
shape at that one's planned start (backfill.PRUNE); `Session._add_demand` sums the pending
demand per request where the amounts are whole (state.GROUP_DEMAND). Each is checked against
the plain walk on random clusters with running jobs that end (time limits), pending jobs of a
few repeated shapes and backfill on: the same starts, preemptions, reasons, fair shares and
planned starts."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchd.scheduler import backfill, decide, load_snapshot, ordering, state

from .sched_builders import NOW, account, job, node, snapshot


@st.composite
def busy_clusters(draw):
    n_nodes = draw(st.integers(1, 4))
    per = draw(st.integers(1, 4))
    nodes = [node(f"n{i}", per, cpus=draw(st.integers(2, 8)), memory_mb=1000) for i in range(n_nodes)]
    accts = [account(f"q{i}", quota=draw(st.integers(0, 4)), limit=draw(st.sampled_from([-1, -1, 4, 8])),
                     weight=draw(st.integers(0, 2))) for i in range(draw(st.integers(1, 3)))]
    free = {n["name"]: list(range(per)) for n in nodes}
    cpus = {n["name"]: n["cpus"] for n in nodes}
    jobs = []
    for k in range(draw(st.integers(0, 2 * n_nodes * per))):
        nname = draw(st.sampled_from(sorted(free)))
        g = draw(st.integers(1, 2))
        if len(free[nname]) < g or cpus[nname] < 1:
            continue
        gpus = free[nname][:g]
        del free[nname][:g]
        cpus[nname] -= 1
        jobs.append(job(f"r{k}", draw(st.sampled_from(accts))["name"], gpus=g, prio=draw(st.sampled_from([50, 125])),
                        running_on={nname: gpus}, time_limit_s=draw(st.sampled_from([None, 200, 500, 1000, 3000])),
                        start_time=NOW - draw(st.integers(0, 150))))
    # pending jobs of a few shapes, repeated (the shapes the prunings act on)
    shapes = [(draw(st.integers(1, max(1, per))), draw(st.integers(1, 3)),
               draw(st.sampled_from([None, 100, 600, 2000, 7200]))) for _ in range(draw(st.integers(1, 3)))]
    for k in range(draw(st.integers(1, 24))):
        g, tasks, tl = draw(st.sampled_from(shapes))
        kw = {"nodes": draw(st.sampled_from([None, tasks]))} if tasks > 1 else {}
        jobs.append(job(f"p{k}", draw(st.sampled_from(accts))["name"], gpus=g, tasks=tasks, time_limit_s=tl,
                        prio=draw(st.sampled_from([50, 50, 125])), **kw))
    return snapshot(nodes, accts, jobs, policy={"backfill": True,
                                                "backfill_max_reservations": draw(st.integers(1, 20))})


def _both(d: dict, monkeypatch: pytest.MonkeyPatch, flag: tuple) -> tuple[dict, dict]:
    mod, name = flag
    fast = decide(load_snapshot(d)).to_dict()
    with monkeypatch.context() as m:
        m.setattr(mod, name, False)
        plain = decide(load_snapshot(d)).to_dict()
    return fast, plain


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(busy_clusters())
def test_backfill_prunings_decide_as_the_plain_search(monkeypatch, d):
    fast, plain = _both(d, monkeypatch, (backfill, "PRUNE"))
    assert fast == plain


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(busy_clusters())
def test_demand_summed_per_request_is_the_job_by_job_sum(monkeypatch, d):
    fast, plain = _both(d, monkeypatch, (state, "GROUP_DEMAND"))
    assert fast == plain


def _by_signature_or_not(d: dict, monkeypatch: pytest.MonkeyPatch, explain: bool) -> tuple[dict, dict]:
    with monkeypatch.context() as m:
        m.setattr(ordering, "GROUP_AFTER", 1)  # looks by signature after the first skipped job
        fast = decide(load_snapshot(d), explain=explain).to_dict()
        m.setattr(ordering, "GROUP_AFTER", 10**9)  # job by job
        plain = decide(load_snapshot(d), explain=explain).to_dict()
    return fast, plain


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(busy_clusters(), st.booleans())
def test_pickers_looking_by_signature_pick_as_the_walk(monkeypatch, d, explain):
    fast, plain = _by_signature_or_not(d, monkeypatch, explain)
    assert fast == plain


def test_a_long_run_of_skipped_jobs_is_passed_over_by_signature(monkeypatch):
    """Not a vacuous check: 40 two-GPU jobs of A that cannot start (A's limit of 5 GPUs holds
    them: it runs 3 and X takes one) ahead of one-GPU jobs of A: X, which the held pass starts
    first on the card of V, preempted for it, and a-small, which can start (another signature,
    judged on its own); and B's jobs. Without `explain` the allocate walk passes over A's run by
    signature (PendingPicker looks at the first job of each that is not started), and starts
    what the job-by-job walk starts, X once."""
    nodes = [node("n0", 4, cpus=64, memory_mb=100000), node("n1", 4, cpus=64, memory_mb=100000),
             node("n2", 1, cpus=64, memory_mb=100000)]
    accts = [account("A", quota=2, limit=5), account("B", quota=2)]
    jobs = [job("a-run", "A", gpus=3, prio=125, running_on={"n0": [0, 1, 2]}),  # nobody's victim
            job("V", "B", prio=50, running_on={"n1": [3]}, preempting_for="X")]
    jobs += [job(f"a{k:02d}", "A", gpus=2, prio=125) for k in range(40)]
    jobs += [job("X", "A", gpus=1, prio=50, preemptor=True), job("a-small", "A", gpus=1, prio=50)]
    jobs += [job(f"b{k}", "B", gpus=1) for k in range(3)]
    d = snapshot(nodes, accts, jobs, policy={"backfill": False})
    calls = []
    orig = ordering.PendingPicker._by_signature

    def counted(self, leaf, lst, i):
        calls.append(i)
        return orig(self, leaf, lst, i)

    monkeypatch.setattr(ordering.PendingPicker, "_by_signature", counted)
    fast, plain = _by_signature_or_not(d, monkeypatch, explain=False)
    assert calls  # it did look by signature
    assert fast == plain
    assert sorted(s["job"] for s in fast["start"]) == ["X", "a-small", "b0", "b1", "b2"]


def test_the_clusters_exercise_reservations():
    """Not a vacuous check: a cluster of this kind holds reservations of repeated shapes."""
    nodes = [node("n0", 2, cpus=8, memory_mb=1000)]
    jobs = [job("r0", "q0", gpus=2, running_on={"n0": [0, 1]}, time_limit_s=500, start_time=NOW - 100)]
    jobs += [job(f"p{k}", "q0", gpus=1, time_limit_s=600) for k in range(4)]
    d = snapshot(nodes, [account("q0", quota=2)], jobs, policy={"backfill": True})
    dec = decide(load_snapshot(d)).to_dict()
    # two start when r0 ends (at +400 s), the next two when those end, 600 s later
    assert dec["planned_start"] == {"p0": NOW + 400, "p1": NOW + 400, "p2": NOW + 1000, "p3": NOW + 1000}


def test_a_cycle_leaves_nothing_for_the_cyclic_collector():
    """A cycle that starts, reclaims (with undone attempts) and backfills frees all it built
    when it returns (Session.close breaks its undo log's and its accounts' reference cycles):
    nothing is left for the cyclic garbage collector, which would otherwise walk each
    cycle's thousands of objects later (`batchd simulate` runs tens of thousands of cycles)."""
    import gc

    nodes = [node(f"n{i}", 2, cpus=8, memory_mb=1000) for i in range(3)]
    accts = [account("dept", quota=6, weight=1), account("a", quota=2, weight=1, parent="dept"),
             account("b", quota=4, weight=1, parent="dept")]
    jobs = [job(f"r{i}", "a", running_on={f"n{i // 2}": [i % 2]}, time_limit_s=600 + 60 * i) for i in range(6)]
    jobs += [job(f"p{i}", "b", gpus=1 + i % 2, time_limit_s=300) for i in range(8)]
    jobs += [job(f"x{i}", "a", gpus=2, tasks=2) for i in range(3)]
    snap = load_snapshot(snapshot(nodes, accts, jobs))
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        dec = decide(snap)
        found = gc.collect()
    finally:
        if was:
            gc.enable()
    assert dec.preempt and dec.start  # it did reclaim, and start what it reclaimed for
    assert found == 0
