"""`batchd report`: the bill for a period, built from the hourly rollups plus what the
rollup has not taken yet (records newer than its last run, and RUNNING jobs up to now).

The result is the stable JSON object of DESIGN.md section 7. Money is computed exactly
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
from typing import Any

from batchd.accounting.charge import CENT, charge_counts, run_seconds, to_money, unit_price
from batchd.accounting.prices import HOUR_S, PriceBook
from batchd.accounting.rollup import Key, add_run
from batchd.gres import SHARE_SEP, node_inventories
from batchd.store import Store
from batchd.store import accounting as sql
from batchd.tres import parse_tres

GROUPS = ("account", "user", "gpu_type", "node")
_KEY_INDEX = {"account": 1, "user": 2, "node": 3, "gpu_type": 4}


def capacity_of(store: Store, shard_per_gpu: int = 0) -> dict[str, float]:
    """Cluster capacity from the nodes table, in the charge keys of the GPU model
    (batchd.gres `NodeGpus.capacity`): `cpu`, `gres/gpu` (cards), `gres/gpu:TYPE` (whole
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


Run = tuple[float, float, dict[str, Any], float]  # start_time, end_time, tres, billing


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
        runs.append((r.start_time, r.end_time, r.tres, r.billing))
    for j in sql.running_jobs(store):
        if (accounts and j["account"] not in accounts) or (users and j["user"] not in users):
            continue
        tres = dict(j["charge"]) if j.get("charge") else parse_tres(j["tres_alloc"])
        tres.pop("billing", None)
        add_run(sums, j["account"], j["user"], j["node_list"], tres, j["billing"], j["start_time"], now,
                None, (start, end))
        runs.append((j["start_time"], now, tres, j["billing"]))
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
           zero_gpu_s: float = 3600.0, daily: bool = False, raw: bool = False) -> dict[str, Any]:
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

    # ---- per hour: borrowed GPU-hours, idle capacity, daily chart
    hourly = sql.hourly_gpu(store, start, end, accounts, users)
    hourly += [(k[0], k[1], k[5], v) for k, v in extra.items() if k[5].startswith("gres/gpu")]
    acct_list = store.list_accounts()
    quota = {a.name: float(a.resources.get("gres/gpu", {}).get("quota", 0) or 0) for a in acct_list}
    cap = capacity if capacity is not None else capacity_of(store)
    if accts or usrs:
        all_hourly = sql.hourly_gpu(store, start, end)
        all_extra, _ = _extra_runs(store, start, end, now, None, None)
        all_hourly += [(k[0], k[1], k[5], v) for k, v in all_extra.items() if k[5].startswith("gres/gpu")]
    else:
        all_hourly = hourly
    used_by_hour: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # cluster-wide
    for h, _a, t, v in all_hourly:
        used_by_hour[h][t] += v
    idle_s = 0.0
    idle_exact = Fraction(0)
    for h in range(start, upto, HOUR_S):
        secs = min(h + HOUR_S, upto) - h
        used_h = used_by_hour.get(h, {})
        idle_s += max(0.0, cap.get("gres/gpu", 0.0) * secs - used_h.get("gres/gpu", 0.0))
        for t, c in cap.items():
            if t.startswith("gres/gpu:"):
                free = max(0.0, c * secs - _used_of(t, used_h))
                p = unit_price(book, t, h)
                if p and free:
                    idle_exact += p * Fraction(free)
    acct_hour: dict[tuple[str, int], float] = defaultdict(float)   # (account, hour)
    type_hour: dict[tuple[str, str, int], float] = defaultdict(float)  # (account, gpu type, hour)
    for h, acct, t, v in hourly:
        if t == "gres/gpu":
            acct_hour[(acct, h)] += v
        elif t.startswith("gres/gpu:") and SHARE_SEP not in t:
            type_hour[(acct, t[9:], h)] += v
    # --by account,gpu-type: a row's quota is the account's quota for that GPU model
    # (`gres/gpu:TYPE`, Kueue's per-flavor quota), where the account sets one
    by_type = sorted(group_by) == ["account", "gpu_type"]
    type_quota = {(a.name, r[9:]): float(v.get("quota", 0) or 0) for a in acct_list
                  for r, v in a.resources.items() if r.startswith("gres/gpu:") and "quota" in v}

    # ---- rows
    only_account = group_by == ["account"]
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
        if only_account or (by_type and (row["account"], row["gpu_type"]) in type_quota):
            if only_account:
                q = quota.get(gvals[0], 0.0)
                used = [acct_hour.get((gvals[0], h), 0.0) for h in range(start, upto, HOUR_S)]
            else:
                q = type_quota[(row["account"], row["gpu_type"])]
                used = [type_hour.get((row["account"], row["gpu_type"], h), 0.0) for h in range(start, upto, HOUR_S)]
            if q < 0:
                row.update(quota_gpu_hours=None, quota_used_pct=None, borrowed_gpu_hours=0.0)
            else:
                qh = q * (upto - start) / HOUR_S
                row["quota_gpu_hours"] = round(qh, 6)
                row["quota_used_pct"] = round(100.0 * row["gpu_hours"] / qh, 2) if qh else None
                borrowed = 0.0
                for h, u in zip(range(start, upto, HOUR_S), used, strict=True):
                    borrowed += max(0.0, u - q * (min(h + HOUR_S, upto) - h))
                row["borrowed_gpu_hours"] = _hours(borrowed)
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
        "period": {"start": start, "end": shown_end, "upto": upto},
        "currency": book.currency,
        "rate_card": [dict(p.to_json(), applied_from=a, applied_to=b) for p, a, b in book.in_force(start, upto)],
        "group_by": group_by,
        "rows": rows,
        "idle_gpu_hours": _hours(idle_s),
        "idle_cost": str(idle_cost),
        "capacity_gpu_hours": _hours(cap.get("gres/gpu", 0.0) * (upto - start)),
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
    if daily:
        days: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for h, acct, t, v in hourly:
            if t == "gres/gpu":
                d = _dt.datetime.fromtimestamp(h, _dt.UTC).strftime("%Y-%m-%d")
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
