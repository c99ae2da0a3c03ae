"""HTTP handlers of chargeback, for `batchd/server/api.py` to merge into its ROUTES:

    GET  /v1/report?start=&end=&month=&tz=&by=account,user&accounts=&users=&spread_idle=1&daily=1&raw=1&zero_gpu_s=
                   &by_user=1
         -> the report object of docs/report.md (start/end unix seconds or dates in
            tz, end also "now": the daemon's clock, the current partial hour included;
            month=YYYY-MM in tz; tz default [report] timezone, else UTC; default period:
            the current month up to now; non-admins: only their accounts, see `report`).
            by_user=1 (the HTML bill) adds "user_rows": the rows of the same report
            grouped by account and user, at the same `now`
    GET  /v1/prices                 -> {"prices": [PRICE], "currency": str}
    POST /v1/prices  (admin)        body {"prices": [{tres, per_hour, currency, valid_from, valid_to}]}
                                    -> {"added": n}; valid_from/valid_to as in `[[price]]`
    GET  /v1/eff?job=ID             -> {"job": {...}, "runs": [...], "efficiency": {...} | None}
    POST /v1/rollup  (admin)        -> {"rolled": n}: roll up now instead of waiting for the timer

Handlers have api.py's signature `(service, caller, query, body) -> dict`.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from batchd.accounting import efficiency
from batchd.accounting.prices import PriceError, make_price
from batchd.accounting.report import GROUPS, build_report
from batchd.accounting.rollup import run_rollup
from batchd.accounting.zones import UnknownZone, month_bounds_in, parse_time_in, zone_of
from batchd.errors import InvalidRequest, NotFound, PermissionDenied
from batchd.server.caller import Caller
from batchd.store import accounting as sql

if TYPE_CHECKING:
    from batchd.server.service import Service

ZERO_GPU_S_DEFAULT = 3600.0


def _list(q: dict[str, str], key: str) -> list[str] | None:
    v = q.get(key)
    return [x for x in v.split(",") if x] if v else None


def _time(q: dict[str, str], key: str, default: int, zone: _dt.tzinfo, now: float | None = None) -> int:
    """q[key] as whole unix seconds: unix seconds, a date or date-time (YYYY-MM-DD[THH:MM],
    local time of `zone` unless it carries an offset); `now` (where given) also accepts
    the word "now"."""
    if now is not None and q.get(key) == "now":
        return math.floor(now)
    if not q.get(key):
        return default
    try:
        return parse_time_in(q[key], zone)
    except ValueError:
        raise InvalidRequest(f"{key}: {q[key]!r} is not a date (YYYY-MM-DD[THH:MM]) or unix seconds") from None


def month_bounds(now: float, zone: _dt.tzinfo = _dt.UTC) -> tuple[int, int]:
    """The calendar month (local time of `zone`) holding `now`."""
    d = _dt.datetime.fromtimestamp(now, zone)
    return month_bounds_in(d.year, d.month, zone)


def _month(text: str, zone: _dt.tzinfo) -> tuple[int, int]:
    try:
        y, m = (int(x) for x in text.split("-"))
        return month_bounds_in(y, m, zone)
    except ValueError:
        raise InvalidRequest(f"month: {text!r} is not a month (YYYY-MM)") from None


def visible_accounts(service: Service, caller: Caller, asked: list[str] | None) -> list[str] | None:
    """The accounts a caller's report may show: an administrator (root or the admin
    group) any (None = all); anyone else only the accounts they have an association
    with. A non-admin naming another account is refused (PermissionDenied)."""
    if service.is_admin(caller):
        return asked
    mine = sorted({a["account"] for a in service.store.list_associations() if a["user"] == caller.user})
    for name in asked or []:
        if name not in mine:
            raise PermissionDenied(f"Access/permission denied: user {caller.user} is not a member of account "
                                   f"{name} (only an administrator sees other accounts)")
    # no account of one's own: a filter that matches none ("" is no account's name)
    return asked or mine or [""]


def report(service: Service, caller: Caller, q: dict[str, str], body: Any) -> dict[str, Any]:
    """GET /v1/report: month=YYYY-MM or start/end (unix seconds or dates in tz), tz (IANA
    zone, default the config's [report] timezone, else UTC). Non-admins see only the
    rows of their accounts, with idle capacity hidden (null: it depends on the other
    accounts' use) and no --spread-idle."""
    now = time.time()
    tz = q.get("tz") or getattr(service.cfg, "report_timezone", "UTC") or "UTC"
    try:
        zone = zone_of(tz)
    except UnknownZone as e:
        raise InvalidRequest(f"--tz: {e}") from None
    if q.get("month"):
        start, end = _month(q["month"], zone)
    else:
        s0, e0 = month_bounds(now, zone)
        start, end = _time(q, "start", s0, zone), _time(q, "end", e0, zone, now)
    if end <= start:
        raise InvalidRequest("the report period is empty (end is not after start)")
    by = [g.replace("-", "_") for g in (_list(q, "by") or ["account"])]
    for g in by:
        if g not in GROUPS:
            raise InvalidRequest(f"--by {g}: one of account, user, gpu-type, node")
    admin = service.is_admin(caller)
    if q.get("spread_idle") == "1":
        service.require_admin(caller, "spread idle capacity over accounts (--spread-idle)")
    accounts = visible_accounts(service, caller, _list(q, "accounts"))
    zero_s = float(q.get("zero_gpu_s") or getattr(service.cfg, "zero_gpu_flag_s", None) or ZERO_GPU_S_DEFAULT)
    rep = build_report(service.store, start=start, end=end, now=now, group_by=by,
                       accounts=accounts, users=_list(q, "users"),
                       spread_idle=q.get("spread_idle") == "1", zero_gpu_s=zero_s,
                       daily=q.get("daily") == "1", raw=q.get("raw") == "1", tz=tz)
    if q.get("by_user") == "1" and by == ["account"]:
        # the same clock as the bill's, so that the users add up to their account's row
        rep["user_rows"] = build_report(service.store, start=start, end=end, now=now, group_by=["account", "user"],
                                        accounts=accounts, users=_list(q, "users"),
                                        zero_gpu_s=zero_s, tz=tz)["rows"]
    rep["cluster"] = service.cfg.cluster_name
    rep["scope"] = "all" if admin else "member_accounts"
    rep["budgets"] = _budgets(service, accounts, now)
    if not admin:
        rep["idle_gpu_hours"] = rep["idle_cost"] = None
    return rep


def _budgets(service: Service, accounts: list[str] | None, now: float) -> list[dict[str, Any]]:
    """The GPU-hour budgets (GrpTRESMins, batchd.accounting.budget) of the accounts shown: per account
    and TRES its budget period, the limit and the use so far, in minutes as Slurm counts."""
    from batchd.accounting.budget import budget_used, period_start

    accts = service.store.list_accounts()
    used = budget_used(service.store, accts, now)
    out = []
    for a in accts:
        pol = a.policy or {}
        if a.name not in used or (accounts is not None and a.name not in accounts):
            continue
        period = str(pol.get("budget_period", "month"))
        for tres, limit in pol["grp_tres_mins"].items():
            u = used[a.name].get(tres, 0.0)
            out.append({"account": a.name, "tres": tres, "period": period,
                        "period_start": period_start(period, now), "limit_minutes": float(limit),
                        "used_minutes": u, "used_pct": round(100.0 * u / float(limit), 1) if float(limit) else None,
                        "exhausted": u >= float(limit)})
    return out


def prices(service: Service, caller: Caller, q: dict[str, str], body: Any) -> dict[str, Any]:
    ps = sql.list_prices(service.store)
    return {"prices": [p.to_json() for p in ps], "currency": ps[0].currency if ps else ""}


def set_prices(service: Service, caller: Caller, q: dict[str, str], body: Any) -> dict[str, Any]:
    service.require_admin(caller, "set prices")
    items = (body or {}).get("prices")
    if not isinstance(items, list) or not items:
        raise InvalidRequest("body needs a non-empty list of prices")
    try:
        new = [make_price(d.get("tres"), d.get("per_hour"), d.get("currency"), d.get("valid_from"),
                          d.get("valid_to")) for d in items]
    except (PriceError, AttributeError) as e:
        raise InvalidRequest(str(e)) from None
    have = {p.currency for p in sql.list_prices(service.store)} | {p.currency for p in new}
    if len(have) > 1:
        raise InvalidRequest(f"prices must all be in one currency (have {', '.join(sorted(have))})")
    sql.add_prices(service.store, new, uid=caller.uid)
    return {"added": len(new)}


def eff(service: Service, caller: Caller, q: dict[str, str], body: Any) -> dict[str, Any]:
    text = q.get("job", "")
    head, _, task = text.partition("_")
    if not (head.isascii() and head.isdigit()) or (task and not (task.isascii() and task.isdigit())):
        raise InvalidRequest("job: a job id (N) or an array task (N_M) is needed")
    job_id = int(head)
    if task:  # an array task: its own job record (Python's int() would read "5_2" as 52)
        hits = [j for j in service.store.list_jobs(ids=[], array_job_ids=[job_id])
                if j.array_task_id == int(task)]
        if not hits:
            raise NotFound(f"Invalid job id specified: {text}")
        job_id = hits[0].id
    job = service.store.get_job(job_id)
    runs = service.store.list_usage(job_ids=[job_id])
    if job is None and not runs:
        raise NotFound(f"Invalid job id specified: {job_id}")
    e = sql.get_efficiency(service.store, job_id)
    jv: dict[str, Any] = {"id": job_id}
    if job is not None:
        jv.update(name=job.name, user=job.user, uid=job.uid, gid=job.gid, account=job.account, state=job.state,
                  exit_code=job.exit_code, exit_signal=job.exit_signal, start_time=job.start_time,
                  end_time=job.end_time, tres_alloc=job.tres_alloc, restarts=job.restarts)
    zero_s = float(getattr(service.cfg, "zero_gpu_flag_s", ZERO_GPU_S_DEFAULT))
    return {"cluster": service.cfg.cluster_name, "job": jv, "now": time.time(), "zero_gpu_flag_s": zero_s,
            "runs": [{"run": r.run, "state": r.state, "start_time": r.start_time, "end_time": r.end_time,
                      "elapsed_s": r.elapsed_s, "tres": r.tres, "cpu_time_s": r.cpu_time_s,
                      "max_rss_mb": r.max_rss_mb, "gpu_util_pct": r.gpu_util_pct, "gpu_mem_mb": r.gpu_mem_mb,
                      "exit_code": r.exit_code, "exit_signal": r.exit_signal} for r in runs],
            "efficiency": e, "summary": efficiency.summary(e)}


def rollup(service: Service, caller: Caller, q: dict[str, str], body: Any) -> dict[str, Any]:
    service.require_admin(caller, "start a rollup")
    return {"rolled": run_rollup(service.store)}


ROUTES: dict[tuple[str, str], Callable[[Service, Caller, Any, Any], object]] = {
    ("GET", "/v1/report"): report,
    ("GET", "/v1/prices"): prices,
    ("POST", "/v1/prices"): set_prices,
    ("GET", "/v1/eff"): eff,
    ("POST", "/v1/rollup"): rollup,
}
