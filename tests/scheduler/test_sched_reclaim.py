"""Reclaim scenarios (one reclaim pass). Several are restated from KAI's reclaim tests.

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares), one reclaim
pass: `want_started`, `want_preempted`; every victim is a reclaim.
"""

import pytest

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot

CASES = [
    Scenario(
        id="victims_lowest_priority_first_across_queues_under_department",
        nodes=[node("node0", 6)],
        accounts=[account("d1", quota=1, weight=1, parent=None),
                  account("queue0", quota=1, weight=1, parent="d1"),
                  account("queue1", quota=1, weight=1, parent="d1"),
                  account("reclaimer_queue", quota=2, weight=0, parent="d1")],
        jobs=[job("q0_running_job0", "queue0", running_on={"node0": [0]}),
              job("q0_running_job1", "queue0", running_on={"node0": [1]}),
              job("q0_running_job2", "queue0", prio=49, running_on={"node0": [2]}),
              job("q1_running_job0", "queue1", running_on={"node0": [3]}),
              job("q1_running_job1", "queue1", running_on={"node0": [4]}),
              job("q1_running_job2", "queue1", prio=49, running_on={"node0": [5]}),
              job("reclaimer", "reclaimer_queue", tasks=2)],
        want_started={"reclaimer"}, want_preempted={"q0_running_job2", "q1_running_job2"}),
    Scenario(
        id="victim_account_may_drop_below_quota_by_whole_gang",
        nodes=[node("node0", 16), node("node1", 16)],
        accounts=[account("queue0", quota=10, weight=1), account("queue1", quota=10, weight=1)],
        jobs=[job("q0_running_job", "queue0", gpus=10, tasks=2,
                  running_on={"node0": list(range(10)), "node1": list(range(10))}),
              job("q1_pending_job", "queue1", gpus=10)],
        want_started={"q1_pending_job"}, want_preempted={"q0_running_job"}),
    Scenario(
        id="over_quota_under_fair_share_victim_newest_first",
        nodes=[node(f"node{i}", 3) for i in range(6)],
        accounts=[account("queue0", quota=2, weight=1), account("queue1", quota=2, weight=1)],
        jobs=[job(f"q0_running_job{i}", "queue0", gpus=2, running_on={f"node{i}": [0, 1]}) for i in range(6)]
        + [job(f"q0_pending_job{i}", "queue0", gpus=2) for i in (6, 7, 8)]
        + [job("q1_pending_job0", "queue1", gpus=2)],
        want_started={"q1_pending_job0"}, want_preempted={"q0_running_job5"}),
    Scenario(
        id="gang_reclaimer_takes_four_single_gpu_victims",
        nodes=[node(f"node{i}", 1) for i in range(4)],
        accounts=[account("queue0", quota=0, weight=0), account("queue1", quota=2, weight=1)],
        jobs=[job("q0_job0", "queue0", running_on={"node0": [0]}),
              job("q0_job1", "queue0", running_on={"node1": [0]}),
              job("q0_job2", "queue0", running_on={"node2": [0]}),
              job("q1_job0", "queue0", running_on={"node3": [0]}),
              job("q1_job1", "queue1", tasks=4)],
        want_started={"q1_job1"}, want_preempted={"q0_job0", "q0_job1", "q0_job2", "q1_job0"}),
    Scenario(
        id="unneeded_victim_stays",
        nodes=[node(f"node{i}", 1) for i in range(4)],
        accounts=[account("queue0", quota=1, weight=0), account("queue1", quota=2, weight=1)],
        jobs=[job("q0_job0", "queue0", tasks=3, running_on={"node0": [0], "node1": [0], "node2": [0]}),
              job("q0_job1", "queue0", running_on={"node3": [0]}),
              job("q1_job1", "queue1", tasks=3)],
        want_started={"q1_job1"}, want_preempted={"q0_job0"}),
    Scenario(
        id="multi_queue_multi_node_gang_reclaimer_zero_share_queue_first",
        nodes=[node("node0", 2), node("node1", 2)],
        accounts=[account("queue0", quota=0), account("queue1", quota=1), account("queue2", quota=3)],
        jobs=[job("job0", "queue0", running_on={"node0": [0]}), job("job1", "queue1", running_on={"node0": [1]}),
              job("job2", "queue0", running_on={"node1": [0]}), job("job3", "queue1", running_on={"node1": [1]}),
              job("pending_job", "queue2", tasks=3)],
        want_started={"pending_job"}, want_preempted={"job0", "job2", "job3"}),
    Scenario(
        id="one_victim_of_two_gpus_serves_one_reclaimer_only",
        nodes=[node("node0", 2)],
        accounts=[account("queue0", quota=1, weight=1), account("queue1", quota=1, weight=1)],
        jobs=[job("running_job0", "queue0", gpus=2, running_on={"node0": [0, 1]}),
              job("pending_job0", "queue1"), job("pending_job1", "queue1")],
        want_started={"pending_job0"}, want_preempted={"running_job0"}),
    Scenario(
        id="never_below_quota_when_victim_at_quota",
        nodes=[node("node0", 2)],
        accounts=[account("queue0", quota=1, weight=1), account("queue1", quota=1, weight=1)],
        jobs=[job("q0_run", "queue0", running_on={"node0": [0]}),
              job("q1_run", "queue1", running_on={"node0": [1]}),
              job("q1_pend", "queue1")],
        want_started=set(), want_preempted=set()),
    Scenario(
        id="non_preemptible_victim_never_taken",
        nodes=[node("node0", 2)],
        accounts=[account("queue0", quota=0, weight=1), account("queue1", quota=2, weight=1)],
        jobs=[job("q0_run0", "queue0", prio=125, running_on={"node0": [0]}),
              job("q0_run1", "queue0", prio=125, running_on={"node0": [1]}),
              job("q1_pend", "queue1")],
        want_started=set(), want_preempted=set()),
    Scenario(
        id="reclaimer_above_fair_share_may_not_reclaim",
        nodes=[node("node0", 4)],
        accounts=[account("queue0", quota=2, weight=1), account("queue1", quota=2, weight=1)],
        jobs=[job(f"q0_run{i}", "queue0", running_on={"node0": [i]}) for i in range(2)]
        + [job(f"q1_run{i}", "queue1", running_on={"node0": [2 + i]}) for i in range(2)]
        + [job("q1_pend", "queue1")],
        want_started=set(), want_preempted=set()),
    Scenario(
        id="non_preemptible_reclaimer_only_up_to_quota",
        nodes=[node("node0", 4)],
        accounts=[account("queue0", quota=1, weight=1), account("queue1", quota=1, weight=3)],
        jobs=[job(f"q0_run{i}", "queue0", running_on={"node0": [i]}) for i in range(3)]
        + [job("q1_run", "queue1", prio=125, running_on={"node0": [3]}),
           job("q1_pend", "queue1", prio=125)],
        want_started=set(), want_preempted=set()),
    Scenario(
        id="preemptible_reclaimer_up_to_fair_share",
        nodes=[node("node0", 4)],
        accounts=[account("queue0", quota=1, weight=1), account("queue1", quota=1, weight=3)],
        jobs=[job(f"q0_run{i}", "queue0", running_on={"node0": [i]}) for i in range(3)]
        + [job("q1_run", "queue1", running_on={"node0": [3]}), job("q1_pend", "queue1")],
        want_started={"q1_pend"}, want_preempted={"q0_run2"}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_reclaim(case):
    out = case.verify(passes=["reclaim"])
    assert {p["reason"] for p in out.decisions["preempt"]} <= {"reclaim"}


def test_reclaimer_starts_after_its_victims():
    snap = snapshot([node("node0", 2)],
                    [account("queue0", quota=0), account("queue1", quota=2, weight=1)],
                    [job("v", "queue0", running_on={"node0": [0]}), job("r", "queue1", tasks=2)])
    d = run(snap, passes=["reclaim"]).decisions
    assert d["start"] == [{"job": "r", "allocation": {"node0": {"tasks": 2, "gpus": [0, 1], "cpus": 2,
                                                                  "memory_mb": 2, "cpu_ids": [0, 1]}},
                           "after": ["v"],
                           "charge": {"tres": {"cpu": 2, "mem": 2, "node": 1, "gres/gpu:gpu": 2, "gres/gpu": 2},
                                      "parts": [["gres/gpu:gpu", 2, "gpu", 2]]}}]
    assert d["preempt"] == [{"job": "v", "reason": "reclaim", "for": "r", "policy": "reclaim_within_cohort=any"}]


def test_quota_reclaim_by_priority_opt_in():
    """A higher-priority account within its quota may take from an account at its quota only
    with quota_reclaim_by_priority."""
    snap = snapshot([node("node0", 2)],
                    [account("low", quota=2, weight=1, priority=100), account("high", quota=1, weight=1, priority=200)],
                    [job("l0", "low", running_on={"node0": [0]}), job("l1", "low", running_on={"node0": [1]}),
                     job("h", "high")])
    # low is at its quota (2): protected by default
    assert run(snap, passes=["reclaim"]).preempted == set()
    out = run(snap, passes=["reclaim"], quota_reclaim_by_priority=True)
    assert out.started == {"h"}
    assert out.preempted == {"l1"}


def test_saturation_guard_blocks_reclaimer_ending_more_saturated():
    """queue1 (fair share 1) holding 1 GPU may not take a second one from queue0 whose
    saturation would stay lower than queue1's."""
    snap = snapshot([node("node0", 3)],
                    [account("queue0", quota=1, weight=1), account("queue1", quota=1, weight=1)],
                    [job("q0_run0", "queue0", running_on={"node0": [0]}),
                     job("q0_run1", "queue0", running_on={"node0": [1]}),
                     job("q1_run", "queue1", running_on={"node0": [2]}),
                     job("q1_pend", "queue1")])
    out = run(snap, passes=["reclaim"])
    assert out.preempted == set()


def test_victims_from_lower_priority_account_first():
    """Allocation would serve the priority-150 account before the priority-50 one, so victims
    come from the priority-50 account first (KAI: victim order is allocation order reversed)."""
    snap = snapshot([node("n0", 2)],
                    [account("r", quota=2, weight=1), account("a", quota=0, weight=1, priority=50),
                     account("b", quota=0, weight=1, priority=150)],
                    [job("a_run", "a", running_on={"n0": [0]}), job("b_run", "b", running_on={"n0": [1]}),
                     job("r_pend", "r")])
    out = run(snap, passes=["reclaim"])
    assert out.started == {"r_pend"}
    assert out.preempted == {"a_run"}


def test_victim_preferred_by_allocation_order_takes_its_place_back():
    """kai_semantics 7: the scenario is re-allocated in allocation order; the higher-priority
    victim account is served before the reclaimer, takes its GPUs back, and nothing is
    evicted (otherwise the two accounts would take the GPU from each other every cycle)."""
    snap = snapshot([node("n0", 4)],
                    [account("hi", quota=1, weight=0, priority=200), account("lo", quota=1, weight=1, priority=100)],
                    [job(f"hi{i}", "hi", running_on={"n0": [i]}) for i in range(3)]
                    + [job("lo_run", "lo", running_on={"n0": [3]}), job("lo_pend", "lo")])
    out = run(snap, passes=["reclaim"])
    assert out.fair_share["lo"] == 2 and out.fair_share["hi"] == 1
    assert out.preempted == set() and out.started == set()


def test_three_team_16_gpu_design_lending_and_reclaim():
    """examples/accounts-16gpu.toml's design: training borrows all idle cards; notebooks submit
    4 one-GPU jobs and get them back from training within one cycle; serving is never touched;
    later cycles change nothing."""
    from .sched_builders import apply
    nodes = [node(f"gpu{i}", 4, gpu_type="rtxpro6000") for i in range(4)]
    accts = [account("serving", quota=6, limit=6, weight=1, parent=None),
             account("training", quota=6, limit=-1, weight=2, parent=None),
             account("notebooks", quota=4, limit=8, weight=1, parent=None)]
    slots = [(f"gpu{i}", g) for i in range(4) for g in range(4)]
    jobs = [job(f"srv{k}", "serving", prio=125, preemptible=False, running_on={slots[k][0]: [slots[k][1]]})
            for k in range(6)]
    jobs += [job(f"trn{k}", "training", prio=50, running_on={slots[6 + k][0]: [slots[6 + k][1]]}) for k in range(10)]
    jobs += [job(f"nb{k}", "notebooks", prio=75) for k in range(4)]
    snap = snapshot(nodes, accts, jobs)
    first = run(snap).decisions
    victims = {p["job"] for p in first["preempt"]}
    assert len(victims) == 4 and all(v.startswith("trn") for v in victims)
    assert {s["job"] for s in first["start"]} == {f"nb{k}" for k in range(4)}
    assert all(s["after"] for s in first["start"])
    apply(snap, first)
    for _ in range(3):
        d = run(snap).decisions
        assert d["preempt"] == [] and d["start"] == []
        apply(snap, d)
    assert {j["id"] for j in snap["jobs"] if j["state"] == "PENDING"} == victims


def test_reclaim_never_breaks_the_reclaimers_limit():
    """The parent of the reclaimer caps it at 1 GPU: no reclaim for a second one."""
    snap = snapshot([node("n0", 2)],
                    [account("other", quota=0, weight=1, parent=None),
                     account("dept", quota=2, limit=1, weight=1, parent=None),
                     account("team", quota=2, weight=1, parent="dept")],
                    [job("o0", "other", running_on={"n0": [0]}), job("t0", "team", running_on={"n0": [1]}),
                     job("t1", "team")])
    out = run(snap, passes=["reclaim"])
    assert out.preempted == set() and out.started == set()
