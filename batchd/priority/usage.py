"""Decayed fair-share usage: Slurm's per-second decay, per-cycle accrual, resets.

Pure: no I/O and no clock; every time is an argument (unix seconds). Usage is in
billing-seconds (TRES billing units x seconds), the figure sshare shows as RawUsage.

Slurm's model, reproduced here:

* Per-second decay factor ``d = 1 - 0.693 / half_life_s`` (a linearised ln 2, so one
  half-life leaves 0.500073, not 0.5); ``half_life_s == 0`` means no decay (d = 1).
* Each cycle of length ``dt = now - last`` (PriorityCalcPeriod, 300 s by default):
  every usage figure is multiplied by ``d ** dt``; then each running job adds
  ``run_s * d ** run_s * billing * qos_usage_factor`` to its user association (and,
  through the sums, to every ancestor account), ``run_s`` being the overlap of
  ``[last, now]`` with the job's run ``[start, end or now]``.
* ``PriorityUsageResetPeriod``: NONE, NOW (the caller resets once), DAILY (00:00),
  WEEKLY (Sunday 00:00), MONTHLY / QUARTERLY / YEARLY (first day 00:00), all UTC
  here. When a boundary falls inside ``(last, now]`` usage is zeroed at the boundary
  and only the job time after it is charged.

Worked figures (7-day half-life): 1e6 decays to 999656.31 over 300 s; billing 4 for a
300 s cycle adds 1199.59; billing 8 for one hour from zero, in 300 s cycles, reaches
28735.74.

Restart safety is the caller's: persist the usage together with ``last`` (the time
of the last cycle) in one transaction; the next cycle then charges exactly
``[last, now]``, so no second is charged twice or lost.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = [
    "LN2_SLURM",
    "RESET_PERIODS",
    "Charge",
    "decay_factor",
    "decay",
    "accrue",
    "job_usage",
    "run_overlap",
    "last_reset_boundary",
    "advance_usage",
]

LN2_SLURM = 0.693
RESET_PERIODS = ("NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY")


def decay_factor(half_life_s: float) -> float:
    """Slurm's per-second decay factor ``1 - 0.693 / half_life_s`` (1.0 for 0)."""
    if half_life_s < 0:
        raise ValueError("decay_half_life_s must be >= 0")
    if half_life_s == 0:
        return 1.0
    return 1.0 - LN2_SLURM / half_life_s


def decay(usage: float, dt_s: float, half_life_s: float) -> float:
    """``usage`` after ``dt_s`` seconds of decay (``usage * d ** dt_s``); never negative."""
    if dt_s <= 0:
        return max(usage, 0.0)
    d = decay_factor(half_life_s)
    return max(usage * d ** dt_s, 0.0) if d > 0 else 0.0


def accrue(usage: float, billing: float, dt_s: float, half_life_s: float, usage_factor: float = 1.0) -> float:
    """One cycle for one association with one job running all of it:
    ``usage * d**dt + dt * d**dt * billing * usage_factor``."""
    return decay(usage, dt_s, half_life_s) + job_usage(billing, dt_s, half_life_s, usage_factor)


def job_usage(billing: float, run_s: float, half_life_s: float, usage_factor: float = 1.0) -> float:
    """What a job that ran ``run_s`` seconds of a cycle adds: ``run_s * d**run_s * billing * factor``."""
    if run_s <= 0 or billing <= 0 or usage_factor <= 0:
        return 0.0
    d = decay_factor(half_life_s)
    return run_s * (d ** run_s if d > 0 else 0.0) * billing * usage_factor


def run_overlap(last_s: float, now_s: float, start_s: float | None, end_s: float | None) -> float:
    """Seconds of the job's run ``[start, end or now]`` inside ``[last, now]`` (>= 0)."""
    if start_s is None:
        return 0.0
    lo = max(last_s, start_s)
    hi = now_s if end_s is None else min(now_s, end_s)
    return max(hi - lo, 0.0)


def last_reset_boundary(period: str, now_s: float) -> float | None:
    """The latest reset boundary at or before ``now_s`` for ``period`` (UTC), or None
    for NONE/NOW (no periodic reset). Raises ``ValueError`` on an unknown period."""
    p = (period or "NONE").upper()
    if p not in RESET_PERIODS:
        raise ValueError(f"usage_reset_period must be one of {', '.join(RESET_PERIODS)}, not {period!r}")
    if p in ("NONE", "NOW"):
        return None
    t = datetime.fromtimestamp(now_s, UTC)
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if p == "DAILY":
        b = day
    elif p == "WEEKLY":
        b = day - timedelta(days=(day.weekday() + 1) % 7)  # back to Sunday
    elif p == "MONTHLY":
        b = day.replace(day=1)
    elif p == "QUARTERLY":
        b = day.replace(day=1, month=(day.month - 1) // 3 * 3 + 1)
    else:
        b = day.replace(day=1, month=1)
    return float(calendar.timegm(b.timetuple()))


@dataclass(frozen=True)
class Charge:
    """A job to charge in a cycle: its user association ``key`` ("account/user"),
    its billing rate, QOS usage factor, and run interval (``end_s`` None = running)."""

    key: str
    billing: float
    start_s: float | None
    end_s: float | None = None
    usage_factor: float = 1.0


def advance_usage(usage: Mapping[str, float], charges: Iterable[Charge], last_s: float, now_s: float,
                  half_life_s: float, reset_period: str = "NONE") -> dict[str, float]:
    """One decay cycle over ``[last_s, now_s]``: a new ``{"account/user": usage}``.

    Decays every figure by ``d ** (now - last)`` (after zeroing at a reset boundary
    inside the interval), then adds each charge's share of the interval. Input is not
    modified. ``now_s < last_s`` raises ``ValueError`` (a clock going backwards must
    not uncharge).
    """
    if now_s < last_s:
        raise ValueError("now_s is before last_s")
    start = last_s
    out = {k: float(v) for k, v in usage.items()}
    boundary = last_reset_boundary(reset_period, now_s)
    if boundary is not None and last_s < boundary <= now_s:
        out = {k: 0.0 for k in out}
        start = boundary
    dt = now_s - start
    out = {k: decay(v, dt, half_life_s) for k, v in out.items()}
    for c in charges:
        run = run_overlap(start, now_s, c.start_s, c.end_s)
        if run > 0:
            out[c.key] = out.get(c.key, 0.0) + job_usage(c.billing, run, half_life_s, c.usage_factor)
    return out
