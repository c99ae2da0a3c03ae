"""`batchd report --html`: the bill as one self-contained page to forward or print (A4
portrait): inline CSS and SVG, no script, no network, no external font. It renders the
report object (`build_report`'s JSON) as it is, plus `user_rows` (the same report
grouped by account and user, which the route adds when asked with `by_user=1`).

The page, in order: the title (cluster, the period in words, issue date, currency), a
summary (total cost, use against capacity, idle capacity and its cost, the
reconciliation), the bill by account, the rate card, the daily chart with its numbers,
quota against use, the users of each account, notes. Every text is escaped; every
figure a reader needs is printed (hover titles only repeat them). Charts: htmlcharts.
Fields that only some reports carry are read with .get(): `period.tz`, `down_gpu_hours`,
a row's `lent_gpu_hours`, a user row's `account_share_pct`.
"""

from __future__ import annotations

import datetime as _dt
import time
from decimal import Decimal, InvalidOperation
from html import escape
from typing import Any

from batchd.accounting.billtime import (
    MONTHS,
    WEEKDAYS,
    Day,
    day_month,
    days_of,
    local,
    moment,
    month_of,
    period_words,
    span_words,
    zone,
)
from batchd.accounting.htmlcharts import (
    PALETTE,
    colors,
    daily_svg,
    legend_svg,
    quota_svg,
    swatch,
    totals_on_bars,
)
from batchd.accounting.render import PERCENT, _cell, _total_row, columns, fmt_cell, fmt_day, fmt_time

__all__ = ["PALETTE", "render_html"]

QUOTA_KEYS = ("quota_gpu_hours", "quota_used_pct", "borrowed_gpu_hours", "lent_gpu_hours")
MONEY_KEYS = ("cost", "idle_cost", "cost_with_idle")
NOT_MEASURED = "not measured"
DASH = "–"


def money(v: Any) -> str:
    """A decimal string of money with thousands separators, two places."""
    try:
        return f"{Decimal(str(v)):,.2f}"
    except (InvalidOperation, ValueError):
        return str(v or "")


def hours(v: Any) -> str:
    return DASH if v is None else f"{float(v):,.2f}"


def unit_of(tres: str) -> str:
    """What one unit-hour of a TRES is, in words."""
    if tres.startswith("gres/gpu"):
        return "GPU-hour" if ":" not in tres or not tres.split(":", 1)[1][:1].isdigit() else "instance-hour"
    return {"cpu": "CPU-hour", "mem": "GiB-hour", "billing": "billing-hour"}.get(tres, "unit-hour")


def _td(text: str, cls: str = "n") -> str:
    return f'<td class="{cls}">{escape(text)}</td>' if cls else f"<td>{escape(text)}</td>"


def _cell_text(key: str, v: Any) -> str:
    if key == "gpu_efficiency_pct" and v is None:
        return NOT_MEASURED
    if key in MONEY_KEYS and v is not None:
        return money(v)
    return fmt_cell(key, v)


def _table(head: list[str], body: list[str], foot: str = "", cls: str = "", caption: str = "") -> str:
    th = "".join(f'<th scope="col">{escape(h)}</th>' for h in head)
    attr = f' class="{cls}"' if cls else ""
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    tfoot = f"<tfoot>{foot}</tfoot>" if foot else ""
    return f'<table{attr}>{cap}<thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody>{tfoot}</table>'


