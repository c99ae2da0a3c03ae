"""The SQL of chargeback (issue 6): prices, hourly rollups, the rollup ledger, job
efficiency. Functions take a `Store`; one public function = one transaction. They take
and return plain values (`Price`, tuples, dicts), never ORM rows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any, NamedTuple

from sqlalchemy import func, insert, select

from batchd.accounting.prices import HOUR_S, Price
from batchd.store import Store
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
    with store.tx() as s:
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
    with store.tx() as s:
        return [Run(*r) for r in s.execute(q)]


# the common TRES, as columns of the hourly table ("typed" = gres/gpu:<the row's gpu_type>)
WIDE = (("cpu", "cpu_s"), ("mem", "mem_s"), ("node", "node_s"), ("billing", "billing_s"), ("gres/gpu", "gpu_s"),
        ("typed", "gpu_type_s"), ("gpu_busy", "gpu_busy_s"), ("gpu_measured", "gpu_measured_s"))
_WIDE_INDEX = {name: i for i, (name, _) in enumerate(WIDE)}
_VALUE_COLS = [c for _, c in WIDE] + ["amount"]


def _upsert(table: str, keys: tuple[str, ...], values: list[str]) -> str:
    """INSERT of one row that adds its values to the row with the same key, if any
    ("{m}" = the driver's parameter mark)."""
    cols = ", ".join(keys + tuple(values))
    return (f"INSERT INTO {table} ({cols}) VALUES (" + ", ".join(["{m}"] * (len(keys) + len(values))) + ") "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
            + ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in values))


_KEY = ("account", '"user"', "node", "gpu_type", "tres")
_UPSERT = _upsert("usage_hourly", ("hour", *_KEY), _VALUE_COLS)
_DAILY_UPSERT = _upsert("usage_daily", ("day", *_KEY), _VALUE_COLS)
_GPU_COLS = ["gpu_s", "gpu_type_s", "amount"]
_GPU_UPSERT = _upsert("gpu_hourly", ("hour", "account", "gpu_type", "tres"), _GPU_COLS)
DAY_S = 86400


def _wide_rows(sums: dict[tuple[int, str, str, str, str, str], float]) -> list[tuple[Any, ...]]:
    """Tall sums ((hour, account, user, node, gpu_type, tres) -> TRES-seconds) -> rows of
    the hourly table: one row of columns per (hour, account, user, node, gpu_type) for
    the common TRES, one row per other TRES."""
    rows: dict[tuple[Any, ...], list[float]] = {}
    n = len(_VALUE_COLS)
    for (hour, account, user, node, gtype, tres), v in sums.items():
        i = _WIDE_INDEX.get(tres)
        if i is None and gtype and tres == "gres/gpu:" + gtype:
            i = _WIDE_INDEX["typed"]
        key = (hour, account, user, node, gtype, "" if i is not None else tres)
        vals = rows.get(key)
        if vals is None:
            vals = rows[key] = [0.0] * n
        vals[n - 1 if i is None else i] += v
    return [(*k, *v) for k, v in rows.items()]


