"""`batchd report`: the bill for a period, built from the hourly rollups plus what the
rollup has not taken yet (records newer than its last run, and RUNNING jobs up to now).

The result is the stable JSON object of docs/report.md ("The JSON object"). Money is computed exactly
(Fractions of the Decimal prices) and rounded to cents once: the total is the exact
sum rounded, and the rows' cents are allocated by largest remainder so that the rows
add up to the total. The check: the same cost computed a second way, straight from the
usage records (the sum over jobs, not the rollups), must round to the same cents;
`reconciled` says whether it did and the footer prints both.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

from batchd.accounting.borrow import (
    GpuRun,
    borrowing_by_hour,
    capacity_by_hour,
    node_intervals,
    over_quota,
    up_steps,
)
from batchd.accounting.charge import CENT, charge_counts, run_seconds, to_money, unit_price
from batchd.accounting.prices import PriceBook
from batchd.accounting.rollup import Key, add_run
from batchd.accounting.zones import zone_of
from batchd.model import HOUR_S
from batchd.slurm.gres import SHARE_SEP, NodeGpus, node_inventories
from batchd.slurm.tres import parse_tres
from batchd.store import Store
from batchd.store import accounting as sql

GROUPS = ("account", "user", "gpu_type", "node")
_KEY_INDEX = {"account": 1, "user": 2, "node": 3, "gpu_type": 4}


def capacity_of(store: Store, shard_per_gpu: int = 0) -> dict[str, float]:
    """Cluster capacity from the nodes table, in the charge keys of the GPU model
    (batchd.slurm.gres `NodeGpus.capacity`): `cpu`, `gres/gpu` (cards), `gres/gpu:TYPE` (whole
    cards; their shards are part of them), `gres/gpu:PROFILE` (MIG instances) and
    `gres/gpu:TYPE@PROFILE` (the card share of those instances)."""
    cap: dict[str, float] = defaultdict(float)
    nodes = store.list_nodes()
    for n in nodes:
        cap["cpu"] += n.cpus
    for inv in node_inventories(nodes, shard_per_gpu).values():
        for k, v in inv.capacity().items():
            cap[k] += v
    return dict(cap)


def _used_of(t: str, used: dict[str, float]) -> float:
    """What of capacity key `t` was used: a whole card type's own seconds plus the card
    share its shards were used for (`gres/gpu:TYPE@shard`)."""
    v = used.get(t, 0.0)
    if t.startswith("gres/gpu:") and SHARE_SEP not in t:
        v += used.get(t + SHARE_SEP + "shard", 0.0)
    return v


def node_capacity(gpus: list[Any]) -> dict[str, float]:
    """One node's GPU capacity from its device list, in the charge keys of `capacity_of`
    (batchd.slurm.gres `NodeGpus.capacity`; shards only where the inventory says). The report
    sums it over nodes while each existed: the one place it reads a node's capacity."""
    node = SimpleNamespace(name="", gpus=gpus)
    return node_inventories([node]).get("", NodeGpus()).capacity()


def _gpu_run(run: Run) -> GpuRun:
    """An unrolled record or running job as a GPU run of the borrowing sweep."""
    s, e = run_seconds(run[0], run[1])
    counts = charge_counts(run[2], run[3])
    types = {t[9:]: v for t, v in counts.items() if t.startswith("gres/gpu:")}
    return (run[4], s, e, counts.get("gres/gpu", 0.0), types)


def _account_costs(store: Store, book: PriceBook, segments: list[tuple[int, int]],
                   extra: dict[Key, float], accounts: list[str] | None) -> dict[tuple[str, str], Fraction]:
    """Exact cost per (account, user) over every user of the accounts (the denominators
    of `account_share_pct`)."""
    out: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for idx, (acct, usr), tres, amount in sql.rollup_sums(store, segments, ["account", "user"], accounts, None):
        p = unit_price(book, tres, segments[idx][0])
        if p:
            out[(acct, usr)] += p * Fraction(amount)
    for key, v in extra.items():
        if accounts and key[1] not in accounts:
            continue
        p = unit_price(book, key[5], key[0])
        if p:
            out[(key[1], key[2])] += p * Fraction(v)
    return out