def _bill(rep: dict[str, Any]) -> str:
    """The bill's rows and TOTAL: the usage and cost columns of the text table; the quota
    columns are in the quota section."""
    cols = [(k, h) for k, h in columns(rep) if k not in QUOTA_KEYS]
    cur = rep.get("currency") or ""
    head = [("GPU efficiency" if k == "gpu_efficiency_pct" else h) for k, h in cols]
    ngroup = len(rep["group_by"])
    body = []
    for r in rep["rows"]:
        cells = [_td(str(_cell(r, k) or ""), "") if i < ngroup else
                 _td(_cell_text(k, _cell(r, k)), "n muted" if k == "gpu_efficiency_pct"
                     and r.get(k) is None else "n") for i, (k, _) in enumerate(cols)]
        body.append("<tr>" + "".join(cells) + "</tr>")
    tot = _total_row(rep)
    cells = [_td("TOTAL" if i == 0 else "", "") for i in range(ngroup)]
    cells += [_td(_cell_text(k, _cell(tot, k)) if k != "gpu_efficiency_pct" else "") for k, _ in cols[ngroup:]]
    note = (f'<p class="small">{f"Costs in {escape(cur)}. " if cur else ""}Billing-h: the jobs\' billing units '
            f'(Slurm\'s TRES billing weights) times hours, charged only where the rate card prices billing. '
            f'GPU efficiency: measured GPU utilisation over the GPU time that was measured; "{NOT_MEASURED}" '
            f'where no GPU time was measured.</p>')
    return _table(head, body, '<tr class="total">' + "".join(cells) + "</tr>") + note


def _budgets(rep: dict[str, Any]) -> str:
    """The GPU-hour budgets (GrpTRESMins) of the accounts shown: used / limit in their period."""
    body = [("<tr>" + _td(str(b["account"]), "") + _td(str(b["tres"]), "") + _td(str(b["period"]), "")
             + _td(f"{b['used_minutes'] / 60:,.1f}") + _td(f"{b['limit_minutes'] / 60:,.1f}")
             + _td("used up: new jobs wait" if b["exhausted"] else f"{b['used_pct']}%") + "</tr>")
            for b in rep.get("budgets") or []]
    return (_table(["Account", "TRES", "Period", "Used (hours)", "Budget (hours)", "Used"], body)
            + '<p class="small">Hours of the TRES (GPU-hours for gres/gpu) since the budget period began, '
              "counted as this bill counts them; a used-up budget holds the account's new jobs.</p>") if body else ""


def _rate_card(rep: dict[str, Any]) -> str:
    card = rep.get("rate_card") or []
    if not card:
        return '<p>No prices in force in the period: nothing is charged.</p>'
    body = []
    for p in card:
        applied = (span_words(local(p["applied_from"], _dt.UTC), local(p["applied_to"], _dt.UTC), "UTC")
                   if p.get("applied_from") is not None else "")
        body.append("<tr>" + _td(str(p["tres"]), "") + _td(f"{money(p['per_hour'])} per {unit_of(p['tres'])}")
                    + _td(str(p.get("currency") or ""), "") + _td(fmt_day(p.get("valid_from")), "d")
                    + _td(fmt_day(p["valid_to"]) if p.get("valid_to") is not None else "open-ended", "d")
                    + _td(applied, "") + "</tr>")
    notes = ['Dates are UTC. "Valid to" is exclusive: the price ends at the start of that day. "Applied in '
             'this bill" is the part of this period the price was used for, its last day included.']
    if any(p["tres"] == "gres/gpu" for p in card):
        notes.append("A GPU type or MIG profile without a price of its own costs the gres/gpu price times "
                     "its share of a card.")
    return (_table(["TRES", "Price", "Currency", "Valid from", "Valid to", "Applied in this bill"], body,
                   cls="card")
            + "".join(f'<p class="small">{escape(n)}</p>' for n in notes))


