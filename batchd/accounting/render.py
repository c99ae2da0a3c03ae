"""Text renderings of a report object (`build_report`'s JSON): aligned table and CSV.
Standard library only: `batchd report` renders what the daemon sends."""

from __future__ import annotations

import csv
import datetime as _dt
import io
from typing import Any

from batchd.slurm.gres import is_profile

LABELS = {"account": "Account", "user": "User", "gpu_type": "GPU type", "node": "Node"}
# the percentages: the table and HTML print "83.3%" under these headers, the CSV the
# plain number under "<header> (%)"
PERCENT = {"quota_used_pct": "Quota used", "gpu_efficiency_pct": "GPU eff", "account_share_pct": "Acct share"}


def fmt_time(ts: float, tz: str = "UTC") -> str:
    """Unix seconds as local time of the IANA zone `tz` (default UTC), without the zone."""
    zone: _dt.tzinfo = _dt.UTC
    if tz and tz != "UTC":
        try:
            from zoneinfo import ZoneInfo

            zone = ZoneInfo(tz)
        except (ValueError, KeyError, OSError):
            zone = _dt.UTC
    return _dt.datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%dT%H:%M:%S")


def _num(v: Any, places: int = 2) -> str:
    if v is None:
        return ""
    if isinstance(v, float | int):
        return f"{v:,.{places}f}"
    return str(v)


def fmt_cell(key: str, v: Any) -> str:
    """A number cell of the table and HTML: a percentage with one place and "%",
    anything else as `_num` writes it."""
    if key in PERCENT and isinstance(v, float | int):
        return f"{v:,.1f}%"
    return _num(v)


def gpu_types(rep: dict[str, Any]) -> list[str]:
    return sorted({t for r in rep["rows"] for t in r.get("gpu_hours_by_type", {})})


def columns(rep: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, header) of the table and CSV columns, in order; `gpuh:TYPE` keys are the
    per-type GPU-hours."""
    cur = rep.get("currency") or ""
    cols = [(g, LABELS[g]) for g in rep["group_by"]]
    cols.append(("gpu_hours", "GPU-h"))
    types = gpu_types(rep)
    if len(types) > 1:
        # a MIG profile's figure counts instance-hours (its card share is in GPU-h): say so
        cols += [(f"gpuh:{t}", f"Inst-h {t}" if is_profile(t) else f"GPU-h {t}") for t in types]
    cols += [("cpu_hours", "CPU-h"), ("billing", "Billing-h"), ("cost", f"Cost {cur}".strip())]
    first = rep["rows"][0] if rep["rows"] else {}
    if any("quota_gpu_hours" in r for r in rep["rows"]):
        cols += [("quota_gpu_hours", "Quota GPU-h"), ("quota_used_pct", PERCENT["quota_used_pct"]),
                 ("borrowed_gpu_hours", "Borrowed GPU-h")]
    if any("lent_gpu_hours" in r for r in rep["rows"]):
        cols.append(("lent_gpu_hours", "Lent GPU-h"))
    if any("account_share_pct" in r for r in rep["rows"]):
        cols.append(("account_share_pct", PERCENT["account_share_pct"]))
    if "idle_cost" in first:
        cols += [("idle_gpu_hours", "Idle GPU-h"), ("idle_cost", f"Idle {cur}".strip()),
                 ("cost_with_idle", f"Total {cur}".strip())]
    cols.append(("gpu_efficiency_pct", PERCENT["gpu_efficiency_pct"]))
    return cols


def _cell(row: dict[str, Any], key: str) -> Any:
    if key.startswith("gpuh:"):
        return row.get("gpu_hours_by_type", {}).get(key[5:], 0.0)
    return row.get(key)


def _total_row(rep: dict[str, Any]) -> dict[str, Any]:
    t = dict(rep["totals"])
    types: dict[str, float] = {}
    for r in rep["rows"]:
        for k, v in r.get("gpu_hours_by_type", {}).items():
            types[k] = types.get(k, 0.0) + v
    t["gpu_hours_by_type"] = types
    if rep["rows"] and "idle_cost" in rep["rows"][0]:
        t["idle_gpu_hours"] = rep["idle_gpu_hours"]
        t["idle_cost"] = rep["idle_cost"]
    return t


def fmt_day(ts: float | None) -> str:
    """A price's validity bound: the day at midnight, else the day and time (UTC)."""
    if ts is None:
        return ""
    d = _dt.datetime.fromtimestamp(ts, _dt.UTC)
    if d.time() == _dt.time(0):
        return d.strftime("%Y-%m-%d")
    return d.strftime("%Y-%m-%dT%H:%M" if d.second == 0 else "%Y-%m-%dT%H:%M:%S")


def rate_card_lines(rep: dict[str, Any]) -> list[str]:
    """The footer's rate card: each price the bill used, its amount and validity."""
    card = rep.get("rate_card") or []
    if not card:
        return ["Rate card: no prices in force in the period (nothing is charged)"]
    lines = ["Rate card (per unit-hour, mem per GiB-hour; until = exclusive; applied = the part of "
             "the period it priced):"]
    rows = [[p["tres"], f"{p['per_hour']} {p['currency']}", "valid from " + fmt_day(p["valid_from"]),
             "until " + fmt_day(p["valid_to"]) if p.get("valid_to") is not None else "open-ended",
             f"applied {fmt_day(p['applied_from'])} - {fmt_day(p['applied_to'])}" if "applied_from" in p else ""]
            for p in card]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if any(p["tres"] == "gres/gpu" for p in card):
        lines.append("  A GPU type or MIG profile without a price of its own: the gres/gpu price times "
                     "its share of a card.")
    return lines


