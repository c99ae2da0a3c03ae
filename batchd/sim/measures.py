"""What a simulated run measures, per team and for the cluster (docs/simulate.md, "Measures").

- **wait**: first start − submit, of the jobs that started (median, p90, p99; nearest rank).
- **never runnable**: jobs larger than their account's GPU limit (along its parents) or
  the cluster: they pend for ever, and count in no team's demand.
- **completion**: end − submit, of the jobs that ended (COMPLETED or TIMEOUT).
- **GPU-hours**: the runs' `gres/gpu` (a card's share for MIG and shards) × hours, every
  run counted, preempted ones too.
- **borrowed GPU-hours**: the time integral of max(0, allocated − quota).
- **lent GPU-hours**: the time integral of each team's idle quota that borrowers use,
  shared out over the teams by idle quota (`batchd_account_gpus`' rule).
- **reclaim latency**: for the jobs that, when submitted, fitted in their team's quota
  (the team's allocation plus the job's GPUs at most the quota) but found no free card:
  first start − submit.
- **preemptions** and the **GPU-hours lost** to them (the work since the last checkpoint).
- **quota served**: of the time a team asked for at least its quota (allocated + pending
  GPUs ≥ quota), the fraction in which it held at least its quota; of the time it asked
  for less, whether it held all it asked for. Reported as one fraction of the time it
  asked at all.
- **utilisation**: allocated GPUs over the cluster's, over time (and its mean).
- **Jain's index** over the teams' GPU-hours divided by their quota (teams with a quota).
- **bill**: each run priced as `batchd report` prices a usage record, by the accounts
  file's `[[price]]` rate card (batchd.accounting.charge: the run's charged TRES, a MIG
  instance or a shard at its own price or its card's share, cpu, mem per GiB, billing),
  per whole second and hour of its run, virtual second 0 being `start_epoch` (unix
  seconds; default the latest `valid_from` of the prices, so that today's card applies).
  `cost` (with `--price`): GPU-hours × one price per GPU-hour, the rough figure.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from batchd.sim.engine import Result


def pct(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0-100) of `values`; None for none."""
    if not values:
        return None
    s = sorted(values)
    k = max(1, math.ceil(q / 100.0 * len(s)))
    return s[k - 1]


