"""The rollup is incremental, idempotent and crash-safe: an exception between its
steps, or the process killed midway, neither loses nor doubles an hour."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import defaultdict

import pytest
from acct_helpers import insert_usage, ts, usage
from sqlalchemy import select

from batchd.accounting.rollup import run_rollup, sums_of
from batchd.store import accounting as sql
from batchd.store import rollup_rows
from batchd.store.tables import UsageHourly


def _table(store):
    """The hourly table as {(hour, account, user, node, gpu_type, tres): TRES-seconds}."""
    with store.tx() as s:
        rows = list(s.scalars(select(UsageHourly)))
    out = {}
    for r in rows:
        for name, v in rollup_rows.tall(r.gpu_type, r.tres, [getattr(r, c) for c in rollup_rows.VALUE_COLS]):
            key = (r.hour, r.account, r.user, r.node, r.gpu_type, name)
            assert key not in out
            out[key] = v
    return out


T0 = ts("2026-10-01")


def _records(n, t0=T0):
    # runs of 10 min to 5 h, overlapping many hours, 3 accounts
    return [usage(t0 + 997 * i, t0 + 997 * i + 600 + (i * 7919) % 18000, account="abc"[i % 3],
                  user=f"u{i % 5}", tres={"cpu": 1 + i % 8, "mem": 1024, "gres/gpu": i % 3,
                                          "gres/gpu:h200": i % 3})
            for i in range(n)]


def _expected(store):
    want = defaultdict(float)
    for k, v in sums_of(store.list_usage()).items():
        want[k] += v
    return dict(want)


def test_incremental_and_idempotent(store):
    insert_usage(store, _records(300))
    assert run_rollup(store, 0, batch=100) == 300
    assert run_rollup(store, 0) == 0
    insert_usage(store, _records(50, ts("2026-10-20")))
    assert run_rollup(store, 0) == 50
    assert _table(store) == _expected(store)
    assert sql.rollup_status(store)["pending"] == 0


@pytest.mark.parametrize("step", ["ledger", "sums"])
def test_exception_between_steps_leaves_nothing(store, step, monkeypatch):
    insert_usage(store, _records(250))
    calls = []

    def boom(at):
        calls.append(at)
        if at == step and len(calls) > 2:  # fail in the second batch
            raise RuntimeError("injected")

    monkeypatch.setattr(sql, "fault_hook", boom)
    with pytest.raises(RuntimeError, match="injected"):
        run_rollup(store, 0, batch=100)
    assert sql.rollup_status(store)["rolled"] == 100  # the first batch only
    monkeypatch.setattr(sql, "fault_hook", None)
    assert run_rollup(store, 0, batch=100) == 150
    assert _table(store) == _expected(store)


_CHILD = """
import sys, time
from batchd.store import Store
from batchd.store import accounting as sql
from batchd.accounting.rollup import run_rollup
seen = []
def hang_in_fourth_batch(step):
    seen.append(step)
    if len(seen) == 8:  # inside the 4th batch's transaction, ledger and sums written
        print("inside", flush=True)
        time.sleep(600)
sql.fault_hook = hang_in_fourth_batch
run_rollup(Store(sys.argv[1]), 0, batch=20)
"""


def test_rollup_killed_midway_loses_and_doubles_nothing(store, db_url):
    insert_usage(store, _records(600))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, db_url], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "inside"
    finally:
        child.send_signal(signal.SIGKILL)  # killed in the middle of a transaction
        child.wait()
    assert sql.rollup_status(store)["rolled"] == 60  # three whole batches, nothing of the 4th
    assert run_rollup(store, 0) == 540
    assert _table(store) == _expected(store)


def test_report_taken_while_a_rollup_runs_still_reconciles(store, monkeypatch):
    from batchd.accounting.prices import make_price
    from batchd.accounting.report import build_report

    sql.add_prices(store, [make_price("gres/gpu:h200", "1.00", "EUR", "2026-01-01")])
    insert_usage(store, _records(200))
    real = sql.ledger_sums
    calls = []

    def rollup_in_between(*a, **kw):  # the daemon's timer fires between two of the report's reads
        calls.append(1)
        if len(calls) == 1:
            run_rollup(store, 0)
        return real(*a, **kw)

    monkeypatch.setattr(sql, "ledger_sums", rollup_in_between)
    rep = build_report(store, start=int(ts("2026-10-01")), end=int(ts("2026-11-01")), now=ts("2027-01-01"))
    assert len(calls) == 2 and rep["reconciled"]
