"""What a start is charged for (issue 14): decide() returns each start's charge from the GPU
model (batchd/slurm/gres.py), and quota and limit checks count the same shares: a MIG instance its
compute slices over its card's slices (4 on an RTX PRO 6000, 7 on an H200), a shard
1/(shards of its card).

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares), one allocate
pass: `nodes`, `accounts`, `jobs` in; `want_started`, `want_reasons`, `want_charge`.
"""

import pytest

from .scenario import Scenario, ids
from .sched_builders import account, job, node

RTX_MIG = node("m0", devices=[{"index": 0, "uuid": "GPU-r", "type": "rtxpro6000",
                               "mig": [{"profile": "1g.24gb", "uuid": f"MIG-{i}"} for i in range(4)]}])
H200_CI = node("c0", devices=[{"index": 0, "uuid": "GPU-h", "type": "h200",
                               "mig": [{"profile": "1c.3g.71gb", "uuid": f"CI-{i}"} for i in range(3)]}])
SHARDED = dict(node("s0", devices=[{"index": 0, "type": "h200"}, {"index": 1, "type": "h200"}]), shards=8)


def mig(jid, acct="a", profile="1g.24gb", n=1, **kw):
    return job(jid, acct, per_task={f"gres/gpu:{profile}": n, "cpu": 1, "mem": 1}, **kw)


def shard(jid, n, acct="a", **kw):
    return job(jid, acct, per_task={"gres/shard": n, "cpu": 1, "mem": 1}, **kw)


def lim(x):
    return [account("a", quota=0, limit=x, weight=1)]


def running_shard(jid, n, card, acct="a"):
    d = shard(jid, n, acct)
    d.update(state="RUNNING", start_time=1_999_000,
             allocation={"s0": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 1, "shards": n, "shard_gpus": [card]}})
    return d


def _charge(tres, parts):
    return {"tres": tres, "parts": parts}


CASES = [
    # a 1g.24gb instance is a quarter of an RTX PRO 6000: two fit a limit of 0.5, not three (at 1/7 three did)
    Scenario(id="mig-4-slice-card-limit", nodes=[RTX_MIG], accounts=lim(0.5), jobs=[mig("j1"), mig("j2"), mig("j3")],
             want_started={"j1", "j2"}, want_reasons={"j3": "AssocGrpGRES"},
             want_charge={"j1": _charge({"cpu": 1, "mem": 1, "node": 1, "gres/gpu:1g.24gb": 1, "gres/gpu": 0.25},
                                        [["gres/gpu:1g.24gb", 1, "rtxpro6000", 0.25]])}),
    # a compute instance 1c.3g counts its one compute slice of seven
    Scenario(id="mig-compute-instance-share", nodes=[H200_CI], accounts=lim(-1), jobs=[mig("j1", profile="1c.3g.71gb")],
             want_started={"j1"}, want_reasons={},
             want_charge={"j1": _charge({"cpu": 1, "mem": 1, "node": 1, "gres/gpu:1c.3g.71gb": 1, "gres/gpu": 0.142857},
                                        [["gres/gpu:1c.3g.71gb", 1, "h200", 0.142857]])}),
    # 2 of a card's 4 shards are half a card toward gres/gpu: two such jobs fill a limit of 1 (were counted 0)
    Scenario(id="shards-count-their-card-share", nodes=[SHARDED], accounts=lim(1),
             jobs=[shard("j1", 2), shard("j2", 2), shard("j3", 2)],
             want_started={"j1", "j2"}, want_reasons={"j3": "AssocGrpGRES"},
             want_charge={"j1": _charge({"cpu": 1, "mem": 1, "node": 1, "gres/shard": 2, "gres/gpu": 0.5},
                                        [["gres/shard", 2, "h200", 0.5]])}),
    # running shard jobs hold their share too: a whole-GPU job of the same account waits at the limit
    Scenario(id="running-shards-hold-their-share", nodes=[SHARDED], accounts=lim(1.5),
             jobs=[running_shard("r1", 2, 0), running_shard("r2", 2, 0), job("w", "a")],
             want_started=set(), want_reasons={"w": "AssocGrpGRES"}, want_charge={}),
    Scenario(id="running-shards-under-the-limit", nodes=[SHARDED], accounts=lim(2),
             jobs=[running_shard("r1", 2, 0), running_shard("r2", 2, 0), job("w", "a")],
             want_started={"w"}, want_reasons={},
             want_charge={"w": _charge({"cpu": 1, "mem": 1, "node": 1, "gres/gpu:h200": 1, "gres/gpu": 1},
                                       [["gres/gpu:h200", 1, "h200", 1]])}),
    # a job taking a whole card and a MIG instance is charged per kind of device
    Scenario(id="mixed-node-parts", accounts=lim(-1),
             nodes=[node("x0", devices=[{"index": 0, "type": "rtxpro6000"},
                                        {"index": 1, "uuid": "G1", "type": "rtxpro6000",
                                         "mig": [{"profile": "2g.48gb", "uuid": "MIG-a"}, {"profile": "2g.48gb",
                                                                                           "uuid": "MIG-b"}]}])],
             jobs=[job("j", "a", per_task={"gres/gpu:rtxpro6000": 1, "gres/gpu:2g.48gb": 1, "cpu": 2, "mem": 10})],
             want_started={"j"}, want_reasons={},
             want_charge={"j": _charge({"cpu": 2, "mem": 10, "node": 1, "gres/gpu:rtxpro6000": 1, "gres/gpu": 1.5,
                                        "gres/gpu:2g.48gb": 1},
                                       [["gres/gpu:rtxpro6000", 1, "rtxpro6000", 1], ["gres/gpu:2g.48gb", 1, "rtxpro6000", 0.5]])}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_charge_cases(case):
    case.verify(passes=["allocate"])
