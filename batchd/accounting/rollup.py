"""Hourly rollups of usage records (like slurmdbd's assoc_usage_hour table).

`run_rollup(store, now)` takes the usage records that the ledger does not list yet, in
batches, cuts each run at UTC hour boundaries (hence exactly at day, month and price
boundaries: prices are hour-aligned) and adds the TRES-seconds to `usage_hourly` and
to the sums the report reads (`usage_daily`, `gpu_hourly`), marking the records in the
ledger and adding their start and end to `ledger_edges` (the per-job side of the bill),
all in the same transaction. So it is:

- incremental: only records not yet in the ledger are read;
- idempotent: a second run finds nothing to do;
- crash-safe: a batch is one transaction; killed or failing midway, it leaves either
  the whole batch or nothing, and the next run takes what is left. Two rollups racing
  on PostgreSQL collide on the ledger's primary key, and the loser's batch rolls back.

Running jobs are not rolled up (they have no usage record yet); reports add them up to
"now" from the jobs table.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from batchd.accounting.charge import charge_counts, gpu_type_of, run_seconds, split_hours
from batchd.model import UsageRec
from batchd.store import Store
from batchd.store import accounting as sql

log = logging.getLogger(__name__)

Key = tuple[int, str, str, str, str, str]


def add_run(sums: dict[Key, float], account: str, user: str, node: str, tres: dict[str, float],
            billing: float, start_time: float, end_time: float, gpu_util_pct: float | None = None,
            clip: tuple[int, int] | None = None) -> None:
    """Add one run's TRES-seconds per hour to `sums` (in place). `clip` = [a, b) limits
    the run to that window (reports of running jobs and unrolled records use it)."""
    s, e = run_seconds(start_time, end_time)
    if clip is not None:
        s, e = max(s, clip[0]), min(e, clip[1])
    if e <= s:
        return
    counts = charge_counts(tres, billing)
    gtype = gpu_type_of(tres)
    gpus = counts.get("gres/gpu", 0.0)
    if gpus and gpu_util_pct is not None:
        counts["gpu_measured"] = gpus
        counts["gpu_busy"] = gpus * float(gpu_util_pct) / 100.0
    for hour, secs in split_hours(s, e):
        for k, v in counts.items():
            sums[(hour, account, user, node, gtype, k)] += v * secs


def sums_of(records: Iterable[UsageRec | sql.Run], clip: tuple[int, int] | None = None) -> dict[Key, float]:
    """Hourly TRES-seconds of `records` (usage records or the rollup's `Run` rows)."""
    sums: dict[Key, float] = defaultdict(float)
    for r in records:
        add_run(sums, r.account, r.user, r.node_list, r.tres, r.billing, r.start_time, r.end_time,
                r.gpu_util_pct, clip)
    return sums


_LEDGER_COLS = (("cpu", "cpu_n"), ("mem", "mem_n"), ("node", "node_n"), ("billing", "billing_n"),
                ("gres/gpu", "gpu_n"))


def ledger_entry(r: UsageRec | sql.Run, usage_id: int, now: float) -> dict[str, Any]:
    """The ledger row of one usage record: its whole-second run and charged counts."""
    s, e = run_seconds(r.start_time, r.end_time)
    counts = charge_counts(r.tres, r.billing)
    gtype = gpu_type_of(r.tres)
    row: dict[str, Any] = {"usage_id": usage_id, "rolled_at": now, "account": r.account, "user": r.user,
                           "start_s": s, "end_s": e, "gpu_type": gtype}
    for name, col in _LEDGER_COLS:
        row[col] = counts.pop(name, 0.0)
    row["typed_n"] = counts.pop("gres/gpu:" + gtype, 0.0) if gtype else 0.0
    row["other"] = counts or None
    return row


def run_rollup(store: Store, now: float | None = None, batch: int = 2000) -> int:
    """Roll up every usage record not yet rolled up; returns how many were taken.

    The daemon's controller calls it from an APScheduler job (every few minutes; the
    report is exact without it, only slower). Safe to call concurrently and after a
    crash (see the module docstring)."""
    now = time.time() if now is None else now
    done = 0
    while True:
        recs = sql.unrolled_usage(store, batch)
        if not recs:
            break
        sums = sums_of(recs)
        sql.apply_rollup(store, [ledger_entry(r, r.id, now) for r in recs], dict(sums), now)
        done += len(recs)
        if len(recs) < batch:
            break
    if done:
        log.info("usage rolled up records=%d", done)
    return done