def _daily_table(rep: dict[str, Any], days: list[Day], accounts: list[str], palette: dict[str, str]) -> str:
    """The chart's numbers: a column per account and the total; a line per day (per
    month where the period is longer than two months); the days not counted yet in one
    line that says so."""
    tz, label = zone(rep)
    daily = rep.get("daily") or {}
    monthly = len(days) > 62
    groups: dict[tuple[int, ...], list[Day]] = {}
    for d in days:
        if d.counted > 0:
            key = (d.date.year, d.date.month) if monthly else (d.date.year, d.date.month, d.date.day)
            groups.setdefault(key, []).append(d)
    head = ["Month" if monthly else "Day", *accounts, "Total"]
    body, sums = [], dict.fromkeys(accounts, 0.0)
    for group in groups.values():
        d = group[0]
        name = f"{MONTHS[d.date.month - 1]} {d.date.year}" if monthly else f"{WEEKDAYS[d.date.weekday()]} {day_month(d.date)}"
        if group[-1].counted < 1:
            g = group[-1]
            upto = local(g.start + g.counted * (g.end - g.start), tz)
            name += f" (to {day_month(upto.date()) + ' ' if monthly else ''}{upto:%H:%M} {label})"
        vals = [sum(float((daily.get(x.key) or {}).get(a, 0.0)) for x in group) for a in accounts]
        for a, v in zip(accounts, vals, strict=True):
            sums[a] += v
        cls = ' class="weekend"' if not monthly and d.date.weekday() >= 5 else ""
        body.append(f"<tr{cls}><td>{escape(name)}</td>"
                    + "".join(_td(f"{v:,.2f}", "n" if v else "n muted") for v in vals)
                    + _td(f"{sum(vals):,.2f}", "n" if sum(vals) else "n muted") + "</tr>")
    later = [d for d in days if d.counted == 0]
    if later:
        first, last = later[0].date, later[-1].date
        name = (day_month(first) if first == last else f"{first.day}–{last.day} {MONTHS[first.month - 1]}"
                if (first.year, first.month) == (last.year, last.month) else f"{day_month(first)} – {day_month(last)}")
        body.append(f'<tr class="notyet"><td>{escape(name)}</td>'
                    f'<td colspan="{len(accounts) + 1}">not yet counted</td></tr>')
    foot = ('<tr class="total"><td>Period</td>' + "".join(_td(f"{sums[a]:,.2f}") for a in accounts)
            + _td(f"{sum(sums.values()):,.2f}") + "</tr>")
    th = "".join(f'<th scope="col">{swatch(palette[a]) + " " if 0 < i < len(head) - 1 else ""}{escape(a)}</th>'
                 for i, a in enumerate(head))
    caption = f"GPU-hours per {'month' if monthly else 'day'} and account"
    return (f'<table class="daily"><caption>{caption}</caption><thead><tr>{th}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody><tfoot>{foot}</tfoot></table>')


def _quota_span(rep: dict[str, Any]) -> tuple[float, float, float]:
    """(start, end, upto) of the quota: the whole period (a month counted up to now:
    the whole month), and how far it is counted."""
    p = rep["period"]
    month = month_of(rep)
    end = month[1].timestamp() if month else float(p["end"])
    return float(p["start"]), end, float(p.get("upto", p["end"]))


