"""The hourly table's sums that the report reads instead of it: `usage_daily` (per day)
and `gpu_hourly` (GPU columns per hour and account). They always equal the hourly
table summed, after incremental, repeated, failed and killed rollups and after the
migration that fills them; the report's queries over them give what the hourly table
gives for any hour-aligned segments (SQLite and PostgreSQL)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import defaultdict

import pytest
from acct_helpers import insert_usage, ts, usage
from alembic import command
from sqlalchemy import select

from batchd.accounting.rollup import run_rollup
from batchd.store import Store, rollup_rows
from batchd.store import accounting as sql
from batchd.store.migrate import _alembic_config, upgrade
from batchd.store.tables import GpuHourly, UsageDaily, UsageHourly

T0 = ts("2026-10-01")
H, DAY = 3600, 86400


def _records(n, t0=T0):
    """Runs of minutes to two days over ~9 days, 3 accounts, 5 users, 2 nodes, whole
    GPUs, a MIG slice with a second GPU type, a shard count, CPU-only runs."""
    out = []
    for i in range(n):
        start = t0 + 1597.3 * i
        tres = {"cpu": 1 + i % 8, "mem": 1024, "node": 1}
        if i % 4 == 1:
            tres.update({"gres/gpu": 2, "gres/gpu:h200": 2})
        elif i % 4 == 2:
            tres.update({"gres/gpu": 1, "gres/gpu:1g.24gb": 1, "gres/gpu:l4": 0.5, "gres/shard": 2})
        elif i % 4 == 3:
            tres.update({"gres/gpu": 1})
        dur = (300, 4000, 3 * H + 7, 30 * H)[i % 4] + (i * 7919) % 5000
        out.append(usage(start, start + dur, account="abc"[i % 3], user=f"u{i % 5}", node=f"gpu0{i % 2}",
                         tres=tres, gpu_util_pct=float(i % 100) if "gres/gpu" in tres else None))
    return out


def _rows(store, table, key_cols, value_cols):
    with store.tx() as s:
        rows = s.execute(select(*[getattr(table, c) for c in key_cols + value_cols]))
        return {tuple(r[:len(key_cols)]): tuple(r[len(key_cols):]) for r in rows if any(r[len(key_cols):])}


_KEY = ["account", "user", "node", "gpu_type", "tres"]


def _check_sums(store):
    """usage_daily and gpu_hourly equal the hourly table summed."""
    hourly = _rows(store, UsageHourly, ["hour", *_KEY], rollup_rows.VALUE_COLS)
    days, gpu = defaultdict(lambda: [0.0] * 9), defaultdict(lambda: [0.0] * 3)
    for (hour, acct, user, node, gtype, tres), vals in hourly.items():
        d = days[(hour - hour % DAY, acct, user, node, gtype, tres)]
        for i, v in enumerate(vals):
            d[i] += v
        v = dict(zip(rollup_rows.VALUE_COLS, vals, strict=True))
        if tres == "" and (v["gpu_s"] or v["gpu_type_s"]):
            g = gpu[(hour, acct, gtype, tres)]
            g[0] += v["gpu_s"]
            g[1] += v["gpu_type_s"]
        elif tres.startswith("gres/gpu") and v["amount"]:
            gpu[(hour, acct, gtype, tres)][2] += v["amount"]
    _same(_rows(store, UsageDaily, ["day", *_KEY], rollup_rows.VALUE_COLS), days)
    _same(_rows(store, GpuHourly, ["hour", "account", "gpu_type", "tres"], rollup_rows.GPU_COLS), gpu)
    assert hourly


def _same(got, want):
    assert set(got) == set(want), sorted(set(got) ^ set(want))[:5]
    for k, v in want.items():
        assert got[k] == pytest.approx(tuple(v), rel=1e-12, abs=1e-6), k


def test_sums_follow_incremental_and_repeated_rollups(store):
    recs = _records(400)
    insert_usage(store, recs[:250])
    assert run_rollup(store, 0, batch=60) == 250
    _check_sums(store)
    assert run_rollup(store, 0) == 0
    insert_usage(store, recs[250:])
    assert run_rollup(store, 0, batch=60) == 150
    _check_sums(store)


def test_failed_rollup_adds_nothing_to_the_sums(store, monkeypatch):
    insert_usage(store, _records(200))
    seen = []

    def boom(step):
        seen.append(step)
        if step == "sums" and len(seen) > 2:  # the second batch, after all its writes
            raise RuntimeError("injected")

    monkeypatch.setattr(sql, "fault_hook", boom)
    with pytest.raises(RuntimeError):
        run_rollup(store, 0, batch=80)
    assert sql.rollup_status(store)["rolled"] == 80
    _check_sums(store)
    monkeypatch.setattr(sql, "fault_hook", None)
    assert run_rollup(store, 0, batch=80) == 120
    _check_sums(store)


_CHILD = """
import sys, time
from batchd.store import Store
from batchd.store import accounting as sql
from batchd.accounting.rollup import run_rollup
seen = []
def hang_in_third_batch(step):
    seen.append(step)
    if len(seen) == 6:  # inside the 3rd batch's transaction, everything written
        print("inside", flush=True)
        time.sleep(600)
