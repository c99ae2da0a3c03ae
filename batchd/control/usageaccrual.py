"""Fair-share usage accrual (Slurm's PriorityCalcPeriod): decay every association's
usage and charge the jobs that ran since the last usage cycle, storing the new figures
and the cycle's end together.

The cycle's end is the `updated` time of the usage_state row `CYCLE_KEY`; a restart
therefore charges exactly the seconds since then, none twice, none lost. The
controller role calls `accrue_usage` at the start of every scheduling cycle.
"""

from __future__ import annotations

import time

from batchd.config import Config
from batchd.store import Store

CYCLE_KEY = "#cycle"  # usage_state row whose `updated` is the end of the last usage cycle


def accrue_usage(cfg: Config, store: Store, now: float | None = None, force: bool = False) -> bool:
    """Decay every association's usage and charge the jobs that ran since the last
    usage cycle (Slurm's PriorityCalcPeriod, `[priority] calc_period_s`, default
    300 s). The new figures and the cycle's end are stored together, so a restart
    charges exactly the seconds since then: none twice, none lost."""
    from batchd.priority.usage import Charge, advance_usage

    now = time.time() if now is None else now
    state = store.get_usage_state()
    cycle = state.pop(CYCLE_KEY, None)
    if cycle is None:
        store.put_usage_state({CYCLE_KEY: (0.0, now)})
        return False
    last = cycle[1]
    period = float(cfg.priority.get("calc_period_s", 300))
    if now <= last or (now - last < period and not force):
        return False
    factor = {q.name: q.usage_factor for q in cfg.qos}
    running, ended = store.usage_inputs(last)
    charges = [Charge(f"{j.account}/{j.user}", j.billing, j.start_time, None, factor.get(j.qos, 1.0))
               for j in running]
    charges += [Charge(f"{u.account}/{u.user}", u.billing, u.start_time, u.end_time, factor.get(u.qos, 1.0))
                for u in ended]
    usage = advance_usage({k: v for k, (v, _) in state.items() if "/" in k}, charges, last, now,
                          float(cfg.priority.get("decay_half_life_s", 604800)),
                          str(cfg.priority.get("usage_reset_period", "NONE")))
    values = {k: (v, now) for k, v in usage.items()}
    values[CYCLE_KEY] = (0.0, now)
    store.put_usage_state(values)
    return True
