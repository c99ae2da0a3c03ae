"""One usage cycle over a snapshot (batchd.priority.accrual)."""

import pytest

from batchd.priority.accrual import advance_snapshot_usage, cycle_charges
from batchd.priority.usage import job_usage

WEEK = 604800


def _snap(jobs, usage=None, **kw):
    s = {"now": 1300.0, "nodes": [{"name": "n0", "cpus": 16, "memory_mb": 65536,
                                   "gpus": [{"type": "h200", "count": 4}]}],
         "accounts": [{"name": "t", "parent": None, "shares": 1}],
         "policy": {"tres_billing_weights": "CPU=1.0,Mem=0.25G,GRES/gpu=2.0,GRES/gpu:h200=4.0"},
         "qos": [{"name": "low", "usage_factor": 0.5}], "jobs": jobs, "usage": {"users": usage or {}}}
    s.update(kw)
    return s


def _run(jid, user, **kw):
    j = {"id": jid, "account": "t", "user": user, "state": "RUNNING", "start_time": 0.0, "tasks": 1,
         "per_task": {"cpu": 2, "mem": 4096, "gres/gpu": 2},
         "allocation": {"n0": {"tasks": 1, "gpus": [0, 1], "cpus": 2, "memory_mb": 4096}}}
    j.update(kw)
    return j


def test_billing_from_allocation_with_typed_weight():
    (c,) = cycle_charges(_snap([_run(1, "u")]), 1000.0)
    # 2 CPUs + 4 GiB x 0.25 + 2 h200 x 4 (the typed weight replaces GRES/gpu=2)
    assert c.billing == pytest.approx(2 + 1 + 8)
    assert (c.key, c.start_s, c.end_s, c.usage_factor) == ("t/u", 0.0, None, 1.0)


def test_cycle_adds_running_and_ended_jobs_and_decays():
    jobs = [_run(1, "u", billing=10.0), _run(2, "v", billing=4.0, qos="low"),
            _run(3, "w", billing=6.0, state="PREEMPTED", end_time=1100.0),
            _run(4, "x", billing=6.0, state="COMPLETED", end_time=900.0),
            {"id": 5, "account": "t", "user": "y", "state": "PENDING"}]
    got = advance_snapshot_usage(_snap(jobs, {"t/u": 1e6}), 1000.0)
    assert got["t/u"] == pytest.approx(1e6 * (1 - 0.693 / WEEK) ** 300 + job_usage(10.0, 300, WEEK))
    assert got["t/v"] == pytest.approx(job_usage(4.0, 300, WEEK, 0.5))
    assert got["t/w"] == pytest.approx(job_usage(6.0, 100, WEEK))
    assert "t/x" not in got and "t/y" not in got


def test_mig_allocation_counts_its_share_and_own_type():
    node = {"name": "m0", "cpus": 32, "memory_mb": 65536,
            "gpus": [{"index": 0, "uuid": "GPU-a", "type": "rtxpro6000", "slices": 4,
                      "mig": [{"profile": "1g.24gb", "uuid": "MIG-1"}, {"profile": "1g.24gb", "uuid": "MIG-2"}]},
                     {"index": 1, "uuid": "GPU-b", "type": "rtxpro6000"}]}
    job = _run(1, "u", per_task={"cpu": 1, "mem": 0}, allocation={"m0": {"gpus": ["MIG-1"], "cpus": 1}})
    snap = _snap([job], nodes=[node],
                 policy={"tres_billing_weights": "CPU=0,GRES/gpu=2.0,GRES/gpu:rtxpro6000=4.0"})
    (c,) = cycle_charges(snap, 0.0)
    # no weight for 1g.24gb: a quarter of an rtxpro6000 at that card type's weight (issue 14)
    assert c.billing == pytest.approx(1.0)
    snap["policy"]["tres_billing_weights"] = "CPU=0,GRES/gpu=2.0"
    (c,) = cycle_charges(snap, 0.0)
    assert c.billing == pytest.approx(0.5)  # no type weight either: a quarter card at the generic weight
    snap["policy"]["tres_billing_weights"] = "CPU=0,GRES/gpu=2.0,GRES/gpu:rtxpro6000=4.0,GRES/gpu:1g.24gb=0.6"
    (c,) = cycle_charges(snap, 0.0)
    assert c.billing == pytest.approx(0.6)
    whole = _run(2, "u", per_task={"cpu": 1, "mem": 0}, allocation={"m0": {"gpus": [1], "cpus": 1}})
    (c,) = cycle_charges(_snap([whole], nodes=[node], policy=snap["policy"]), 0.0)
    assert c.billing == pytest.approx(4.0)


def test_partition_billing_weights_override_cluster_wide():
    job = _run(1, "u", partition="cheap")
    snap = _snap([job], partitions=[{"name": "cheap", "tres_billing_weights": "GRES/gpu=0.5"}])
    (c,) = cycle_charges(snap, 0.0)
    assert c.billing == pytest.approx(1.0)
    job["partition"] = "other"
    (c,) = cycle_charges(snap, 0.0)
    assert c.billing == pytest.approx(11.0)