def _share_pct(cost: Fraction, row: dict[str, Any], by_au: dict[tuple[str, str], Fraction]) -> float | None:
    """The row's exact cost as a % of its account's whole cost (all users); a row of a
    user without the account column: of the accounts that user was charged in."""
    if "account" in row:
        accts = {row["account"]}
    else:
        accts = {a for (a, u), c in by_au.items() if u == row["user"] and c}
    denom = sum((c for (a, _u), c in by_au.items() if a in accts), Fraction(0))
    return round(float(100 * cost / denom), 2) if denom else None


def _hours(x: float) -> float:
    return round(x / HOUR_S, 6)


def _allocate_cents(exact: list[Fraction], total: Decimal) -> list[Decimal]:
    """Round each amount to cents so that the results add up to `total` (largest
    remainder; ties by position)."""
    cents = [math.floor(x * 100) for x in exact]
    want = int(total / CENT)
    left = want - sum(cents)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] * 100 - cents[i]), i))
    if left >= 0:
        for i in order[:left]:
            cents[i] += 1
    else:
        for i in reversed(order[:len(order)]):
            if left == 0:
                break
            cents[i] -= 1
            left += 1
    return [Decimal(c) * CENT for c in cents]


Run = tuple[float, float, dict[str, Any], float, str]  # start_time, end_time, tres, billing, account


def _extra_runs(store: Store, start: int, end: int, now: float, accounts: set[str] | None,
                users: set[str] | None) -> tuple[dict[Key, float], list[Run]]:
    """Hourly sums of what the rollup has not taken: unrolled records and RUNNING jobs
    (to `now`), clipped to [start, end); and those runs."""
    sums: dict[Key, float] = defaultdict(float)
    runs: list[Run] = []
    for r in sql.unrolled_in_period(store, start, end):
        if (accounts and r.account not in accounts) or (users and r.user not in users):
            continue
        add_run(sums, r.account, r.user, r.node_list, r.tres, r.billing, r.start_time, r.end_time,
                r.gpu_util_pct, (start, end))
        runs.append((r.start_time, r.end_time, r.tres, r.billing, r.account))
    for j in sql.running_jobs(store):
        if (accounts and j["account"] not in accounts) or (users and j["user"] not in users):
            continue
        tres = dict(j["charge"]) if j.get("charge") else parse_tres(j["tres_alloc"])
        tres.pop("billing", None)
        add_run(sums, j["account"], j["user"], j["node_list"], tres, j["billing"], j["start_time"], now,
                None, (start, end))
        runs.append((j["start_time"], now, tres, j["billing"], j["account"]))
    return sums, runs


def build_report(store: Store, **kw: Any) -> dict[str, Any]:
    """`_build` (see there), again when a rollup ran while it read: the report reads in
    several transactions, and a run moving from "not rolled up" to "rolled up" between
    them would be counted on one side only."""
    for _ in range(3):
        before = sql.ledger_size(store)
        rep = _build(store, **kw)
        if sql.ledger_size(store) == before:
            break
    return rep