def _quota(rep: dict[str, Any], palette: dict[str, str]) -> str:
    rows = [r for r in rep["rows"] if "quota_gpu_hours" in r]
    if not rows:
        return ""
    start, end, upto = _quota_span(rep)
    elapsed = (upto - start) / (end - start) if end > start else 1.0
    items, body = [], []
    for r in rows:
        label = " ".join(str(r[g]) for g in rep["group_by"] if r.get(g) is not None)
        to_date = r.get("quota_gpu_hours") or None  # 0 or null: no quota
        whole = to_date / elapsed if to_date is not None and elapsed > 0 else None
        used, borrowed = float(r.get("gpu_hours") or 0.0), float(r.get("borrowed_gpu_hours") or 0.0)
        pct = r.get("quota_used_pct")
        caption = (f"{used:,.1f} GPU-h, {pct:,.1f}% of quota to date" if to_date and pct is not None
                   else f"{used:,.1f} GPU-h used (no quota)")
        items.append({"label": label, "account": r.get("account"), "used": used, "whole": whole,
                      "to_date": to_date, "borrowed": borrowed, "caption": caption})
        body.append("<tr>" + _td(label, "") + _td(hours(whole) if to_date else "no quota")
                    + _td(hours(to_date) if to_date else DASH) + _td(hours(used))
                    + _td(fmt_cell("quota_used_pct", pct) if to_date and pct is not None else DASH)
                    + _td(hours(r.get("borrowed_gpu_hours"))) + _td(hours(r.get("lent_gpu_hours"))) + "</tr>")
    tz, label = zone(rep)
    intro = (f"The quota is shown for the whole period; {elapsed:.0%} of it has elapsed (to "
             f"{moment(upto, tz, label)}), marked by the dashed line. Use is compared with the quota "
             f"to date. Borrowed: GPU-hours held beyond the quota at each moment, from capacity others "
             f"left idle. Lent: GPU-hours of this quota others used.") if elapsed < 1 else (
             "Use against the quota of the period. Borrowed: GPU-hours held beyond the quota at each "
             "moment, from capacity others left idle. Lent: GPU-hours of this quota others used.")
    head = ["Account", "Quota, whole period", "Quota to date", "Used", PERCENT["quota_used_pct"], "Borrowed",
            "Lent"]
    return (f'<div class="chart"><p class="small">{escape(intro)}</p>{quota_svg(items, palette)}</div>'
            + _table(head, body, caption="GPU-hours; quota used = used / quota to date"))


def _users(rep: dict[str, Any]) -> str:
    urows = rep.get("user_rows")
    if not urows:
        return ""
    cur = rep.get("currency") or ""
    by_acct: dict[str, list[dict[str, Any]]] = {}
    for r in urows:
        by_acct.setdefault(str(r.get("account", "")), []).append(r)
    acct_cost = {str(r.get("account")): r.get("cost") for r in rep["rows"] if "account" in r}
    share = any("account_share_pct" in r for r in urows)
    head = ["User", "GPU-h", "CPU-h", "Billing-h", f"Cost {cur}".strip()]
    head += ["Share of account"] if share else []
    head += ["GPU efficiency"]
    out = []
    for acct in sorted(by_acct):
        rows = sorted(by_acct[acct], key=lambda r: str(r.get("user", "")))
        body = []
        for r in rows:
            cells = [_td(str(r.get("user") or ""), ""), _td(hours(r.get("gpu_hours"))), _td(hours(r.get("cpu_hours"))),
                     _td(hours(r.get("billing"))), _td(money(r.get("cost")))]
            if share:
                v = r.get("account_share_pct")
                cells.append(_td(DASH if v is None else fmt_cell("quota_used_pct", v)))
            eff = r.get("gpu_efficiency_pct")
            cells.append(_td(_cell_text("gpu_efficiency_pct", eff), "n muted" if eff is None else "n"))
            body.append("<tr>" + "".join(cells) + "</tr>")
        ucost = sum((Decimal(str(r.get("cost") or 0)) for r in rows), Decimal(0))
        foot = ('<tr class="total">' + _td(f"{acct} total", "") + _td(hours(sum(r.get("gpu_hours") or 0 for r in rows)))
                + _td(hours(sum(r.get("cpu_hours") or 0 for r in rows)))
                + _td(hours(sum(r.get("billing") or 0 for r in rows))) + _td(money(ucost))
                + "<td></td>" * (1 + share) + "</tr>")
        note = ""
        if acct in acct_cost and acct_cost[acct] is not None and Decimal(str(acct_cost[acct])) != ucost:
            note = (f'<p class="small">Each user\'s cost is rounded to the cent on its own: they add up to '
                    f'{escape(money(ucost))} {escape(cur)}; the account is billed '
                    f'{escape(money(acct_cost[acct]))} {escape(cur)}.</p>')
        out.append(f'<section class="user"><h3>{escape(acct)}</h3>{_table(head, body, foot)}{note}</section>')
    return "".join(out)


