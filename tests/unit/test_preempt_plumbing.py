"""Issue 16's plumbing around the scheduler: the controller's snapshot carries each QOS's
min_runtime_* and each account's preemption keys to `decide`, and the controller logs the
policy of every preemption it applies."""

from __future__ import annotations

from pathlib import Path

from batchd.accounts import parse_accounts
from batchd.config import parse_config
from batchd.controller import Controller
from batchd.store import Store
from batchd.store.migrate import upgrade

T = 1_700_000_000.0
CFG = {"node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}],
       "qos": [{"name": "low", "priority": 1, "min_runtime_reclaim_s": 600, "min_runtime_preempt_s": 60},
               {"name": "high", "priority": 100, "preemptible": False}]}


def _controller(tmp_path: Path) -> Controller:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    store.ensure_default_account()
    doc = parse_accounts({"account": [{"name": "team", "policy": {
        "within_account": "never", "borrow_within_cohort": "lower_priority:50", "min_runtime_reclaim_s": "10:00"}}]})
    store.replace_accounts(doc.accounts, doc.associations, 0, [])
    return Controller(parse_config({**CFG, "state_dir": str(tmp_path)}), store)


def test_snapshot_carries_the_min_runtimes_and_the_account_keys(tmp_path):
    snap = _controller(tmp_path).snapshot(T)
    qos = {q["name"]: (q["min_runtime_reclaim_s"], q["min_runtime_preempt_s"]) for q in snap["qos"]}
    assert qos == {"normal": (0, 0), "low": (600, 60), "high": (0, 0)}
    team = next(a for a in snap["accounts"] if a["name"] == "team")
    assert team["policy"] == {"within_account": "never", "min_runtime_reclaim_s": 600,
                              "borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 50}}
    from batchd.scheduler import load_snapshot
    load_snapshot(snap)  # the scheduler's reader takes it