def _quota(accounts: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    for a in accounts:
        r = (a.get("resources") or {}).get("gres/gpu") or {}
        q = float(r.get("quota", -1))
        if q >= 0:
            out[a["name"]] = q
    return out


def bills(res: Result, start_epoch: float | None = None) -> tuple[dict[str, str], str, float] | None:
    """Each team's bill by the rate card of `res.prices` (the module's doc): ({team: amount
    as a decimal string}, currency, the epoch used); None without prices. The runs are
    rolled up per hour as the report's rollup does (`batchd.accounting.rollup.add_run`) and
    each hour's TRES-seconds priced at that hour."""
    from collections import defaultdict
    from fractions import Fraction

    from batchd.accounting.charge import to_money, unit_price
    from batchd.accounting.prices import PriceBook
    from batchd.accounting.rollup import add_run

    if not res.prices:
        return None
    book = PriceBook(res.prices)
    epoch = float(start_epoch) if start_epoch is not None else max(p.valid_from for p in res.prices)
    sums: dict = defaultdict(float)
    for j in res.jobs:
        for start, end, tres, bill in j.charges:
            add_run(sums, j.team, j.t.user, "", tres, bill, epoch + start, epoch + end)
    out: dict[str, Fraction] = {j.team: Fraction(0) for j in res.jobs}
    for (hour, team, _user, _node, _gtype, key), amount in sums.items():
        price = unit_price(book, key, hour)
        if price:
            out[team] += price * Fraction(amount)
    return {t: str(to_money(v)) for t, v in sorted(out.items())}, book.currency, epoch


def measure(res: Result, price_per_gpu_hour: float | None = None, start_epoch: float | None = None) -> dict[str, Any]:
    quota = _quota(res.accounts)
    teams = sorted({j.team for j in res.jobs} | set(quota))
    out: dict[str, Any] = {"teams": {}, "cluster": {}}
    borrowed = dict.fromkeys(teams, 0.0)
    lent = dict.fromkeys(teams, 0.0)
    asked = dict.fromkeys(teams, 0.0)
    served = dict.fromkeys(teams, 0.0)
    busy = 0.0
    span = 0.0
    for a, b in zip(res.samples, [*res.samples[1:], None], strict=True):
        dt = (b.t if b is not None else res.end_s) - a.t
        if dt <= 0:
            continue
        span += dt
        busy += sum(a.alloc.values()) * dt
        idle_quota = {t: max(0.0, quota[t] - a.alloc.get(t, 0.0)) for t in quota}
        over = {t: max(0.0, a.alloc.get(t, 0.0) - quota[t]) for t in quota}
        total_over = sum(over.values()) + sum(v for t, v in a.alloc.items() if t not in quota)
        total_idle = sum(idle_quota.values())
        for t in teams:
            borrowed[t] += over.get(t, 0.0) * dt
            if total_idle > 0:
                lent[t] += idle_quota.get(t, 0.0) * min(1.0, total_over / total_idle) * dt
            want = a.demand.get(t, 0.0)
            if want > 1e-9:
                asked[t] += dt
                need = min(want, quota.get(t, want))
                if a.alloc.get(t, 0.0) + 1e-9 >= need:
                    served[t] += dt
    # reclaim latency: jobs within quota at submit that had to wait
    by_time = res.samples
    reclaim: dict[str, list[float]] = {t: [] for t in teams}
    idx = 0
    for j in sorted(res.jobs, key=lambda j: j.t.submit_s):
        while idx + 1 < len(by_time) and by_time[idx + 1].t < j.t.submit_s:
            idx += 1
        if j.first_start is None or j.team not in quota or not by_time:
            continue
        before = by_time[idx].alloc if by_time[idx].t < j.t.submit_s else {}
        if before.get(j.team, 0.0) + j.demand <= quota[j.team] + 1e-9 and j.first_start > j.t.submit_s:
            reclaim[j.team].append(j.first_start - j.t.submit_s)
    shares = []
    for t in teams:
        mine = [j for j in res.jobs if j.team == t]
        waits = [j.first_start - j.t.submit_s for j in mine if j.first_start is not None]
        jct = [j.end - j.t.submit_s for j in mine if j.end is not None]
        gpu_h = sum(j.gpu_s for j in mine) / 3600.0
        row = {
            "jobs": len(mine), "started": len(waits), "ended": len(jct),
            "never_runnable": sum(1 for j in mine if j.never),
            "timeouts": sum(1 for j in mine if j.state == "TIMEOUT"),
            "wait_s": {"median": pct(waits, 50), "p90": pct(waits, 90), "p99": pct(waits, 99)},
            "completion_s": {"median": pct(jct, 50), "p90": pct(jct, 90), "p99": pct(jct, 99)},
            "gpu_hours": round(gpu_h, 3),
            "borrowed_gpu_hours": round(borrowed[t] / 3600.0, 3), "lent_gpu_hours": round(lent[t] / 3600.0, 3),
            "preemptions": sum(j.preemptions for j in mine),
            "lost_gpu_hours": round(sum(j.lost_gpu_s for j in mine) / 3600.0, 3),
            "reclaim_latency_s": {"jobs": len(reclaim[t]), "median": pct(reclaim[t], 50), "p90": pct(reclaim[t], 90)},
            "quota_served": round(served[t] / asked[t], 4) if asked[t] > 0 else None,
            "quota": quota.get(t),
        }
        if price_per_gpu_hour is not None:
            row["cost"] = round(gpu_h * price_per_gpu_hour, 2)
        if t in quota and quota[t] > 0:
            shares.append(gpu_h / quota[t])
        out["teams"][t] = row
    all_waits = [j.first_start - j.t.submit_s for j in res.jobs if j.first_start is not None]
    jain = (sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares))) if shares and any(shares) else None
    out["cluster"] = {
        "jobs": len(res.jobs), "never_runnable": sum(1 for j in res.jobs if j.never), "gpus": res.capacity_gpus, "span_s": round(span, 3), "cycles": res.cycles,
        "utilisation": round(busy / (span * res.capacity_gpus), 4) if span > 0 and res.capacity_gpus else None,
        "gpu_hours": round(sum(j.gpu_s for j in res.jobs) / 3600.0, 3),
        "wait_s": {"median": pct(all_waits, 50), "p90": pct(all_waits, 90), "p99": pct(all_waits, 99)},
        "preemptions": len(res.preemptions),
        "lost_gpu_hours": round(sum(j.lost_gpu_s for j in res.jobs) / 3600.0, 3),
        "jain_index": None if jain is None else round(jain, 4),
    }
    billed = bills(res, start_epoch)
    if billed is not None:
        amounts, currency, epoch = billed
        for t, row in out["teams"].items():
            row["bill"] = amounts.get(t, "0.00")
        out["cluster"]["bill"] = {"currency": currency, "start_epoch": epoch,
                                  "total": str(sum((Decimal(v) for v in amounts.values()), Decimal(0)))}
    return out


def utilisation_series(res: Result, buckets: int = 200) -> list[dict[str, Any]]:
    """Allocated GPUs per team, averaged over `buckets` equal spans of the run."""
    if not res.samples:
        return []
    t0, t1 = res.samples[0].t, res.end_s
    width = (t1 - t0) / buckets if t1 > t0 else 1.0
    teams = sorted({t for s in res.samples for t in s.alloc})
    acc = [dict.fromkeys(teams, 0.0) for _ in range(buckets)]
    for a, b in zip(res.samples, [*res.samples[1:], None], strict=True):
        lo, hi = a.t, (b.t if b is not None else t1)
        while lo < hi:
            k = min(buckets - 1, int((lo - t0) / width))
            edge = min(hi, t0 + (k + 1) * width)
            for t, v in a.alloc.items():
                acc[k][t] += v * (edge - lo)
            if edge <= lo:
                break
            lo = edge
    return [{"t": round(t0 + (k + 0.5) * width, 3), **{t: round(v / width, 4) for t, v in acc[k].items()}}
            for k in range(buckets)]
