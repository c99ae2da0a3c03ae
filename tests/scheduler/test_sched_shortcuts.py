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

from batchd.scheduler import backfill, decide, load_snapshot, state

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


def test_the_clusters_exercise_reservations():
    """Not a vacuous check: a cluster of this kind holds reservations of repeated shapes."""
    nodes = [node("n0", 2, cpus=8, memory_mb=1000)]
    jobs = [job("r0", "q0", gpus=2, running_on={"n0": [0, 1]}, time_limit_s=500, start_time=NOW - 100)]
    jobs += [job(f"p{k}", "q0", gpus=1, time_limit_s=600) for k in range(4)]
    d = snapshot(nodes, [account("q0", quota=2)], jobs, policy={"backfill": True})
    dec = decide(load_snapshot(d)).to_dict()
    # two start when r0 ends (at +400 s), the next two when those end, 600 s later
    assert dec["planned_start"] == {"p0": NOW + 400, "p1": NOW + 400, "p2": NOW + 1000, "p3": NOW + 1000}
