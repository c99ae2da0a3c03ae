"""A crafted December for the HTML bill's tests: three accounts with quotas, five users,
one account borrowing, a day without use (Saturday 5 December), a price change on the
10th, GPU use measured for some accounts only, and the month still running (now is
18 December 14:30 UTC, with a job RUNNING since 10:00)."""

from __future__ import annotations

from typing import Any

from acct_helpers import add_account, add_node, insert_running, insert_usage, ts, usage

from batchd.accounting.prices import make_price
from batchd.accounting.report import build_report
from batchd.accounting.rollup import run_rollup
from batchd.store import Store
from batchd.store import accounting as sql

NOW = ts("2026-12-18T14:30")
START, END = int(ts("2026-12-01")), int(ts("2027-01-01"))


def _gpus(n: int) -> dict[str, float]:
    return {"cpu": 8 * n, "mem": 32768 * n, "node": 1, "gres/gpu": n, "gres/gpu:h200": n}


def build(store: Store) -> None:
    add_node(store, "gpu01", 8)
    add_node(store, "gpu02", 8)
    for name, quota in (("vision", 6), ("nlp", 4), ("speech", 2)):
        add_account(store, name, quota)
    sql.add_prices(store, [make_price("gres/gpu:h200", "2.00", "EUR", "2026-01-01"),
                           make_price("gres/gpu:h200", "2.40", "EUR", "2026-12-10"),
                           make_price("cpu", "0.01", "EUR", "2026-01-01")])
    recs = []
    for d in range(1, 18):
        if d == 5:
            continue  # a day without use
        day = f"2026-12-{d:02d}"
        recs.append(usage(ts(f"{day}T00:00"), ts(f"{day}T12:00"), account="vision", user="alice", tres=_gpus(4),
                          gpu_util_pct=72.0, node="gpu01"))
        # carol overlaps alice from 08:00: vision holds 8 GPUs against a quota of 6 (borrowing)
        recs.append(usage(ts(f"{day}T08:00"), ts(f"{day}T{12 + d % 6:02d}:00"), account="vision", user="carol",
                          tres=_gpus(4), gpu_util_pct=55.0, node="gpu02"))
        recs.append(usage(ts(f"{day}T06:00"), ts(f"{day}T18:00"), account="nlp", user="bob", tres=_gpus(2),
                          gpu_util_pct=41.0, node="gpu01"))
        if d % 7 not in (5, 6):
            recs.append(usage(ts(f"{day}T09:00"), ts(f"{day}T17:00"), account="speech", user="dan",
                              tres=_gpus(1), node="gpu02"))
        if d % 3 == 0:
            recs.append(usage(ts(f"{day}T13:00"), ts(f"{day}T23:00"), account="speech", user="erin",
                              tres=_gpus(1), node="gpu02"))
    recs.append(usage(ts("2026-12-18T00:00"), ts("2026-12-18T06:00"), account="nlp", user="bob", tres=_gpus(2),
                      gpu_util_pct=38.0, node="gpu01"))
    insert_usage(store, recs)
    run_rollup(store, NOW)
    insert_running(store, 900, ts("2026-12-18T10:00"), "cpu=32,node=1,gres/gpu=4,gres/gpu:h200=4",
                   account="vision", user="alice", node="gpu02")


def report(store: Store, **kw: Any) -> dict[str, Any]:
    """The December report as the route gives it for --html: daily, user_rows, cluster."""
    args: dict[str, Any] = dict(start=START, end=END, now=NOW, daily=True)
    args.update(kw)
    rep = build_report(store, **args)
    rep["user_rows"] = build_report(store, **dict(args, group_by=["account", "user"], daily=False))["rows"]
    rep["cluster"] = "dev16"
    return rep