sql.fault_hook = hang_in_third_batch
run_rollup(Store(sys.argv[1]), 0, batch=30)
"""


def test_killed_rollup_adds_nothing_to_the_sums(store, db_url):
    insert_usage(store, _records(150))
    child = subprocess.Popen([sys.executable, "-c", _CHILD, db_url], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "inside"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert sql.rollup_status(store)["rolled"] == 60
    _check_sums(store)
    assert run_rollup(store, 0) == 90
    _check_sums(store)


def _hourly_only(store, segments, group_by, accounts=None, users=None):
    """rollup_sums' answer computed from the hourly table alone."""
    out = defaultdict(float)
    for (hour, acct, user, node, gtype, tres), vals in _rows(store, UsageHourly, ["hour", *_KEY],
                                                               rollup_rows.VALUE_COLS).items():
        if (accounts and acct not in accounts) or (users and user not in users):
            continue
        row = {"account": acct, "user": user, "node": node, "gpu_type": gtype}
        for idx, (a, b) in enumerate(segments):
            if a <= hour < b:
                for name, v in rollup_rows.tall(gtype, tres, vals):
                    out[(idx, tuple(row[g] for g in group_by), name)] += v
    return dict(out)


SEGMENTS = {
    "days": [(int(T0), int(T0 + 3 * DAY)), (int(T0 + 3 * DAY), int(T0 + 12 * DAY))],
    "hours": [(int(T0 - 5 * H), int(T0 + DAY + 7 * H)), (int(T0 + DAY + 7 * H), int(T0 + 4 * DAY + 13 * H)),
              (int(T0 + 4 * DAY + 13 * H), int(T0 + 4 * DAY + 20 * H))],
    "within_a_day": [(int(T0 + 2 * DAY + 3 * H), int(T0 + 2 * DAY + 9 * H))],
}


@pytest.mark.parametrize("name", SEGMENTS)
def test_report_queries_equal_the_hourly_table(store, name):
    insert_usage(store, _records(400))
    run_rollup(store, 0, batch=150)
    segs = SEGMENTS[name]
    for group_by, accounts, users in ((["account"], None, None), (["account", "user"], ["a", "c"], None),
                                      (["gpu_type", "node"], None, ["u1", "u3"])):
        got = {(i, g, t): v for i, g, t, v in sql.rollup_sums(store, segs, group_by, accounts, users)}
        want = _hourly_only(store, segs, group_by, accounts, users)
        assert set(got) == set(want)
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-12), k
    a, b = segs[0][0], segs[-1][1]
    fast = sorted(sql.hourly_gpu(store, a, b, ["a", "b"]))
    every_user = sorted(sql.hourly_gpu(store, a, b, ["a", "b"], [f"u{i}" for i in range(5)]))  # usage_hourly
    assert [x[:3] for x in fast] == [x[:3] for x in every_user] and fast
    assert [x[3] for x in fast] == pytest.approx([x[3] for x in every_user], rel=1e-12)
    assert {t for _, _, t, _ in fast} >= {"gres/gpu", "gres/gpu:h200", "gres/gpu:1g.24gb", "gres/gpu:l4",
                                          "gres/gpu:gpu"}


def test_migration_fills_the_sums_from_the_hourly_table(db_url):
    store = Store(db_url)
    try:
        upgrade(store.engine)
        insert_usage(store, _records(300))
        run_rollup(store, 0, batch=100)
        before = (_rows(store, UsageDaily, ["day", *_KEY], rollup_rows.VALUE_COLS),
                  _rows(store, GpuHourly, ["hour", "account", "gpu_type", "tres"], rollup_rows.GPU_COLS))
        cfg = _alembic_config()
        with store.engine.begin() as conn:  # back to before the sums existed, and up again
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0005")
        upgrade(store.engine)
        _check_sums(store)
        _same(_rows(store, UsageDaily, ["day", *_KEY], rollup_rows.VALUE_COLS), before[0])
        _same(_rows(store, GpuHourly, ["hour", "account", "gpu_type", "tres"], rollup_rows.GPU_COLS), before[1])
    finally:
        store.close()
