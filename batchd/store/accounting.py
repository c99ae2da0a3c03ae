"""The SQL of chargeback (issue 6): prices, hourly rollups, the rollup ledger, job
efficiency. Functions take a `Store`; one public function = one transaction. They take
and return plain values (`Price`, tuples, dicts), never ORM rows.
"""

from __future__ import annotations

import itertools
import operator
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, NamedTuple

from sqlalchemy import func, insert, or_, select, union_all

from batchd.model import DAY_S, HOUR_S, Price
from batchd.store import Store
from batchd.store.rollup_rows import (
    DAILY_UPSERT,
    EDGE_COLS,
    EDGE_UPSERT,
    GPU_COLS,
    GPU_UPSERT,
    HOURLY_UPSERT,
    VALUE_COLS,
    daily_rows,
    edge_rows,
    gpu_rows,
    tall,
    wide_rows,
)
from batchd.store.tables import (
    AuditRow,
    GpuHourly,
    JobEfficiency,
    JobRow,
    LedgerEdge,
    PriceRow,
    RollupLedger,
    UsageDaily,
    UsageHourly,
    UsageRecord,
)

# Tests set this to a callable(step: str) to fail a rollup between its steps; the
# transaction must then leave nothing behind.
fault_hook: Callable[[str], None] | None = None


# ------------------------------------------------------------------ prices
def _price(r: PriceRow) -> Price:
    return Price(r.tres, Decimal(r.per_hour), r.currency, r.valid_from, r.valid_to)


def list_prices(store: Store) -> list[Price]:
    """All prices, ordered by TRES then valid_from."""
    with store.read() as s:
        return [_price(r) for r in s.scalars(select(PriceRow).order_by(PriceRow.tres, PriceRow.valid_from,
                                                                        PriceRow.id))]


def add_prices(store: Store, prices: list[Price], uid: int = 0) -> None:
    """Add prices (an identical price already stored is not added twice); audited."""
    with store.tx() as s:
        have = {(p.tres, p.per_hour, p.currency, p.valid_from, p.valid_to)
                for p in map(_price, s.scalars(select(PriceRow)))}
        for p in prices:
            if (p.tres, p.per_hour, p.currency, p.valid_from, p.valid_to) in have:
                continue
            s.add(PriceRow(tres=p.tres, per_hour=str(p.per_hour), currency=p.currency,
                           valid_from=p.valid_from, valid_to=p.valid_to, created=time.time()))
            s.add(AuditRow(time=time.time(), uid=uid, action="price.add", detail=_json(p.to_json())))


