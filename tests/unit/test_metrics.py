"""What /metrics says about cards and accounts (batchd.server.metrics), from stored nodes
and running jobs: a card counts by its share (MIG instances, shards), down and drained
nodes' cards apart; an account's borrowed GPUs are what it holds above quota, its lent
GPUs the idle quota borrowers use now."""

from __future__ import annotations

from batchd.model import Account, Job, Node
from batchd.server.metrics import account_gpus, card_usage
from batchd.slurm.gres import node_inventories

MIG_CARD = {"index": 0, "uuid": "GPU-a", "type": "rtxpro6000", "slices": 4,
            "mig": [{"profile": "1g.24gb", "uuid": "MIG-1"}, {"profile": "1g.24gb", "uuid": "MIG-2"},
                    {"profile": "2g.48gb", "uuid": "MIG-3"}]}


def _node(name, gpus, state="IDLE"):
    return Node(name=name, state=state, cpus=64, memory_mb=100000, gpus=gpus, heartbeat=0.0)


def _running(jid, account, alloc, per_task=None, tasks=1):
    return Job(id=jid, name="j", user="u", uid=1, gid=1, account=account, partition="gpu", qos="normal",
               state="RUNNING", submit_time=0.0, spec={}, request={"per_task": per_task or {}, "tasks": tasks},
               allocation=alloc, start_time=0.0)


def test_cards_count_by_their_share_and_down_or_drained_nodes_apart():
    nodes = [_node("a", [MIG_CARD, {"index": 1, "uuid": "GPU-b", "type": "rtxpro6000"},
                         {"index": 2, "uuid": "GPU-c", "type": "rtxpro6000"}]),
             _node("b", [{"type": "h200", "count": 2}], state="DOWN"),
             _node("c", [{"type": "h200", "count": 4}], state="DRAIN"),
             _node("d", [{"type": "h200", "count": 4}])]
    running = [_running(1, "t", {"a": {"gpus": ["0:MIG-1"]}}),          # a quarter of card 0
               _running(2, "t", {"a": {"gpus": [1]}}),                  # card 1 whole
               _running(3, "s", {"d": {"gpus": [], "shards": 2, "shard_gpus": [3]}})]  # 2 of 4 shards of card 3
    got = card_usage(nodes, running, shard_per_gpu=4)
    assert got[("a", "rtxpro6000", "allocated")] == 1.25
    assert got[("a", "rtxpro6000", "shared")] == 0.75
    assert got[("a", "rtxpro6000", "idle")] == 1.0
    assert got[("b", "h200", "down")] == 2.0 and got[("c", "h200", "drained")] == 4.0
    assert got[("d", "h200", "allocated")] == 0.5 and got[("d", "h200", "shared")] == 0.5
    assert got[("d", "h200", "idle")] == 3.0
    # every card is counted once, whatever its state
    assert sum(got.values()) == 3 + 2 + 4 + 4


def test_borrowed_is_above_quota_and_lent_is_idle_quota_in_use_by_borrowers():
    accounts = [Account(name="serving", parent=None, resources={"gres/gpu": {"quota": 6, "limit": 6}}),
                Account(name="training", parent=None, resources={"gres/gpu": {"quota": 6, "limit": 16}}),
                Account(name="notebooks", parent=None, resources={"gres/gpu": {"quota": 4, "limit": 8}})]
    nodes = [_node("a", [MIG_CARD, *({"index": i, "uuid": f"GPU-{i}", "type": "rtxpro6000"} for i in range(1, 4))]),
             _node("b", [{"type": "h200", "count": 8}])]
    running = [_running(1, "serving", {"a": {"gpus": [1, 2]}}),                  # 2 of 6: 4 idle
               _running(2, "training", {"b": {"gpus": list(range(8))}}),         # 8 of 6: borrows 2
               _running(3, "notebooks", {"a": {"gpus": ["0:MIG-1"]}})]           # a MIG share; 3.75 idle
    got = account_gpus(accounts, running, {"training": {"gres/gpu": 7.0}}, node_inventories(nodes))
    assert got[("training", "gres/gpu", "allocated")] == 8 and got[("training", "gres/gpu", "borrowed")] == 2
    assert got[("serving", "gres/gpu", "borrowed")] == 0 and got[("notebooks", "gres/gpu", "allocated")] == 0.25
    # 2 borrowed out of 7.75 idle quota: each lender lends its idle quota's part of it
    assert round(got[("serving", "gres/gpu", "lent")], 6) == round(4 * 2 / 7.75, 6)
    assert round(got[("notebooks", "gres/gpu", "lent")], 6) == round(3.75 * 2 / 7.75, 6)
    assert got[("training", "gres/gpu", "lent")] == 0
    assert sum(got[(a.name, "gres/gpu", "lent")] for a in accounts) == 2
    assert got[("training", "gres/gpu", "fair_share")] == 7.0
    assert (got[("serving", "gres/gpu", "quota")], got[("training", "gres/gpu", "limit")]) == (6, 16)
    # typed resources too: whole cards of the type
    assert got[("training", "gres/gpu:h200", "allocated")] == 8


def test_the_grafana_dashboard_asks_only_for_documented_metrics():
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    board = json.loads((root / "examples" / "grafana-batchd.json").read_text())
    documented = set(re.findall(r"^\| `(batchd_\w+)` \|", (root / "docs" / "metrics.md").read_text(), re.M))
    assert len(documented) >= 13
    used = set()
    for panel in board["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"\bbatchd_\w+", target["expr"]))
    known = documented | {f"{m}_bucket" for m in documented}
    assert used and used <= known, used - known


def test_a_running_jobs_stored_charge_is_what_counts():
    """The charge its start stored (the bill's), card-share keys left out; the allocation
    is read only for a job stored without one."""
    accounts = [Account(name="nb", parent=None, resources={"gres/gpu": {"quota": 4}})]
    job = _running(1, "nb", {})
    job.charge = {"gres/gpu": 0.25, "gres/gpu:1g.24gb": 1.0, "gres/gpu:rtxpro6000@1g.24gb": 0.25, "cpu": 2.0}
    got = account_gpus(accounts, [job], {}, {})
    assert got[("nb", "gres/gpu", "allocated")] == 0.25 and got[("nb", "gres/gpu:1g.24gb", "allocated")] == 1.0
    assert not any("@" in res for _a, res, _k in got)
