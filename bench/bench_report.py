"""Chargeback figures: `batchd report` time over N usage records (default 1,000,000, one
generated month shaped by the Alibaba openb 2023 trace, see tests/accounting/monthgen.py)
on SQLite and PostgreSQL, and the rollup's cost per hour of cluster activity.

    .venv/bin/python bench/bench_report.py [N] [--sqlite-only]

PostgreSQL: $BATCHD_TEST_PG or postgresql://postgres@127.0.0.1:5432/test (a scratch
database is created and dropped). Prints one line per figure; nothing is asserted.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "accounting"))

from monthgen import month_records  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from batchd.accounting.prices import make_price  # noqa: E402
from batchd.accounting.report import build_report  # noqa: E402
from batchd.accounting.rollup import run_rollup  # noqa: E402
from batchd.model import Account, Node  # noqa: E402
from batchd.store import Store  # noqa: E402
from batchd.store import accounting as sql  # noqa: E402
from batchd.store.migrate import upgrade  # noqa: E402
from batchd.store.tables import UsageRecord  # noqa: E402

MONTH_START = 1790812800  # 2026-10-01T00:00:00Z
MONTH_END = 1793491200    # 2026-11-01T00:00:00Z
PRICES = [("gres/gpu:rtxpro6000", "1.20", "2026-01-01"), ("gres/gpu:rtxpro6000", "1.35", "2026-10-16"),
          ("gres/gpu:h200", "3.10", "2026-01-01"), ("gres/gpu:1g.24gb", "0.33", "2026-01-01"),
          ("cpu", "0.012", "2026-01-01"), ("mem", "0.0025", "2026-01-01")]


def pg_base() -> str | None:
    url = os.environ.get("BATCHD_TEST_PG")
    if url:
        return url
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            return "postgresql://postgres@127.0.0.1:5432/test"
    except OSError:
        return None


def insert(store: Store, rows: list[dict]) -> None:
    with store.tx() as s:
        for i in range(0, len(rows), 20000):
            s.execute(UsageRecord.__table__.insert(), rows[i:i + 20000])


def bench(label: str, url: str, n: int) -> None:
    store = Store(url)
    upgrade(store.engine)
    sql.add_prices(store, [make_price(t, p, "EUR", f) for t, p, f in PRICES])
    span = MONTH_END - MONTH_START
    recs = month_records(n, MONTH_START - 86400, span + 86400)
    t0 = time.perf_counter()
    insert(store, recs)
    print(f"{label}: inserted {n:,} usage records in {time.perf_counter() - t0:.1f} s", flush=True)
    del recs

    t0 = time.perf_counter()
    rolled = run_rollup(store, 0, batch=10000)
    roll_s = time.perf_counter() - t0
    with store.tx() as s:
        lo, hi = s.execute(select(func.min(UsageRecord.start_time), func.max(UsageRecord.end_time))).one()
    hours = (hi - lo) / 3600
    print(f"{label}: full rollup of {rolled:,} records: {roll_s:.1f} s = {roll_s / hours * 1000:.1f} ms "
          f"per hour of cluster activity ({hours:,.0f} h, {rolled / hours:,.0f} runs/h)", flush=True)

    # the steady state: the timer job rolls up the runs that ended since its last pass
    per_hour = max(1, round(n / (span / 3600)))
    extra = month_records(per_hour, MONTH_END - 7200, 3600, seed=99)
    for i, r in enumerate(extra):
        r["job_id"] = 9_000_000 + i
    insert(store, extra)
    t0 = time.perf_counter()
    run_rollup(store, 0)
    print(f"{label}: incremental rollup of one hour's runs ({per_hour:,} records): "
          f"{(time.perf_counter() - t0) * 1000:.0f} ms", flush=True)

    for by in (["account"], ["account", "user"], ["gpu_type", "node"]):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            rep = build_report(store, start=MONTH_START, end=MONTH_END, now=MONTH_END + 86400 * 60, group_by=by)
            times.append(time.perf_counter() - t0)
        print(f"{label}: report --month --by {','.join(by)} over {n + per_hour:,} records: "
              f"best {min(times):.2f} s, median {statistics.median(times):.2f} s "
              f"({len(rep['rows'])} rows, total {rep['totals']['cost']} EUR, reconciled={rep['reconciled']})",
              flush=True)

    # the same month with quotas and nodes: borrowed and lent GPU-hours take the
    # to-the-second sweep over every GPU run (without any quota they need none)
    for i in range(10):
        store.put_account(Account(name=f"team{i}", parent="root", resources={"gres/gpu": {"quota": 6, "limit": -1}}))
    for i in range(4):
        store.upsert_node(Node(name=f"gpu{i + 1:02d}", state="IDLE", cpus=128, memory_mb=1024000,
                               gpus=[{"type": "h200", "count": 16}], heartbeat=MONTH_START))
    store.set_node_state("gpu04", "DRAIN", "bench", 0, now=MONTH_START + 10 * 86400)
    store.set_node_state("gpu04", "IDLE", None, 0, now=MONTH_START + 12 * 86400)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        rep = build_report(store, start=MONTH_START, end=MONTH_END, now=MONTH_END + 86400 * 60)
        times.append(time.perf_counter() - t0)
    lent = sum(r.get("lent_gpu_hours", 0.0) for r in rep["rows"])
    print(f"{label}: report --month --by account with quotas (10 x 6 GPUs, 4 nodes of 16, one drained 2 days): "
          f"best {min(times):.2f} s, median {statistics.median(times):.2f} s (borrowed "
          f"{sum(r['borrowed_gpu_hours'] for r in rep['rows']):,.0f} GPU-h, lent {lent:,.0f}, idle "
          f"{rep['idle_gpu_hours']:,.0f}, down {rep['down_gpu_hours']:,.0f})", flush=True)
    store.close()


def main() -> None:
    if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
        print(__doc__.strip())
        return
    unknown = [a for a in sys.argv[1:] if a.startswith("-") and a != "--sqlite-only"]
    if unknown:
        sys.exit(f"bench_report: unknown option {unknown[0]} (see --help)")
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 1_000_000
    with tempfile.TemporaryDirectory() as d:
        bench("sqlite", f"sqlite:///{d}/bench.db", n)
    base = None if "--sqlite-only" in sys.argv else pg_base()
    if base is None:
        print("postgresql: skipped (no server; set BATCHD_TEST_PG)")
        return
    import psycopg

    name = f"batchd_bench_{uuid.uuid4().hex[:8]}"
    conninfo = base.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        bench("postgresql", conninfo.rsplit("/", 1)[0] + "/" + name, n)
    finally:
        with psycopg.connect(conninfo, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