def replace_prices(store: Store, prices: list[Price], uid: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Make the stored prices exactly `prices` (what `batchd apply` does with the
    accounts file). Returns the diff {"added": [...], "removed": [...]}; audited."""
    want = {(p.tres, p.per_hour, p.currency, p.valid_from, p.valid_to): p for p in prices}
    added, removed = [], []
    with store.tx() as s:
        rows = list(s.scalars(select(PriceRow)))
        have = set()
        for r in rows:
            p = _price(r)
            key = (p.tres, p.per_hour, p.currency, p.valid_from, p.valid_to)
            if key in want and key not in have:
                have.add(key)
                continue
            removed.append(p.to_json())
            s.delete(r)
        for key, p in want.items():
            if key not in have:
                s.add(PriceRow(tres=p.tres, per_hour=str(p.per_hour), currency=p.currency,
                               valid_from=p.valid_from, valid_to=p.valid_to, created=time.time()))
                added.append(p.to_json())
        if added or removed:
            s.add(AuditRow(time=time.time(), uid=uid, action="price.replace",
                           detail=_json({"added": added, "removed": removed})))
    return {"added": added, "removed": removed}


def _json(d: Any) -> str:
    import json

    return json.dumps(d, sort_keys=True)


# ------------------------------------------------------------------ rollup
class Run(NamedTuple):
    """What the rollup reads of a usage record."""
    id: int
    account: str
    user: str
    node_list: str
    tres: dict[str, Any]
    billing: float
    start_time: float
    end_time: float
    gpu_util_pct: float | None


_RUN_COLS = (UsageRecord.id, UsageRecord.account, UsageRecord.user, UsageRecord.node_list, UsageRecord.tres,
             UsageRecord.billing, UsageRecord.start_time, UsageRecord.end_time, UsageRecord.gpu_util_pct)


def unrolled_usage(store: Store, limit: int) -> list[Run]:
    """Up to `limit` usage records not yet in the rollup ledger, by id."""
    q = (select(*_RUN_COLS).outerjoin(RollupLedger, RollupLedger.usage_id == UsageRecord.id)
         .where(RollupLedger.usage_id.is_(None)).order_by(UsageRecord.id).limit(limit))
    with store.read() as s:
        return [Run(*r) for r in s.execute(q)]


def apply_rollup(store: Store, ledger: list[dict[str, Any]],
                 sums: dict[tuple[int, str, str, str, str, str], float], now: float) -> None:
    """Add `sums` ((hour, account, user, node, gpu_type, tres) -> TRES-seconds) to the
    hourly table and to its sums (`usage_daily`, `gpu_hourly`), write the `ledger` rows
    (columns of RollupLedger) of the records they come from and add those rows' edges
    to `ledger_edges`, in ONE transaction: either all happen or none. A record already in the ledger makes the whole transaction
    fail (IntegrityError) instead of counting it twice."""
    with store.tx() as s:
        if ledger:
            s.execute(insert(RollupLedger), ledger)
        if fault_hook is not None:
            fault_hook("ledger")
        # raw executemany: SQLAlchemy's per-row parameter processing would cost more
        # than the database's work here (hundreds of thousands of rows per month)
        mark = "%s" if store.engine.dialect.name == "postgresql" else "?"
        conn = s.connection()
        hourly = wide_rows(sums)
        for sql, rows in ((HOURLY_UPSERT, hourly), (DAILY_UPSERT, daily_rows(hourly)), (GPU_UPSERT, gpu_rows(hourly)),
                          (EDGE_UPSERT, edge_rows(ledger))):
            for i in range(0, len(rows), 10000):
                conn.exec_driver_sql(sql.format(m=mark), rows[i:i + 10000])
        if fault_hook is not None:
            fault_hook("sums")


def ledger_size(store: Store) -> int:
    """How many usage records the rollup has taken (only ever grows)."""
    with store.read() as s:
        return int(s.scalar(select(func.count()).select_from(RollupLedger)) or 0)


def rollup_status(store: Store) -> dict[str, Any]:
    """{"rolled": records in the ledger, "pending": records not yet rolled up,
    "last_rolled_at": unix seconds or None}."""
    with store.read() as s:
        rolled = s.scalar(select(func.count()).select_from(RollupLedger)) or 0
        total = s.scalar(select(func.count()).select_from(UsageRecord)) or 0
        last = s.scalar(select(func.max(RollupLedger.rolled_at)))
    return {"rolled": rolled, "pending": total - rolled, "last_rolled_at": last}


# ------------------------------------------------------------------ report queries
def _filters(q: Any, table: Any, accounts: Iterable[str] | None, users: Iterable[str] | None) -> Any:
    if accounts:
        q = q.where(table.account.in_(list(accounts)))
    if users:
        q = q.where(table.user.in_(list(users)))
    return q


LONG_PERIOD_S = 7 * 86400


def _hour_col(store: Store, start: int, end: int) -> Any:
    """The `hour` column to filter on. SQLite keeps no statistics and would walk the
    unique index for any hour range, a lookup per row; over a long period a plain table
    scan is several times faster, and `hour + 0` is how SQLite is told not to use it."""
    if store.engine.dialect.name == "sqlite" and end - start > LONG_PERIOD_S:
        return UsageHourly.hour + 0
    return UsageHourly.hour


def _sums(table: Any = UsageHourly) -> list[Any]:
    return [func.sum(getattr(table, c)) for c in VALUE_COLS]


def _day_cover(a: int, b: int) -> tuple[tuple[int, int] | None, list[tuple[int, int]]]:
    """[a, b) (hour-aligned) as the whole UTC days inside it (or None) and the hours
    left at either end."""
    d1, d2 = a + (-a) % DAY_S, b - b % DAY_S
    if d1 >= d2:
        return None, [(a, b)]
    return (d1, d2), [(x, y) for x, y in ((a, d1), (d2, b)) if y > x]


def rollup_sums(store: Store, segments: list[tuple[int, int]], group_by: list[str],
                accounts: Iterable[str] | None = None,
                users: Iterable[str] | None = None) -> list[tuple[int, tuple[str, ...], str, float]]:
    """Rolled-up TRES-seconds per (segment index, group values, tres), for hours in each
    segment [a, b) (segments hour-aligned): whole days from `usage_daily`, the hours of
    partial days from `usage_hourly`. One transaction for all segments."""
    ng = len(group_by)
    out: dict[tuple[int, tuple[str, ...], str], float] = defaultdict(float)
    with store.read() as s:
        for idx, (a, b) in enumerate(segments):
            days, hours = _day_cover(a, b)
            ranges: list[tuple[Any, Any, int, int]] = [(UsageHourly, _hour_col(store, x, y), x, y) for x, y in hours]
            if days:
                ranges.append((UsageDaily, UsageDaily.day, *days))
            for table, col, x, y in ranges:
                gcols = [getattr(table, g) for g in group_by]
                q = (select(*gcols, table.gpu_type, table.tres, *_sums(table))
                     .where(col >= x, col < y)
                     .group_by(*gcols, table.gpu_type, table.tres))
                for row in s.execute(_filters(q, table, accounts, users)):
                    gvals = tuple(row[:ng])
                    for name, v in tall(row[ng], row[ng + 1], row[ng + 2:]):
                        out[(idx, gvals, name)] += v
    return [(i, g, t, v) for (i, g, t), v in out.items()]


def hourly_gpu(store: Store, start: int, end: int, accounts: Iterable[str] | None = None,
               users: Iterable[str] | None = None) -> list[tuple[int, str, str, float]]:
    """(hour, account, tres, GPU-seconds) for `gres/gpu` and every `gres/gpu:TYPE`, hours
    in [start, end): feeds borrowed GPU-hours, idle capacity and the daily chart. From
    `gpu_hourly`; only a filter on users needs `usage_hourly` (the users' rows)."""
    if users:
        q = (select(UsageHourly.hour, UsageHourly.account, UsageHourly.gpu_type, UsageHourly.tres,
                    *[func.sum(getattr(UsageHourly, c)) for c in GPU_COLS])
             .where(_hour_col(store, start, end) >= start, _hour_col(store, start, end) < end,
                    (UsageHourly.tres == "") | UsageHourly.tres.like("gres/gpu%"))
             .group_by(UsageHourly.hour, UsageHourly.account, UsageHourly.gpu_type, UsageHourly.tres))
        q = _filters(q, UsageHourly, accounts, users)
    else:
        G = GpuHourly
        q = _filters(select(G.hour, G.account, G.gpu_type, G.tres, G.gpu_s, G.gpu_type_s, G.amount)
                     .where(G.hour >= start, G.hour < end), G, accounts, None)
    out: dict[tuple[int, str, str], float] = defaultdict(float)
    with store.read() as s:
        for h, a, gtype, tres, gpu, typed, amount in s.execute(q):
            if tres:
                if amount:
                    out[(int(h), a, tres)] += float(amount)
            else:
                if gpu:
                    out[(int(h), a, "gres/gpu")] += float(gpu)
                if typed:
                    out[(int(h), a, "gres/gpu:" + gtype)] += float(typed)
    return [(h, a, t, v) for (h, a, t), v in out.items()]


def unrolled_in_period(store: Store, start: int, end: int) -> list[Run]:
    """Usage records overlapping [start, end) that the rollup has not taken yet, by id.
    Usually only records newer than the ledger's highest id; the full anti-join runs
    only when the counts show older records missing from the ledger."""
    with store.read() as s:
        top = s.scalar(select(func.max(RollupLedger.usage_id))) or 0
        rolled = s.scalar(select(func.count()).select_from(RollupLedger)) or 0
        below = s.scalar(select(func.count()).select_from(UsageRecord).where(UsageRecord.id <= top)) or 0
        q = (select(*_RUN_COLS).outerjoin(RollupLedger, RollupLedger.usage_id == UsageRecord.id)
             .where(RollupLedger.usage_id.is_(None), UsageRecord.end_time >= start, UsageRecord.start_time < end)
             .order_by(UsageRecord.id))
        if below == rolled:  # every record up to `top` is in the ledger
            q = q.where(UsageRecord.id > top)
        return [Run(*r) for r in s.execute(q)]


def running_jobs(store: Store) -> list[dict[str, Any]]:
    """RUNNING jobs with what the report needs: id, restarts, account, user, start_time,
    tres_alloc, charge (batchd.slurm.gres record form; None for jobs started before charges were
    stored), billing, node_list."""
    q = (select(JobRow.id, JobRow.restarts, JobRow.account, JobRow.user, JobRow.start_time,
                JobRow.tres_alloc, JobRow.charge, JobRow.billing, JobRow.node_list)
         .where(JobRow.state == "RUNNING", JobRow.start_time.is_not(None)).order_by(JobRow.id))
    with store.read() as s:
        return [dict(r._mapping) for r in s.execute(q)]


# ------------------------------------------------------------------ efficiency
_EFF_FIELDS = ("samples", "first_time", "last_time", "cpu_pct_sum", "cpu_pct_max", "rss_mb_max",
               "gpu_samples", "gpu_util_sum", "gpu_util_max", "gpu_mem_max_mb", "gpu_zero_s", "gpu_zero_max_s")


def get_efficiency(store: Store, job_id: int, run: int | None = None) -> dict[str, Any] | None:
    """The efficiency aggregates of one run (default: the latest sampled run)."""
    q = select(JobEfficiency).where(JobEfficiency.job_id == job_id)
    q = q.where(JobEfficiency.run == run) if run is not None else q.order_by(JobEfficiency.run.desc())
    with store.read() as s:
        r = s.scalars(q.limit(1)).first()
        if r is None:
            return None
        return {"job_id": r.job_id, "run": r.run, **{f: getattr(r, f) for f in _EFF_FIELDS}}


def update_efficiency(store: Store, job_id: int, run: int,
                      merge: Callable[[dict[str, Any] | None], dict[str, Any]]) -> dict[str, Any]:
    """Read-modify-write the aggregates of one run in one transaction: `merge(old or
    None)` returns the new field values."""
    with store.tx() as s:
        row = s.get(JobEfficiency, (job_id, run), with_for_update=True)
        old = None if row is None else {f: getattr(row, f) for f in _EFF_FIELDS}
        new = merge(old)
        if row is None:
            s.add(JobEfficiency(job_id=job_id, run=run, **new))
        else:
            for f in _EFF_FIELDS:
                setattr(row, f, new[f])
        return {"job_id": job_id, "run": run, **new}



def ledger_sums(store: Store, segments: list[tuple[int, int]], accounts: Iterable[str] | None = None,
                users: Iterable[str] | None = None) -> dict[tuple[int, str], float]:
    """The per-job side of the check, from the ledger's edges (not the hourly table):
    per (segment index, charged TRES) the sum over rolled-up runs of count x seconds of
    the run inside the segment. `segments` are consecutive and hour-aligned (as
    PriceBook.segments gives them). One transaction; reads only `ledger_edges` rows
    from the first segment's start on.

    With F(t) as in LedgerEdge, a segment [a, b) is F(b) - F(a) = N(a) x (b - a) +
    sum over a <= h < b of n x (b - h) - ns, where N(a), the count of runs open at a,
    is the sum of `n` over h < a, i.e. minus its sum over h >= a (every rolled-up run
    has ended, so all of a run's n add up to 0). So the segments are summed from the
    last one back, starting from the hours after the period."""
    E = LedgerEdge
    pairs = [(name, getattr(E, col), getattr(E, col + "s")) for col, name in EDGE_COLS]
    pairs.append(("amount", E.amount_n, E.amount_ns))

    def name_of(gtype: str, tres: str, name: str) -> str:
        return tres if tres else ("gres/gpu:" + gtype if name == "typed" else name)

    out: dict[tuple[int, str], float] = defaultdict(float)
    if not segments:
        return {}
    open_n: dict[str, float] = defaultdict(float)  # sum of n over hours >= the current cut
    with store.read() as s:
        q = (select(E.gpu_type, E.tres, *[func.sum(n) for _, n, _ in pairs])
             .where(E.hour >= segments[-1][1]).group_by(E.gpu_type, E.tres))
        for gtype, tres, *vals in s.execute(_filters(q, E, accounts, users)):
            for (name, _, _), v in zip(pairs, vals, strict=True):
                if v:
                    open_n[name_of(gtype, tres, name)] += float(v)
        for idx in range(len(segments) - 1, -1, -1):
            a, b = segments[idx]
            cols = []
            for _, n, ns in pairs:
                cols += [func.sum(n), func.sum(n * (b - E.hour) - ns)]
            q = (select(E.gpu_type, E.tres, *cols).where(E.hour >= a, E.hour < b)
                 .group_by(E.gpu_type, E.tres))
            inside: dict[str, float] = defaultdict(float)
            for gtype, tres, *vals in s.execute(_filters(q, E, accounts, users)):
                for i, (name, _, _) in enumerate(pairs):
                    key = name_of(gtype, tres, name)
                    if vals[2 * i]:
                        open_n[key] += float(vals[2 * i])
                    if vals[2 * i + 1]:
                        inside[key] += float(vals[2 * i + 1])
            for key in set(open_n) | set(inside):
                v = inside.get(key, 0.0) - open_n.get(key, 0.0) * (b - a)
                if v:
                    out[(idx, key)] += v
    return dict(out)


def zero_gpu_runs(store: Store, min_zero_s: float, start: float, end: float) -> list[dict[str, Any]]:
    """Runs of jobs active in [start, end) whose GPUs sat at 0 % for at least
    `min_zero_s` seconds in one stretch, with the job's account and user, by job id."""
    q = (select(JobEfficiency.job_id, JobEfficiency.run, JobEfficiency.gpu_zero_max_s, JobRow.account,
                JobRow.user)
         .join(JobRow, JobRow.id == JobEfficiency.job_id)
         .where(JobEfficiency.gpu_zero_max_s >= min_zero_s, JobEfficiency.first_time < end,
                JobEfficiency.last_time >= start)
         .order_by(JobEfficiency.job_id, JobEfficiency.run))
    with store.read() as s:
        return [dict(r._mapping) for r in s.execute(q)]


def gpu_runs(store: Store, start: int, end: int,
             accounts: Iterable[str] | None = None) -> list[tuple[str, int, int, float, dict[str, float]]]:
    """Rolled-up runs holding GPUs in [start, end): (account, start_s, end_s, gres/gpu
    count, {GPU type: count}) from the ledger rows (each run to the second)."""
    L = RollupLedger
    q = (select(L.account, L.start_s, L.end_s, L.gpu_n, L.gpu_type, L.typed_n, L.other)
         .where(L.gpu_n > 0, L.end_s > start, L.start_s < end))
    if accounts:
        q = q.where(L.account.in_(list(accounts)))
    out = []
    with store.read() as s:
        for a, st, en, n, gtype, tn, other in s.execute(q):
            types = {gtype: float(tn)} if gtype and tn else {}
            for k, v in (other or {}).items():
                if k.startswith("gres/gpu:") and v:
                    types[k[9:]] = types.get(k[9:], 0.0) + float(v)
            out.append((a, int(st), int(en), float(n), types))
    return out


def gpu_edges(store: Store, start: int, end: int) -> dict[str, tuple[list[int], list[float]]]:
    """The rolled-up runs holding GPUs in [start, end) as edges per account: (times,
    changes of the `gres/gpu` count held), the changes at one second summed, in time
    order (each run to the second, from the ledger rows)."""
    L = RollupLedger
    where = (L.gpu_n > 0, L.end_s > start, L.start_s < end)
    e = union_all(select(L.account.label("account"), L.start_s.label("t"), L.gpu_n.label("d")).where(*where),
                  select(L.account, L.end_s, -L.gpu_n).where(*where)).subquery()
    q = select(e.c.account, e.c.t, func.sum(e.c.d)).group_by(e.c.account, e.c.t).order_by(e.c.account, e.c.t)
    out: dict[str, tuple[list[int], list[float]]] = {}
    with store.read() as s:
        for acct, rows in itertools.groupby(s.execute(q), key=operator.itemgetter(0)):
            ts: list[int] = []
            ds: list[float] = []
            for _a, t, d in rows:
                ts.append(t)
                ds.append(d)
            out[acct] = (ts, ds)
    return out


def gpu_hour_bounds(store: Store, start: int) -> dict[tuple[int, str], tuple[float, float]]:
    """{(hour, account): (gres/gpu count of the rolled-up runs starting in the hour, of
    those ending in it)} for every hour from `start` on, from `ledger_edges`."""
    E = LedgerEdge
    q = (select(E.hour, E.account, func.sum(E.gpu_up), func.sum(E.gpu_down))
         .where(E.hour >= start, E.tres == "", (E.gpu_up > 0) | (E.gpu_down > 0)).group_by(E.hour, E.account))
    with store.read() as s:
        return {(int(h), a): (float(u or 0.0), float(d or 0.0)) for h, a, u, d in s.execute(q)}


def gpu_edges_in(store: Store, hours: list[int], accounts: Iterable[str] | None = None
                 ) -> dict[str, list[tuple[int, float]]]:
    """The edges (time, change of the gres/gpu count held) of rolled-up runs that start
    or end inside those whole hours, per account (of `accounts` only, where given). One
    pass over the ledger: a run is read once for both its edges."""
    L = RollupLedger
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    if not hours:
        return {}
    want = sorted(set(hours))
    # IN lists of hours (SQLite and PostgreSQL look them up, not scan them, per row)
    q = select(L.account, L.start_s, L.end_s, L.gpu_n).where(
        L.gpu_n > 0, L.end_s > L.start_s,
        or_((L.start_s - L.start_s % HOUR_S).in_(want), (L.end_s - L.end_s % HOUR_S).in_(want)))
    if accounts is not None:
        q = q.where(L.account.in_(sorted(accounts)))
    inside = set(want)
    with store.read() as s:
        for acct, st, en, n in s.execute(q):
            st, en, n = int(st), int(en), float(n)
            if st - st % HOUR_S in inside:
                out[acct].append((st, n))
            if en - en % HOUR_S in inside:
                out[acct].append((en, -n))
    return dict(out)