def _daily_rows(hourly: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows of the hourly table -> their sums per day (rows of `usage_daily`)."""
    out: dict[tuple[Any, ...], list[float]] = {}
    for row in hourly:
        key = (row[0] - row[0] % DAY_S, *row[1:6])
        vals = out.get(key)
        if vals is None:
            out[key] = list(row[6:])
        else:
            for i, v in enumerate(row[6:]):
                vals[i] += v
    return [(*k, *v) for k, v in out.items()]


_GPU_S, _TYPED_S, _AMOUNT = (_VALUE_COLS.index(c) + 6 for c in _GPU_COLS)


def _gpu_rows(hourly: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows of the hourly table -> their GPU columns per hour, account, GPU type and
    tres (rows of `gpu_hourly`); rows without GPU-seconds leave nothing."""
    out: dict[tuple[Any, ...], list[float]] = {}
    for row in hourly:
        tres = row[5]
        if tres:
            if not tres.startswith("gres/gpu") or not row[_AMOUNT]:
                continue
            vals = [0.0, 0.0, row[_AMOUNT]]
        elif row[_GPU_S] or row[_TYPED_S]:
            vals = [row[_GPU_S], row[_TYPED_S], 0.0]
        else:
            continue
        key = (row[0], row[1], row[4], tres)
        have = out.get(key)
        if have is None:
            out[key] = vals
        else:
            for i, v in enumerate(vals):
                have[i] += v
    return [(*k, *v) for k, v in out.items()]


def _tall(gtype: str, tres: str, values: Any) -> Iterator[tuple[str, float]]:
    """One (summed) row of the hourly table -> (TRES name, TRES-seconds) pairs, zeros left out."""
    if tres:
        if values[-1]:
            yield tres, float(values[-1])
        return
    for (name, _), v in zip(WIDE, values, strict=False):
        if v:
            yield ("gres/gpu:" + gtype if name == "typed" else name), float(v)


# the ledger's TRES counted in `ledger_edges` (the charged ones: gres/gpu is not charged)
_EDGE_COLS = (("cpu_n", "cpu"), ("mem_n", "mem"), ("node_n", "node"), ("billing_n", "billing"), ("typed_n", "typed"))
_EDGE_VALUES = [f"{c}{x}" for _, c in _EDGE_COLS for x in ("_n", "_ns")] + ["amount_n", "amount_ns"]
_EDGE_UPSERT = _upsert("ledger_edges", ("hour", "account", '"user"', "gpu_type", "tres"), _EDGE_VALUES)


def _edge_rows(ledger: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Ledger rows -> rows of `ledger_edges` (see there): each run adds its counts, and
    counts x seconds past the hour, at the hour it starts, and takes them away at the
    hour it ends. Empty runs leave nothing."""
    rows: dict[tuple[Any, ...], list[float]] = {}
    n_wide = 2 * len(_EDGE_COLS)

    def add(key: tuple[Any, ...], i: int, n: float, t: int) -> None:
        vals = rows.get(key)
        if vals is None:
            vals = rows[key] = [0.0] * (n_wide + 2)
        vals[i] += n
        vals[i + 1] += n * (t % HOUR_S)

    for r in ledger:
        s, e = int(r["start_s"]), int(r["end_s"])
        if e <= s:
            continue
        who = (r["account"], r["user"], r["gpu_type"])
        for sign, t in ((1.0, s), (-1.0, e)):
            hour = t - t % HOUR_S
            for i, (col, _) in enumerate(_EDGE_COLS):
                if r[col]:
                    add((hour, *who, ""), 2 * i, sign * r[col], t)
            for name, n in (r.get("other") or {}).items():
                if n:
                    add((hour, *who, name), n_wide, sign * float(n), t)
    return [(*k, *v) for k, v in rows.items()]


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
        hourly = _wide_rows(sums)
        for sql, rows in ((_UPSERT, hourly), (_DAILY_UPSERT, _daily_rows(hourly)), (_GPU_UPSERT, _gpu_rows(hourly)),
                          (_EDGE_UPSERT, _edge_rows(ledger))):
            for i in range(0, len(rows), 10000):
                conn.exec_driver_sql(sql.format(m=mark), rows[i:i + 10000])
        if fault_hook is not None:
            fault_hook("sums")


def ledger_size(store: Store) -> int:
    """How many usage records the rollup has taken (only ever grows)."""
    with store.tx() as s:
        return int(s.scalar(select(func.count()).select_from(RollupLedger)) or 0)


def rollup_status(store: Store) -> dict[str, Any]:
    """{"rolled": records in the ledger, "pending": records not yet rolled up,
    "last_rolled_at": unix seconds or None}."""
    with store.tx() as s:
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
    return [func.sum(getattr(table, c)) for c in _VALUE_COLS]


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
    with store.tx() as s:
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
                    for name, v in _tall(row[ng], row[ng + 1], row[ng + 2:]):
                        out[(idx, gvals, name)] += v
    return [(i, g, t, v) for (i, g, t), v in out.items()]


def hourly_gpu(store: Store, start: int, end: int, accounts: Iterable[str] | None = None,
               users: Iterable[str] | None = None) -> list[tuple[int, str, str, float]]:
    """(hour, account, tres, GPU-seconds) for `gres/gpu` and every `gres/gpu:TYPE`, hours
    in [start, end): feeds borrowed GPU-hours, idle capacity and the daily chart. From
    `gpu_hourly`; only a filter on users needs `usage_hourly` (the users' rows)."""
    if users:
        q = (select(UsageHourly.hour, UsageHourly.account, UsageHourly.gpu_type, UsageHourly.tres,
                    *[func.sum(getattr(UsageHourly, c)) for c in _GPU_COLS])
             .where(_hour_col(store, start, end) >= start, _hour_col(store, start, end) < end,
                    (UsageHourly.tres == "") | UsageHourly.tres.like("gres/gpu%"))
             .group_by(UsageHourly.hour, UsageHourly.account, UsageHourly.gpu_type, UsageHourly.tres))
        q = _filters(q, UsageHourly, accounts, users)
    else:
        G = GpuHourly
        q = _filters(select(G.hour, G.account, G.gpu_type, G.tres, G.gpu_s, G.gpu_type_s, G.amount)
                     .where(G.hour >= start, G.hour < end), G, accounts, None)
    out: dict[tuple[int, str, str], float] = defaultdict(float)
    with store.tx() as s:
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
    with store.tx() as s:
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
    tres_alloc, billing, node_list."""
    q = (select(JobRow.id, JobRow.restarts, JobRow.account, JobRow.user, JobRow.start_time,
                JobRow.tres_alloc, JobRow.billing, JobRow.node_list)
         .where(JobRow.state == "RUNNING", JobRow.start_time.is_not(None)).order_by(JobRow.id))
    with store.tx() as s:
        return [dict(r._mapping) for r in s.execute(q)]


# ------------------------------------------------------------------ efficiency
_EFF_FIELDS = ("samples", "first_time", "last_time", "cpu_pct_sum", "cpu_pct_max", "rss_mb_max",
               "gpu_samples", "gpu_util_sum", "gpu_util_max", "gpu_mem_max_mb", "gpu_zero_s", "gpu_zero_max_s")


def get_efficiency(store: Store, job_id: int, run: int | None = None) -> dict[str, Any] | None:
    """The efficiency aggregates of one run (default: the latest sampled run)."""
    q = select(JobEfficiency).where(JobEfficiency.job_id == job_id)
    q = q.where(JobEfficiency.run == run) if run is not None else q.order_by(JobEfficiency.run.desc())
    with store.tx() as s:
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
    pairs = [(name, getattr(E, col), getattr(E, col + "s")) for col, name in _EDGE_COLS]
    pairs.append(("amount", E.amount_n, E.amount_ns))

    def name_of(gtype: str, tres: str, name: str) -> str:
        return tres if tres else ("gres/gpu:" + gtype if name == "typed" else name)

    out: dict[tuple[int, str], float] = defaultdict(float)
    if not segments:
        return {}
    open_n: dict[str, float] = defaultdict(float)  # sum of n over hours >= the current cut
    with store.tx() as s:
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
    with store.tx() as s:
        return [dict(r._mapping) for r in s.execute(q)]