def _summary(rep: dict[str, Any]) -> str:
    cur = escape(rep.get("currency") or "")
    t = rep["totals"]
    cap = float(rep.get("capacity_gpu_hours") or 0.0)
    used = float(t.get("gpu_hours") or 0.0)
    idle = float(rep.get("idle_gpu_hours") or 0.0)
    spread = bool(rep["rows"]) and "idle_cost" in rep["rows"][0]
    p = rep["period"]
    month = month_of(rep)
    so_far = p.get("upto", p["end"]) < p["end"] or (month is not None and not month[2])
    items = [("Total cost to date" if so_far else "Total cost", f"<strong>{escape(money(t['cost']))} {cur}</strong>"
              + (f" ({escape(money(t['cost_with_idle']))} {cur} with idle capacity spread over accounts)"
                 if "cost_with_idle" in t else "")),
             ("GPU-hours used", f"{used:,.2f} of {cap:,.2f} GPU-hours of capacity"
              + (f" ({used / cap:.1%})" if cap else ""))]
    if rep.get("idle_gpu_hours") is None and "idle_gpu_hours" in rep:  # a non-admin's bill: not shown
        items.append(("Idle GPU capacity", "shown to administrators only (it depends on other accounts' use)"))
    else:
        items.append(("Idle GPU capacity", f"{idle:,.2f} GPU-hours, worth {escape(money(rep.get('idle_cost')))} "
                      f"{cur} at the rate card, "
                      + ("spread over accounts by quota" if spread else "not charged to any account")))
    down = rep.get("down_gpu_hours")
    if down is not None:
        items.append(("Down or drained", f"{float(down):,.2f} GPU-hours on nodes that were down or drained "
                      "(not part of idle)"))
    by = "accounts" if rep["group_by"] == ["account"] else "rows"
    if rep.get("reconciled"):
        rec = (f'<span class="ok">Reconciled to the cent:</span> sum over {by} {escape(money(t["cost"]))} {cur} '
               f'= sum over jobs {escape(money(rep.get("jobs_cost")))} {cur}')
    else:
        rec = (f'<span class="bad">NOT RECONCILED:</span> sum over {by} {escape(money(t["cost"]))} {cur} '
               f'≠ sum over jobs {escape(money(rep.get("jobs_cost")))} {cur}')
    items.append(("Reconciliation", rec))
    return '<dl class="summary">' + "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _notes(rep: dict[str, Any]) -> str:
    tz, label = zone(rep)
    p = rep["period"]
    upto = p.get("upto", p["end"])
    notes = [f"Period: {fmt_time(p['start'])} to {fmt_time(p['end'])} UTC, the end exclusive"
             + (f"; counted up to {fmt_time(upto)} UTC." if upto < p["end"] else ".")]
    if rep.get("running_included"):
        notes.append(f"Includes {rep['running_included']} running job(s) or runs not yet rolled up, counted "
                     f"up to {moment(upto, tz, label, year=True)}.")
    for f in rep.get("flags", []):
        notes.append(f"Job {f['job_id']} run {f['run']} ({f['account']}/{f['user']}) held its GPUs at 0% "
                     f"utilisation for {f['gpu_zero_max_s'] / 3600:.1f} h.")
    return "<ul class=\"notes\">" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>"


def _chart_note(ndays: int) -> str:
    note = "A bar per day, a colour per account"
    if totals_on_bars(ndays):
        note += "; the number above a bar is the day's total in GPU-hours, rounded"
    note += f". The table below has the exact figures{' by month' if ndays > 62 else ''}."
    return note + (" Weekend days are in red." if ndays <= 93 else "")