def _build(store: Store, *, start: int, end: int, now: float, group_by: list[str] | None = None,
           accounts: list[str] | None = None, users: list[str] | None = None,
           spread_idle: bool = False, capacity: dict[str, float] | None = None,
           zero_gpu_s: float = 3600.0, daily: bool = False, raw: bool = False,
           tz: str = "UTC") -> dict[str, Any]:
    """The report over [start, end) (unix seconds; rounded down to whole hours, as sreport
    does, except an end at or after `now` that is not on an hour: that period reaches the
    open hour and counts it up to now, from the rollups and the records and RUNNING jobs
    they do not hold yet, so that `--end now` includes the current partial hour; its
    `period.end` is then that end, not an hour). `group_by` is a subset of GROUPS, in the
    caller's order (default account).
    `daily` adds {"daily": {"YYYY-MM-DD": {account: GPU-hours}}} (the HTML chart),
    `raw` adds per row "tres_s" (TRES-seconds) and "capacity" (sreport).
    "rate_card" lists the prices the bill used (in force in [start, upto)): each
    price's own fields (as GET /v1/prices) and applied_from/applied_to, the first
    second it was used and the end of the last."""
    start = start - start % HOUR_S
    shown_end = end - end % HOUR_S
    if end % HOUR_S and end >= math.floor(now):  # the open hour: counted up to now
        shown_end, end = end, end + (-end) % HOUR_S
    else:
        end = shown_end
    group_by = list(group_by or ["account"])
    for g in group_by:
        if g not in GROUPS:
            raise ValueError(f"cannot group by {g!r} (one of {', '.join(GROUPS)})")
    accts, usrs = (set(accounts) if accounts else None), (set(users) if users else None)
    book = PriceBook(sql.list_prices(store))
    upto = max(start, min(shown_end, math.floor(now)))
    segments = book.segments(start, end) or [(start, end)]

    # ---- the account side: rollups + what they do not hold yet
    amounts: dict[tuple[str, ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    costs: dict[tuple[str, ...], Fraction] = defaultdict(Fraction)
    for idx, gvals, tres, amount in sql.rollup_sums(store, segments, group_by, accounts, users):
        amounts[gvals][tres] += amount
        p = unit_price(book, tres, segments[idx][0])
        if p:
            costs[gvals] += p * Fraction(amount)
    extra, extra_list = _extra_runs(store, start, end, now, accts, usrs)
    for key, v in extra.items():
        gvals = tuple(str(key[_KEY_INDEX[g]]) for g in group_by)
        amounts[gvals][key[5]] += v
        p = unit_price(book, key[5], key[0])
        if p:
            costs[gvals] += p * Fraction(v)

    # ---- the job side: run by run (the ledger of rolled-up runs, then the others),
    # each cut at price changes only, never at hours: a second path to the same money
    jobs_exact = Fraction(0)
    for (idx, t), v in sql.ledger_sums(store, segments, accounts, users).items():
        p = unit_price(book, t, segments[idx][0])
        if p:
            jobs_exact += p * Fraction(v)
    for run in extra_list:
        jobs_exact += _run_cost(book, segments, run)

    # ---- capacity while it existed (node registration), down time, idle, per hour
    hourly = sql.hourly_gpu(store, start, end, accounts, users)
    hourly += [(k[0], k[1], k[5], v) for k, v in extra.items() if k[5].startswith("gres/gpu")]
    acct_list = store.list_accounts()
    quota = {a.name: float(a.resources.get("gres/gpu", {}).get("quota", 0) or 0) for a in acct_list}
    cap = capacity if capacity is not None else capacity_of(store)
    if accts or usrs:
        all_hourly = sql.hourly_gpu(store, start, end)
        all_extra, all_runs = _extra_runs(store, start, end, now, None, None)
        all_hourly += [(k[0], k[1], k[5], v) for k, v in all_extra.items() if k[5].startswith("gres/gpu")]
    else:
        all_hourly, all_extra, all_runs = hourly, extra, extra_list
    if capacity is None:
        history = store.node_history()
        t0 = min((h[1] for h in history if node_capacity(h[2])), default=None)
        intervals = node_intervals(history, start, upto, node_capacity)
    else:  # a capacity given: it existed, up, over the whole period
        t0 = float(start)
        intervals = [(start, upto, False, dict(capacity))] if upto > start else []
    have, down = capacity_by_hour(intervals)
    types = sorted({t for *_, c in intervals for t in c if t.startswith("gres/gpu:")})
    used_by_hour: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # cluster-wide
    for h, _a, t, v in all_hourly:
        used_by_hour[h][t] += v
    idle_s = down_s = cap_s = 0.0
    idle_exact = down_exact = Fraction(0)
    for h in range(start, upto, HOUR_S):
        g_have, g_down = have.get((h, "gres/gpu"), 0.0), down.get((h, "gres/gpu"), 0.0)
        cap_s += g_have
        down_s += g_down
        used_h = used_by_hour.get(h, {})
        idle_s += max(0.0, g_have - g_down - used_h.get("gres/gpu", 0.0))
        for t in types:
            p = unit_price(book, t, h)
            if not p:
                continue
            t_down = down.get((h, t), 0.0)
            free = max(0.0, have.get((h, t), 0.0) - t_down - _used_of(t, used_h))
            idle_exact += p * Fraction(free)
            down_exact += p * Fraction(t_down)
    # quotas count from the first node registration (t0) on: no capacity, no guarantee
    quota_s = max(0, upto - max(start, math.ceil(t0))) if t0 is not None else 0
    # --by account,gpu-type: a row's quota is the account's quota for that GPU model
    # (`gres/gpu:TYPE`, Kueue's per-flavor quota), where the account sets one
    by_type = sorted(group_by) == ["account", "gpu_type"]
    type_quota = {(a.name, r[9:]): float(v.get("quota", 0) or 0) for a in acct_list
                  for r, v in a.resources.items() if r.startswith("gres/gpu:") and "quota" in v}

    # ---- borrowed and lent GPU-time, to the second (see batchd.accounting.borrow)
    only_account = group_by == ["account"]
    borrowed_s: dict[str, float] = {}
    lent_s: dict[str, float] = {}
    type_over: dict[Any, float] = {}
    if only_account:
        if any(q > 0 for q in quota.values()):
            used = {(acct, h): v for h, acct, t, v in all_hourly if t == "gres/gpu"}
            borrowed_s, lent_s = borrowing_by_hour(
                sql.gpu_hour_bounds(store, start), used, [_gpu_run(r) for r in all_runs], quota, t0, start, upto,
                up_steps(intervals), lambda hours, accts: sql.gpu_edges_in(store, hours, accts))
        else:  # no quota anywhere: every GPU-second an account holds is borrowed
            for h, acct, t, v in all_hourly:
                if t == "gres/gpu" and h < upto and quota.get(acct, 0.0) >= 0:
                    borrowed_s[acct] = borrowed_s.get(acct, 0.0) + v
    elif by_type and type_quota:
        # only the accounts that set a per-type quota need their runs
        with_tq = sorted({a for a, _t in type_quota if not accts or a in accts})
        runs = sql.gpu_runs(store, start, upto, with_tq) if with_tq else []
        runs += [_gpu_run(r) for r in all_runs]
        steps = [((a, gt), s, e, n) for a, s, e, _n, ty in runs for gt, n in ty.items() if SHARE_SEP not in gt]
        type_over = over_quota(steps, type_quota, t0, start, upto)
    share_of: dict[tuple[str, str], Fraction] | None = None
    if sorted(group_by) == ["account", "user"] and not usrs:  # the rows' own costs are those
        ia, iu = group_by.index("account"), group_by.index("user")
        share_of = {(g[ia], g[iu]): c for g, c in costs.items()}
    elif "user" in group_by:
        share_of = _account_costs(store, book, segments, all_extra, accounts)

    # ---- rows
    if only_account and not usrs:
        for name, q in quota.items():
            if q > 0 and (not accts or name in accts):
                amounts[(name,)]  # noqa: B018 - an account with a quota shows even unused
    total_exact = sum(costs.values(), Fraction(0))
    total = to_money(total_exact)
    order = sorted(amounts)
    row_cost = _allocate_cents([costs[g] for g in order], total)
    rows: list[dict[str, Any]] = []
    for gvals, cost in zip(order, row_cost, strict=True):
        a: dict[str, float] = amounts[gvals]
        row: dict[str, Any] = dict(zip(group_by, gvals, strict=True))
        row["gpu_hours"] = _hours(a.get("gres/gpu", 0.0))
        row["gpu_hours_by_type"] = {t.split(":", 1)[1]: _hours(v) for t, v in sorted(a.items())
                                    if t.startswith("gres/gpu:") and SHARE_SEP not in t and v}
        row["cpu_hours"] = _hours(a.get("cpu", 0.0))
        row["billing"] = _hours(a.get("billing", 0.0))
        row["cost"] = str(cost)
        if share_of is not None:
            row["account_share_pct"] = _share_pct(costs[gvals], row, share_of)
        if only_account or (by_type and (row["account"], row["gpu_type"]) in type_quota):
            if only_account:
                q = quota.get(gvals[0], 0.0)
                over = borrowed_s.get(gvals[0], 0.0)
            else:
                q = type_quota[(row["account"], row["gpu_type"])]
                over = type_over.get((row["account"], row["gpu_type"]), 0.0)
            if q < 0:
                row.update(quota_gpu_hours=None, quota_used_pct=None, borrowed_gpu_hours=0.0)
            else:
                qh = q * quota_s / HOUR_S
                row["quota_gpu_hours"] = round(qh, 6)
                row["quota_used_pct"] = round(100.0 * row["gpu_hours"] / qh, 2) if qh else None
                row["borrowed_gpu_hours"] = _hours(over)
            if only_account:
                row["lent_gpu_hours"] = _hours(lent_s.get(gvals[0], 0.0))
        measured = a.get("gpu_measured", 0.0)
        row["gpu_efficiency_pct"] = round(100.0 * a.get("gpu_busy", 0.0) / measured, 1) if measured else None
        if raw:
            row["tres_s"] = {t: v for t, v in sorted(a.items())}
        rows.append(row)

    idle_cost = to_money(idle_exact)
    if spread_idle and rows and only_account:
        weights = {r["account"]: max(quota.get(r["account"], 0.0), 0.0) for r in rows}
        if not sum(weights.values()):
            weights = {r["account"]: r["gpu_hours"] for r in rows}
        wsum = sum(weights.values()) or 1.0
        shares = [Fraction(weights[r["account"]]) / Fraction(wsum) for r in rows]
        idle_costs = _allocate_cents([sh * idle_exact for sh in shares], idle_cost)
        for r, sh, ic in zip(rows, shares, idle_costs, strict=True):
            r["idle_gpu_hours"] = _hours(float(sh) * idle_s)
            r["idle_cost"] = str(ic)
            r["cost_with_idle"] = str(Decimal(r["cost"]) + ic)

    jobs_total = to_money(jobs_exact)
    out: dict[str, Any] = {
        "period": {"start": start, "end": shown_end, "upto": upto, "tz": tz},
        "currency": book.currency,
        "rate_card": [dict(p.to_json(), applied_from=a, applied_to=b) for p, a, b in book.in_force(start, upto)],
        "group_by": group_by,
        "rows": rows,
        "idle_gpu_hours": _hours(idle_s),
        "idle_cost": str(idle_cost),
        "capacity_gpu_hours": _hours(cap_s),
        "down_gpu_hours": _hours(down_s),
        "down_cost": str(to_money(down_exact)),
        "totals": {"gpu_hours": _hours(sum(r["gpu_hours"] for r in rows) * HOUR_S),
                   "cpu_hours": round(sum(r["cpu_hours"] for r in rows), 6),
                   "billing": round(sum(r["billing"] for r in rows), 6),
                   "cost": str(total)},
        "jobs_cost": str(jobs_total),
        "reconciled": jobs_total == total and sum((Decimal(r["cost"]) for r in rows), Decimal(0)) == total,
        "running_included": len(extra_list),
        "flags": [dict(r, reason="gpu_zero_util") for r in sql.zero_gpu_runs(store, zero_gpu_s, start, end)
                  if (not accts or r["account"] in accts) and (not usrs or r["user"] in usrs)],
    }
    if spread_idle:
        out["totals"]["cost_with_idle"] = str(total + (idle_cost if rows and only_account else 0))
    if daily:  # local days of `tz`: an hour counts on the day it starts in
        zone = zone_of(tz)
        days: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for h, acct, t, v in hourly:
            if t == "gres/gpu":
                d = _dt.datetime.fromtimestamp(h, zone).strftime("%Y-%m-%d")
                days[d][acct] += v / HOUR_S
        out["daily"] = {d: {n: round(v, 4) for n, v in sorted(x.items())} for d, x in sorted(days.items())}
    if raw:
        out["capacity"] = cap
    return out


def _run_cost(book: PriceBook, segments: list[tuple[int, int]], run: Run) -> Fraction:
    """Exact cost of one run inside the segments (cut at price changes only)."""
    s, e = run_seconds(run[0], run[1])
    counts = charge_counts(run[2], run[3])
    total = Fraction(0)
    for a, b in segments:
        secs = min(e, b) - max(s, a)
        if secs <= 0:
            continue
        for t, n in counts.items():
            p = unit_price(book, t, a)
            if p:
                total += p * Fraction(n) * secs
    return total
