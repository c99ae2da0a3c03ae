"""Allocate pass: order, gangs, placement, limits, GPU types, MIG, node states, reasons.

`want_started` = jobs started; `want_reasons` = {job: Slurm reason} of jobs left pending."""

import pytest

import batchd.priority

from .scenario import Scenario, ids
from .sched_builders import account, job, node, run, snapshot

CASES = [
    Scenario(id="gang_2x4_with_one_gpu_taken_stays_pending",
             nodes=[node("n0", 4), node("n1", 4)], accounts=[account("a", quota=-1)],
             jobs=[job("busy", "a", running_on={"n0": [2]}), job("gang", "a", gpus=4, tasks=2, nodes=2)],
             want_started=set(), want_reasons={"gang": "Resources"}),
    Scenario(id="gang_2x4_on_two_free_nodes_starts",
             nodes=[node("n0", 4), node("n1", 4)], accounts=[account("a", quota=-1)],
             jobs=[job("gang", "a", gpus=4, tasks=2, nodes=2)],
             want_started={"gang"}, want_reasons={}),
    Scenario(id="blocked_gang_does_not_stop_smaller_lower_job",
             nodes=[node("n0", 2)], accounts=[account("a", quota=-1)],
             jobs=[job("busy", "a", running_on={"n0": [0]}), job("big", "a", gpus=2), job("small", "a")],
             want_started={"small"}, want_reasons={"big": "Resources"}),
    Scenario(id="second_waiter_gets_priority_reason",
             nodes=[node("n0", 1)], accounts=[account("a", quota=-1)],
             jobs=[job("j1", "a"), job("j2", "a"), job("j3", "a")],
             want_started={"j1"}, want_reasons={"j2": "Resources", "j3": "Priority"}),
    Scenario(id="leaf_limit_assoc_grp_gres",
             nodes=[node("n0", 4)], accounts=[account("a", quota=1, limit=1)],
             jobs=[job("j1", "a"), job("j2", "a")],
             want_started={"j1"}, want_reasons={"j2": "AssocGrpGRES"}),
    Scenario(id="parent_limit_applies_to_children",
             nodes=[node("n0", 4)],
             accounts=[account("dept", quota=2, limit=2, weight=1, parent=None),
                       account("a", quota=2, limit=-1, weight=1, parent="dept")],
             jobs=[job("j1", "a"), job("j2", "a"), job("j3", "a")],
             want_started={"j1", "j2"}, want_reasons={"j3": "AssocGrpGRES"}),
    Scenario(id="cpu_limit",
             nodes=[node("n0", 4)],
             accounts=[account("a", quota=-1, extra={"cpu": {"quota": 4, "limit": 4}})],
             jobs=[job("j1", "a", per_task={"cpu": 3}), job("j2", "a", per_task={"cpu": 3})],
             want_started={"j1"}, want_reasons={"j2": "AssocGrpCpuLimit"}),
    Scenario(id="non_preemptible_must_fit_in_quota",
             nodes=[node("n0", 4)], accounts=[account("a", quota=1, limit=-1)],
             jobs=[job("inf1", "a", prio=125), job("inf2", "a", prio=125), job("train", "a", prio=50)],
             want_started={"inf1", "train"}, want_reasons={"inf2": "AssocGrpGRES"}),
    Scenario(id="down_node_req_node_not_avail",
             nodes=[node("n0", 2), node("n1", 8, state="DOWN")], accounts=[account("a", quota=-1)],
             jobs=[job("big", "a", gpus=8)],
             want_started=set(), want_reasons={"big": "ReqNodeNotAvail"}),
    Scenario(id="drained_node_takes_no_job",
             nodes=[node("n0", 2, state="IDLE+DRAIN"), node("n1", 2, state="DRAINED")], accounts=[account("a", quota=-1)],
             jobs=[job("j", "a")],
             want_started=set(), want_reasons={"j": "ReqNodeNotAvail"}),
    Scenario(id="impossible_request_bad_constraints",
             nodes=[node("n0", 2)], accounts=[account("a", quota=-1)],
             jobs=[job("j", "a", gpus=3)],
             want_started=set(), want_reasons={"j": "BadConstraints"}),
    Scenario(id="ineligible_jobs_keep_their_reason",
             nodes=[node("n0", 2)], accounts=[account("a", quota=-1)],
             jobs=[job("held", "a", eligible=False, reason="JobHeldUser"),
                   job("dep", "a", eligible=False, reason="Dependency"), job("j", "a")],
             want_started={"j"}, want_reasons={"held": "JobHeldUser", "dep": "Dependency"}),
    Scenario(id="account_under_quota_served_first",
             nodes=[node("n0", 2)], accounts=[account("a", quota=1), account("b", quota=1)],
             jobs=[job("a_run", "a", running_on={"n0": [0]}), job("a1", "a"), job("b1", "b")],
             want_started={"b1"}, want_reasons={"a1": "Resources"}),
    Scenario(id="higher_account_priority_first",
             nodes=[node("n0", 1)], accounts=[account("lo", quota=1, priority=100), account("hi", quota=1, priority=101)],
             jobs=[job("lo1", "lo"), job("hi1", "hi")],
             want_started={"hi1"}, want_reasons={"lo1": "Resources"}),
    Scenario(id="qos_priority_orders_inside_account",
             nodes=[node("n0", 1)], accounts=[account("a", quota=-1)],
             jobs=[job("old_low", "a", prio=50), job("new_high", "a", prio=75)],
             want_started={"new_high"}, want_reasons={"old_low": "Resources"}),
    Scenario(id="older_job_first_at_equal_priority",
             nodes=[node("n0", 1)], accounts=[account("a", quota=-1)],
             jobs=[job("second", "a", submit_time=200), job("first", "a", submit_time=100)],
             want_started={"first"}, want_reasons={"second": "Resources"}),
    Scenario(id="qos_max_gpus_per_user",
             nodes=[node("n0", 4)], accounts=[account("a", quota=-1)],
             jobs=[job("j1", "a", gpus=2, qos="normal"), job("j2", "a", gpus=2, qos="normal")],
             qos=[{"name": "normal", "max_gpus_per_user": 3}],
             want_started={"j1"}, want_reasons={"j2": "QOSMaxGRESPerUser"}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_allocate(case):
    case.verify(passes=["allocate"])


def allocation(out, jid):
    return next(s["allocation"] for s in out.decisions["start"] if s["job"] == jid)


def test_fewest_nodes_and_exact_nodes():
    nodes = [node("n0", 4), node("n1", 4), node("n2", 2)]
    out = run(snapshot(nodes, [account("a", quota=-1)], [job("j", "a", gpus=1, tasks=6)]), passes=["allocate"])
    assert sorted(allocation(out, "j")) == ["n0", "n1"]
    out = run(snapshot(nodes, [account("a", quota=-1)], [job("j", "a", gpus=1, tasks=3, nodes=3)]), passes=["allocate"])
    alloc = allocation(out, "j")
    assert sorted(alloc) == ["n0", "n1", "n2"] and all(a["tasks"] == 1 for a in alloc.values())
    out = run(snapshot(nodes, [account("a", quota=-1)], [job("j", "a", gpus=1, tasks=4, tasks_per_node=2)]),
              passes=["allocate"])
    assert [a["tasks"] for a in allocation(out, "j").values()] == [2, 2]


def test_pack_and_spread():
    nodes = [node("n0", 4), node("n1", 4)]
    jobs = [job("r", "a", running_on={"n1": [0]}), job("j", "a")]
    packed = run(snapshot(nodes, [account("a", quota=-1)], jobs), passes=["allocate"])
    assert allocation(packed, "j") == {"n1": {"tasks": 1, "gpus": [1], "cpus": 1, "memory_mb": 1, "cpu_ids": [0]}}
    spread = run(snapshot(nodes, [account("a", quota=-1)], jobs), passes=["allocate"], placement="spread")
    assert allocation(spread, "j") == {"n0": {"tasks": 1, "gpus": [0], "cpus": 1, "memory_mb": 1, "cpu_ids": [0]}}


def test_cpu_and_memory_are_part_of_the_gang():
    nodes = [node("n0", 2, cpus=8, memory_mb=1000)]
    jobs = [job("j1", "a", per_task={"gres/gpu": 1, "cpu": 6, "mem": 100}),
            job("j2", "a", per_task={"gres/gpu": 1, "cpu": 4, "mem": 100})]
    out = run(snapshot(nodes, [account("a", quota=-1)], jobs), passes=["allocate"])
    assert out.started == {"j1"} and out.reasons == {"j2": "Resources"}


def test_typed_quota_routes_untyped_request():
    """`gres/gpu:h200` limit 0 for the account: its untyped job runs on the other type; a job
    asking for h200 explicitly pends on the account limit."""
    nodes = [node("n0", devices=[{"index": 0, "type": "h200"}, {"index": 1, "type": "rtxpro6000"}])]
    acct = account("a", quota=-1, extra={"gres/gpu:h200": {"quota": 0, "limit": 0}})
    jobs = [job("untyped", "a"), job("typed", "a", per_task={"gres/gpu:h200": 1, "cpu": 1})]
    out = run(snapshot(nodes, [acct], jobs), passes=["allocate"])
    assert allocation(out, "untyped")["n0"]["gpus"] == [1]
    assert out.reasons == {"typed": "AssocGrpGRES"}


def test_typed_request_only_that_type():
    nodes = [node("n0", devices=[{"index": 0, "type": "h200"}, {"index": 1, "type": "rtxpro6000"}])]
    out = run(snapshot(nodes, [account("a", quota=-1)], [job("t", "a", per_task={"gres/gpu:rtxpro6000": 1})]),
              passes=["allocate"])
    assert allocation(out, "t")["n0"]["gpus"] == [1]


def test_mig_instances():
    """A GPU with MIG instances is never handed out whole; a profile request gets an instance,
    reported as "<gpu index>:<mig uuid>"."""
    out = run(snapshot([node("n0", devices=MIG_DEVS)], [account("a", quota=-1)],
                       [job("whole1", "a"), job("whole2", "a"), job("mig1", "a", per_task={"gres/gpu:1g.24gb": 1})]),
              passes=["allocate"])
    assert allocation(out, "whole1")["n0"]["gpus"] == [1]
    assert allocation(out, "mig1")["n0"]["gpus"] == ["0:MIG-1"]
    assert out.reasons == {"whole2": "Resources"}


def test_mig_instance_counts_its_slice_share_toward_gres_gpu():
    """1g.24gb on a 4-slice GPU is 0.25 GPU: with a limit of 1.5, one whole GPU and two
    instances fit, a third instance does not."""
    jobs = [job("whole", "a")] + [job(f"mig{i}", "a", per_task={"gres/gpu:1g.24gb": 1}) for i in range(3)]
    devs = MIG_DEVS[:1] + [dict(MIG_DEVS[0], index=2, uuid="GPU-c", mig=[{"profile": "1g.24gb", "uuid": "MIG-3"}])] \
        + MIG_DEVS[1:]
    out = run(snapshot([node("n0", devices=devs)], [account("a", quota=-1, limit=1.5)], jobs), passes=["allocate"])
    assert out.started == {"whole", "mig0", "mig1"}
    assert out.reasons == {"mig2": "AssocGrpGRES"}


MIG_DEVS = [{"index": 0, "uuid": "GPU-a", "type": "rtxpro6000",
             "mig": [{"profile": "1g.24gb", "uuid": "MIG-1"}, {"profile": "1g.24gb", "uuid": "MIG-2"}]},
            {"index": 1, "uuid": "GPU-b", "type": "rtxpro6000"}]


def test_multifactor_priority_hook(monkeypatch):
    def fake(snapshot, policy):
        return {"low": 10, "high": 1000}
    monkeypatch.setattr(batchd.priority, "job_priorities", fake, raising=False)
    out = run(snapshot([node("n0", 1)], [account("a", quota=-1)], [job("low", "a"), job("high", "a")]),
              passes=["allocate"])
    assert out.started == {"high"}


def test_integer_ids_echoed_as_given():
    snap = snapshot([node("n0", 1)], [account("a", quota=-1)], [job(7, "a"), job(8, "a")])
    d = run(snap, passes=["allocate"]).decisions
    assert d["start"][0]["job"] == 7 and d["pending"] == [{"job": 8, "reason": "Resources"}]


def test_partition_nodes_restrict_placement():
    nodes = [node("n0", 2), node("n1", 2)]
    jobs = [job("j", "a", partition_nodes=["n1"]), job("k", "a", gpus=2, partition_nodes=["n0"]),
            job("far", "a", gpus=3, partition_nodes=["n1"])]
    out = run(snapshot(nodes, [account("a", quota=-1)], jobs), passes=["allocate"])
    assert list(allocation(out, "j")) == ["n1"] and list(allocation(out, "k")) == ["n0"]
    assert out.reasons == {"far": "BadConstraints"}


def test_exclusive_takes_whole_empty_node():
    nodes = [node("n0", 4, cpus=8, memory_mb=100), node("n1", 4, cpus=8, memory_mb=100)]
    jobs = [job("busy", "a", running_on={"n0": [0]}), job("ex", "a", exclusive=True),
            job("other", "a")]
    out = run(snapshot(nodes, [account("a", quota=-1)], jobs), passes=["allocate"])
    # every CPU and GPU, the memory it asked (Slurm 22.05 on the peer: --exclusive without --mem
    # allocates DefMemPerCPU x the node's CPUs, 16G of a 23G node, not the node's memory)
    assert allocation(out, "ex") == {"n1": {"tasks": 1, "gpus": [0, 1, 2, 3], "cpus": 8, "memory_mb": 1,
                                            "cpu_ids": list(range(8))}}
    assert list(allocation(out, "other")) == ["n0"]


def test_smaller_dominant_share_served_first():
    """Both accounts are over quota; b holds less of its allocatable share, so b goes first."""
    jobs = [job("a_r0", "a", running_on={"n0": [0]}), job("a_r1", "a", running_on={"n0": [1]}),
            job("b_r0", "b", running_on={"n0": [2]}), job("a1", "a"), job("b1", "b")]
    out = run(snapshot([node("n0", 4)], [account("a", quota=1), account("b", quota=1)], jobs), passes=["allocate"])
    assert out.started == {"b1"} and out.reasons == {"a1": "Resources"}


def test_equal_accounts_older_account_first():
    jobs = [job("b1", "b"), job("a1", "a")]
    out = run(snapshot([node("n0", 1)], [account("a", quota=1), account("b", quota=1)], jobs), passes=["allocate"])
    assert out.started == {"a1"}


# Restated from KAI's allocate tests (queues under a `default` department, weight 0).
KAI_ALLOCATE = [
    Scenario(id="build_job_within_quota_first",
             nodes=[node("node0", 4)], accounts=[account("queue1", quota=2)],
             jobs=[job("running_job0", "queue1", gpus=2, running_on={"node0": [0, 1]}),
                   job("pending_job0", "queue1", gpus=4), job("pending_job1", "queue1", gpus=2),
                   job("pending_job2", "queue1", gpus=2, prio=100)],
             want_started={"pending_job2"}),
    Scenario(id="build_job_beyond_quota_train_job_instead",
             nodes=[node("node0", 4)], accounts=[account("queue1", quota=1)],
             jobs=[job("running_job0", "queue1", gpus=2, running_on={"node0": [0, 1]}),
                   job("pending_job0", "queue1", gpus=4), job("pending_job1", "queue1", gpus=2),
                   job("pending_job2", "queue1", gpus=2, prio=100)],
             want_started={"pending_job1"}),
    Scenario(id="cpu_only_best_effort_jobs_allocated",
             nodes=[node("node0", 2)], accounts=[account("queue1", quota=2)],
             jobs=[job("running_job0", "queue1", gpus=2, prio=100, running_on={"node0": [0, 1]}),
                   job("pending_job0", "queue1", gpus=0), job("pending_job1", "queue1", gpus=0)],
             want_started={"pending_job0", "pending_job1"}),
    Scenario(id="queue_staying_within_quota_first",
             nodes=[node("node0", 4)], accounts=[account("queue0", quota=2), account("queue1", quota=2)],
             jobs=[job("running_job0", "queue0", running_on={"node0": [0]}),
                   job("running_job1", "queue1", running_on={"node0": [1]}),
                   job("pending_job0", "queue0", gpus=2), job("pending_job1", "queue1")],
             want_started={"pending_job1"}),
    Scenario(id="equal_share_with_job_smaller_share_without_first",
             nodes=[node("node0", 4)], accounts=[account("queue0", quota=3), account("queue1", quota=2)],
             jobs=[job("running_job0", "queue0", gpus=2, running_on={"node0": [0, 1]}),
                   job("pending_job0", "queue0"), job("pending_job1", "queue1", gpus=2)],
             want_started={"pending_job1"}),
    Scenario(id="same_shares_smaller_allocatable_first",
             nodes=[node("node0", 5)], accounts=[account("queue0", quota=4), account("queue1", quota=2)],
             jobs=[job("running_job0", "queue0", gpus=2, running_on={"node0": [0, 1]}),
                   job("running_job1", "queue1", running_on={"node0": [2]}),
                   job("pending_job0", "queue0", gpus=2), job("pending_job1", "queue1")],
             want_started={"pending_job1"}),
    Scenario(id="exactly_same_share_older_queue_first",
             nodes=[node("node0", 5)], accounts=[account("queue0", quota=2), account("queue1", quota=2)],
             jobs=[job("running_job0", "queue0", gpus=2, running_on={"node0": [0, 1]}),
                   job("running_job1", "queue1", gpus=2, running_on={"node0": [2, 3]}),
                   job("pending_job0", "queue0"), job("pending_job1", "queue1")],
             want_started={"pending_job0"}),
    Scenario(id="queue_with_quota_before_queue_without",
             nodes=[node("node0", 1)], accounts=[account("queue0", quota=0), account("queue1", quota=1)],
             jobs=[job("pending_job0", "queue0"), job("pending_job1", "queue1")],
             want_started={"pending_job1"}),
]


@pytest.mark.parametrize("case", KAI_ALLOCATE, ids=ids(KAI_ALLOCATE))
def test_kai_allocate_order(case):
    case.verify(passes=["allocate"])


def test_gres_shard_is_counted_on_its_card():
    n0 = dict(node("n0", 1), shards=4)
    jobs = [job("s1", "a", per_task={"gres/shard": 3}), job("s2", "a", per_task={"gres/shard": 2}),
            job("s3", "a", per_task={"gres/shard": 1})]
    out = run(snapshot([n0], [account("a", quota=-1)], jobs), passes=["allocate"])
    assert out.started == {"s1", "s3"} and out.reasons == {"s2": "Resources"}
    assert allocation(out, "s1")["n0"]["shards"] == 3 and allocation(out, "s1")["n0"]["shard_gpus"] == [0]