def render_html(rep: dict[str, Any], issued: float | None = None) -> str:
    """The page, as one string (UTF-8 text). `issued`: when the page is produced (unix
    seconds; default now), printed as the issue date."""
    tz, label = zone(rep)
    cluster = str(rep.get("cluster") or "")
    words = period_words(rep)
    cur = rep.get("currency") or ""
    days = days_of(rep)
    daily = rep.get("daily") or {}
    accounts = sorted({a for day in daily.values() for a in day}
                      | {str(r["account"]) for r in rep["rows"] if r.get("account") is not None})
    palette = colors(accounts)
    p = rep["period"]
    upto = p.get("upto", p["end"])
    notyet = f"not yet counted (after {moment(upto, tz, label)})"
    when = moment(time.time() if issued is None else issued, tz, label, year=True)
    meta = [("Issued", when), ("Currency", cur or "none (no prices set)"),
            ("Times", f"{label}; days are calendar days in {label}")]
    quota = _quota(rep, palette)
    users = _users(rep)
    budgets = _budgets(rep)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(cluster + " " if cluster else "")}GPU bill, {escape(words)}</title>
<style>{CSS}</style></head><body>
<header><p class="kicker">GPU usage bill{" · cluster " + escape(cluster) if cluster else ""}</p>
<h1>{escape(words)}</h1>
<dl class="meta">{"".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in meta)}</dl></header>
<section><h2>Summary</h2>{_summary(rep)}</section>
<section><h2>Bill by {escape(", ".join(rep["group_by"]).replace("_", " "))}</h2>{_bill(rep)}</section>
<section><h2>Rate card</h2>{_rate_card(rep)}</section>
<section class="chart"><h2>GPU-hours per day</h2>{legend_svg(accounts, palette)}
{daily_svg(days, daily, accounts, palette, notyet)}
<p class="small">{escape(_chart_note(len(days)))}</p></section>
<section>{_daily_table(rep, days, accounts, palette)}</section>
{f'<section><h2>Quota and use</h2>{quota}</section>' if quota else ""}
{f'<section><h2>Users of each account</h2>{users}</section>' if users else ""}
{f'<section><h2>GPU-hour budgets</h2>{budgets}</section>' if budgets else ""}
<section><h2>Notes</h2>{_notes(rep)}</section>
</body></html>
"""


CSS = """
:root{color-scheme:light}
body{font-family:system-ui,"DejaVu Sans",sans-serif;margin:24px auto;max-width:1000px;padding:0 16px;color:#222;
font-size:14px;line-height:1.4}
.kicker{margin:0;color:#555;font-size:15px}
h1{margin:2px 0 8px;font-size:26px}h2{margin:26px 0 8px;font-size:19px;border-bottom:1px solid #ccc}
h3{margin:16px 0 4px;font-size:16px}
dl.meta{display:flex;flex-wrap:wrap;gap:4px 24px;margin:0;color:#444}dl.meta dt{font-weight:bold}
dl.meta dt::after{content:":"}dl.meta dd{margin:0 0 0 -20px}
dl.summary{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:0}
dl.summary dt{font-weight:bold}dl.summary dd{margin:0}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:bottom}
th{background:#f3f3f3;border-bottom:2px solid #999}
td.n,td.d{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}td.d{text-align:left}
.muted{color:#888}tr.total td{font-weight:bold;border-top:2px solid #333}
tr.notyet td{color:#888;font-style:italic}tr.weekend td:first-child{color:#a33}
caption{text-align:left;font-weight:bold;padding:4px 0}
.small{font-size:12px;color:#444;margin:4px 0}
.ok{color:#1a7a3a;font-weight:bold}.bad{color:#c22;font-weight:bold}
svg#daily,svg#quota{width:100%;height:auto;display:block}svg.legend{display:block;margin:4px 0}
.swatch{vertical-align:-1px}
@page{size:A4 portrait;margin:14mm 12mm}
@media print{
body{margin:0;max-width:none;padding:0;font-size:9.5pt}
h1{font-size:18pt}h2{font-size:13pt;margin-top:14pt}table{font-size:8.5pt}th,td{padding:2px 5px}
h2,h3,caption{break-after:avoid}tr,.chart,dl{break-inside:avoid}thead{display:table-header-group}
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}
}
"""
