"""GPU-hour budgets (Slurm's GrpTRESMins, batchd.slurm.assocpolicy): what each account with a budget
has used in its current budget period, in TRES-minutes, counted from the accounting as the bill
counts it (batchd.accounting.report: rolled-up runs, runs not rolled up yet, and RUNNING jobs
up to now), for the account's whole subtree. The controller puts it in the snapshot as
`accounts[].budget_used`; `batchd why` and `sshare` show it.

Periods restart at UTC boundaries: `month` on the 1st, `week` on Monday, `day` at midnight,
`year` on 1 January; `none` never (all usage counts). Unlike Slurm, whose GrpTRESMins is
compared with the decayed usage and also kills the running jobs once reached, a budget here
counts raw usage in its period and only holds new starts (running jobs finish).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from batchd.model import Account
from batchd.store import Store


def period_start(period: str, now: float) -> int:
    """The UTC start (unix s) of the budget period containing `now`; 0 for `none`."""
    t = dt.datetime.fromtimestamp(now, dt.UTC)
    if period == "none":
        return 0
    if period == "day":
        s = t.replace(hour=0, minute=0, second=0, microsecond=0)
    elif period == "week":
        s = (t - dt.timedelta(days=t.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
    elif period == "year":
        s = t.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    else:
        s = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(s.timestamp())


def subtree(accounts: list[Account] | list[Any], name: str) -> set[str]:
    """`name` and the accounts under it (`accounts`: anything with `name` and `parent`)."""
    kids: dict[str | None, list[str]] = defaultdict(list)
    for a in accounts:
        kids[a.parent].append(a.name)
    out, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo.extend(kids.get(n, []))
    return out


def budget_used(store: Store, accounts: list[Account], now: float) -> dict[str, dict[str, float]]:
    """{account: {tres: minutes used in its period}} for the accounts that have a budget
    (`policy.grp_tres_mins`); one report per distinct period start."""
    from batchd.accounting.report import build_report

    with_budget = [a for a in accounts if (a.policy or {}).get("grp_tres_mins")]
    if not with_budget:
        return {}
    by_start: dict[int, dict[str, dict[str, float]]] = {}
    out: dict[str, dict[str, float]] = {}
    for a in with_budget:
        start = period_start(str((a.policy or {}).get("budget_period", "month")), now)
        if start not in by_start:
            rep = build_report(store, start=start, end=int(now) + 1, now=now, group_by=["account"], raw=True)
            by_start[start] = {r["account"]: r.get("tres_s") or {} for r in rep["rows"]}
        rows = by_start[start]
        used: dict[str, float] = defaultdict(float)
        for name in subtree(accounts, a.name):
            for tres, secs in rows.get(name, {}).items():
                used[tres] += float(secs) / 60.0
        out[a.name] = {t: round(used.get(t, 0.0), 3) for t in (a.policy or {})["grp_tres_mins"]}
    return out


def budget_lines(policy: dict[str, Any] | None, used: dict[str, float] | None) -> list[str]:
    """Human lines for `batchd why`: each budgeted TRES, used / limit in its period."""
    out = []
    for tres, limit in ((policy or {}).get("grp_tres_mins") or {}).items():
        u = (used or {}).get(tres, 0.0)
        hours = "GPU-hours" if tres.startswith("gres/gpu") else f"{tres}-hours"
        out.append(f"budget {tres}: {u / 60:.1f} of {float(limit) / 60:.1f} {hours} used this "
                   f"{(policy or {}).get('budget_period', 'month')}" + (" (used up)" if u >= float(limit) else ""))
    return out
