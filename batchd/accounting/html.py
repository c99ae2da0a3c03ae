"""`batchd report --html`: one self-contained page (inline CSS and SVG, no script, no
network): a stacked bar chart of GPU-hours per account per day, a quota-vs-use chart
and the table with its footer. Standard library only.

Chart elements carry ids and classes that tests look for: `svg#daily` with one
`rect.bar` per (day, account) with use, `svg#quota` with `rect.use` and `rect.quota`.
"""

from __future__ import annotations

from html import escape
from typing import Any

from batchd.accounting.render import _cell, _total_row, columns, fmt_cell, fmt_time, footer

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c"]


def _daily_svg(daily: dict[str, dict[str, float]], accounts: list[str]) -> str:
    days = sorted(daily)
    w, h, left, bottom, top = 900, 320, 60, 40, 20
    if not days:
        return '<svg id="daily" width="900" height="60"><text x="10" y="30">no GPU use in the period</text></svg>'
    peak = max(sum(daily[d].values()) for d in days) or 1.0
    step = (w - left - 10) / len(days)
    bw = max(step * 0.8, 1.0)
    scale = (h - top - bottom) / peak
    parts = [f'<svg id="daily" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="GPU-hours per account per day">',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - 5}" y2="{h - bottom}" stroke="#333"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#333"/>',
             f'<text x="{left - 5}" y="{top + 4}" text-anchor="end" font-size="11">{peak:,.0f}</text>',
             f'<text x="{left - 5}" y="{h - bottom}" text-anchor="end" font-size="11">0</text>']
    for i, d in enumerate(days):
        x = left + i * step + (step - bw) / 2
        y = float(h - bottom)
        for a in accounts:
            v = daily[d].get(a, 0.0)
            if v <= 0:
                continue
            bh = v * scale
            y -= bh
            color = PALETTE[accounts.index(a) % len(PALETTE)]
            parts.append(f'<rect class="bar" x="{x:.2f}" y="{y:.2f}" width="{bw:.2f}" height="{bh:.2f}" '
                         f'fill="{color}"><title>{escape(d)} {escape(a)}: {v:,.2f} GPU-h</title></rect>')
        if len(days) <= 31 or i % max(1, len(days) // 15) == 0:
            parts.append(f'<text x="{x + bw / 2:.2f}" y="{h - bottom + 14}" text-anchor="middle" '
                         f'font-size="9">{escape(d[5:])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _quota_svg(rows: list[dict[str, Any]]) -> str:
    rows = [r for r in rows if "account" in r]
    w, bar, gap, left = 900, 14, 12, 140
    h = max(60, len(rows) * (2 * bar + gap) + 30)
    peak = max([r.get("gpu_hours") or 0 for r in rows] + [r.get("quota_gpu_hours") or 0 for r in rows] + [1.0])
    scale = (w - left - 210) / peak
    parts = [f'<svg id="quota" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="quota versus use, GPU-hours">']
    for i, r in enumerate(rows):
        y = 10 + i * (2 * bar + gap)
        used, quota = r.get("gpu_hours") or 0.0, r.get("quota_gpu_hours")
        parts.append(f'<text x="{left - 8}" y="{y + bar + 4}" text-anchor="end" font-size="12">'
                     f'{escape(str(r["account"]) + (" " + str(r["gpu_type"]) if r.get("gpu_type") else ""))}</text>')
        if quota is not None:
            parts.append(f'<rect class="quota" x="{left}" y="{y}" width="{max(quota * scale, 1):.2f}" '
                         f'height="{bar}" fill="#bab0ac"><title>quota {quota:,.2f} GPU-h</title></rect>')
        parts.append(f'<rect class="use" x="{left}" y="{y + bar}" width="{max(used * scale, 1):.2f}" '
                     f'height="{bar}" fill="#4e79a7"><title>used {used:,.2f} GPU-h</title></rect>')
        label = f"{used:,.1f} / {quota:,.1f} GPU-h" if quota is not None else f"{used:,.1f} GPU-h (no quota)"
        parts.append(f'<text x="{left + max(used, quota or 0) * scale + 6:.2f}" y="{y + bar + 4}" '
                     f'font-size="11">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(rep: dict[str, Any]) -> str:
    cols = columns(rep)
    ngroup = len(rep["group_by"])
    out = ["<table><thead><tr>" + "".join(f"<th>{escape(h)}</th>" for _, h in cols) + "</tr></thead><tbody>"]
    for r in rep["rows"]:
        cells = [f"<td>{escape(str(_cell(r, k) or ''))}</td>" if i < ngroup else
                 f'<td class="n">{escape(fmt_cell(k, _cell(r, k)))}</td>' for i, (k, _) in enumerate(cols)]
        out.append("<tr>" + "".join(cells) + "</tr>")
    tot = _total_row(rep)
    cells = ["<td>TOTAL</td>" if i == 0 else "<td></td>" for i in range(ngroup)]
    cells += [f'<td class="n">{escape(fmt_cell(k, _cell(tot, k)))}</td>' for k, _ in cols[ngroup:]]
    out.append('</tbody><tfoot><tr class="total">' + "".join(cells) + "</tr></tfoot></table>")
    return "".join(out)


def render_html(rep: dict[str, Any], title: str = "GPU cluster bill") -> str:
    """The page, as one string (UTF-8 text)."""
    p = rep["period"]
    accounts = sorted({a for day in rep.get("daily", {}).values() for a in day})
    legend = "".join(f'<span class="key"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{escape(a)}</span>'
                     for i, a in enumerate(accounts))
    quota = ("<h2>Quota and use (GPU-hours)</h2>" + _quota_svg(rep["rows"])
             if rep["rows"] and "quota_gpu_hours" in rep["rows"][0] else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:24px;color:#222}}
table{{border-collapse:collapse;font-size:13px}}th,td{{padding:3px 8px;border-bottom:1px solid #ddd}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}}tr.total td{{font-weight:bold;border-top:2px solid #333}}
.key{{margin-right:14px;font-size:12px}}.key i{{display:inline-block;width:10px;height:10px;margin-right:4px}}
.ok{{color:#2a7}}.bad{{color:#c22;font-weight:bold}}
</style></head><body>
<h1>{escape(title)}</h1>
<p>{escape(fmt_time(p["start"]))} – {escape(fmt_time(p["end"]))} UTC · currency {escape(rep.get("currency") or "-")}</p>
<h2>GPU-hours per account per day</h2>
<div>{legend}</div>
{_daily_svg(rep.get("daily", {}), accounts)}
{quota}
<h2>Bill</h2>
{_table(rep)}
<ul>{"".join(f'<li class="{"ok" if rep["reconciled"] else "bad"}">{escape(x)}</li>' if x.startswith(("Reconciled", "NOT")) else f"<li>{escape(x)}</li>" for x in footer(rep))}</ul>
</body></html>
"""