def footer(rep: dict[str, Any]) -> list[str]:
    cur = rep.get("currency") or ""
    p = rep["period"]
    tz = p.get("tz") or "UTC"
    lines = [f"Period: {fmt_time(p['start'], tz)} - {fmt_time(p['end'], tz)} {tz}"
             + (f" (counted up to {fmt_time(p['upto'], tz)})" if p.get("upto", p["end"]) < p["end"] else "")]
    spread = bool(rep["rows"]) and "idle_cost" in rep["rows"][0]
    if rep.get("idle_gpu_hours") is None:  # a non-admin's report: idle depends on other accounts
        lines.append(f"Capacity: {rep.get('capacity_gpu_hours', 0):,.2f} GPU-hours (idle capacity: "
                     "administrators only)")
    else:
        lines.append(f"Idle capacity: {rep['idle_gpu_hours']:,.2f} of {rep.get('capacity_gpu_hours', 0):,.2f} "
                     f"GPU-hours ({rep['idle_cost']} {cur}), "
                     + ("spread over accounts by quota" if spread else "unallocated"))
    if rep.get("down_gpu_hours"):
        lines.append(f"Down or drained: {rep['down_gpu_hours']:,.2f} GPU-hours ({rep.get('down_cost', '0.00')} "
                     f"{cur} at GPU prices), not counted as idle")
    for b in rep.get("budgets") or []:
        unit = "GPU-hours" if b["tres"].startswith("gres/gpu") else f"{b['tres']}-hours"
        lines.append(f"Budget {b['account']} {b['tres']}: {b['used_minutes'] / 60:,.1f} of "
                     f"{b['limit_minutes'] / 60:,.1f} {unit} used this {b['period']}"
                     + (" (used up: new jobs pend AssocGrpGRESMinutes)" if b["exhausted"] else
                        f" ({b['used_pct']}%)" if b["used_pct"] is not None else ""))
    if rep.get("running_included"):
        lines.append(f"Includes {rep['running_included']} running job(s) or runs not yet rolled up, to now")
    if rep["reconciled"]:
        lines.append(f"Reconciled: sum over rows {rep['totals']['cost']} {cur} = sum over jobs "
                     f"{rep['jobs_cost']} {cur}")
    else:
        lines.append(f"NOT RECONCILED: sum over rows {rep['totals']['cost']} {cur} != sum over jobs "
                     f"{rep['jobs_cost']} {cur}")
    for f in rep.get("flags", []):
        lines.append(f"Flag: job {f['job_id']} run {f['run']} ({f['account']}/{f['user']}) held GPUs at 0% "
                     f"for {f['gpu_zero_max_s'] / 3600:.1f} h")
    if "rate_card" in rep:
        lines += rate_card_lines(rep)
    return lines


def render_table(rep: dict[str, Any]) -> str:
    """The aligned table: text columns left-aligned, numbers right-aligned, a TOTAL line
    and the footer (period, idle capacity, reconciliation, flags)."""
    cols = columns(rep)
    ngroup = len(rep["group_by"])
    body = [[str(_cell(r, k) or "") if i < ngroup else fmt_cell(k, _cell(r, k)) for i, (k, _) in enumerate(cols)]
            for r in rep["rows"]]
    tot = _total_row(rep)
    total = ["TOTAL" if i == 0 else "" for i in range(ngroup)]
    total += [fmt_cell(k, _cell(tot, k)) if k in tot or k.startswith("gpuh:") else "" for k, _ in cols[ngroup:]]
    head = [h for _, h in cols]
    widths = [max(len(x) for x in col) for col in zip(head, *body, total, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < ngroup else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [line(b) for b in body]
    out += ["  ".join("-" * w for w in widths), line(total), ""]
    out += footer(rep)
    return "\n".join(out) + "\n"


def render_csv(rep: dict[str, Any]) -> str:
    """CSV: a header of column names, one line per row, a TOTAL line. Numbers unformatted
    (hours as decimals, money with two places, percentages as numbers under a header
    ending in "(%)"). Every line, TOTAL included, ends with the columns period_start,
    period_end (exclusive), counted_up_to (ISO 8601, UTC) and currency. Then, after one
    empty line, the rate card: a header tres,per_hour,currency,valid_from,valid_to,
    applied_from,applied_to (valid_to exclusive, empty = open-ended; applied_* = the part
    of the period it was used for) and one line per price."""
    cols = columns(rep)
    p = rep["period"]
    tail = [_iso(p["start"]), _iso(p["end"]), _iso(p.get("upto", p["end"])), rep.get("currency") or ""]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([f"{h} (%)" if k in PERCENT else h for k, h in cols] + list(CSV_PERIOD_COLS))
    for r in rep["rows"]:
        w.writerow(["" if _cell(r, k) is None else _cell(r, k) for k, _ in cols] + tail)
    tot = _total_row(rep)
    ngroup = len(rep["group_by"])
    w.writerow(["TOTAL" if i == 0 else "" for i in range(ngroup)]
               + ["" if _cell(tot, k) is None else _cell(tot, k) for k, _ in cols[ngroup:]] + tail)
    if "rate_card" in rep:
        w.writerow([])
        w.writerow(RATE_CARD_COLS)
        for price in rep["rate_card"]:
            w.writerow([price["tres"], price["per_hour"], price["currency"]]
                       + ["" if price.get(k) is None else _iso(price[k]) for k in RATE_CARD_COLS[3:]])
    return buf.getvalue()


CSV_PERIOD_COLS = ("period_start", "period_end", "counted_up_to", "currency")
RATE_CARD_COLS = ("tres", "per_hour", "currency", "valid_from", "valid_to", "applied_from", "applied_to")


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
