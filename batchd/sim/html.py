"""`batchd simulate --html -o FILE`: one self-contained page (inline CSS and SVG, no
script, nothing loaded from anywhere): the settings, each policy's table of measures, the
side-by-side table, and per policy two charts: GPUs allocated per team over time (stacked)
and the distribution of queue waits per team (the share of jobs that waited at most x,
on a log scale of x)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from batchd.accounting.htmlcharts import FONT, colors, fmt_tick, nice_ticks

W, H, PAD_L, PAD_B, PAD_T, PAD_R = 900, 260, 56, 34, 12, 12

CSS = """body{font-family:system-ui,"DejaVu Sans",sans-serif;margin:24px auto;max-width:1000px;padding:0 16px;color:#222;
font-size:14px;line-height:1.4}h1{font-size:24px;margin:0 0 6px}h2{font-size:19px;margin:26px 0 8px;
border-bottom:1px solid #ccc}h3{font-size:15px;margin:14px 0 4px}table{border-collapse:collapse;font-size:13px;
margin:4px 0 10px}th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
th{background:#f3f3f3}td:first-child,th:first-child,td.l{text-align:left}.small{font-size:12px;color:#444}
svg{width:100%;height:auto;display:block}.legend span{display:inline-block;margin-right:14px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.wide{overflow-x:auto}@media print{.wide{overflow:visible}}"""


def _dur(v: float | None) -> str:
    if v is None:
        return "–"
    if v == 0:
        return "0"
    if v < 120:
        return f"{v:.0f} s"
    if v < 7200:
        return f"{v / 60:.1f} min"
    if v < 172800:
        return f"{v / 3600:.1f} h"
    return f"{v / 86400:.1f} d"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _legend(teams: list[str], palette: dict[str, str]) -> str:
    return '<p class="legend">' + "".join(f'<span><i style="background:{palette[t]}"></i>{escape(t)}</span>'
                                          for t in teams) + "</p>"


def utilisation_svg(series: list[dict[str, Any]], teams: list[str], palette: dict[str, str], capacity: float,
                    title: str) -> str:
    """Stacked areas of the GPUs each team held, over the run (hours on the x axis)."""
    if not series:
        return ""
    t0, t1 = series[0]["t"], series[-1]["t"]
    span = max(t1 - t0, 1e-9)
    ticks = nice_ticks(capacity)
    top = ticks[-1] if ticks else capacity or 1.0
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(t: float) -> float:
        return PAD_L + (t - t0) / span * iw

    def y(v: float) -> float:
        return PAD_T + ih - v / top * ih

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" {FONT} role="img" '
           f'aria-label="{escape(title)}">']
    for v in ticks:
        out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                   f'<text x="{PAD_L - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">'
                   f'{fmt_tick(v, ticks)}</text>')
    out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(capacity):.1f}" y2="{y(capacity):.1f}" '
               f'stroke="#333" stroke-dasharray="4 3"/><text x="{W - PAD_R}" y="{y(capacity) - 4:.1f}" '
               f'font-size="11" text-anchor="end">{capacity:g} GPUs</text>')
    base = [0.0] * len(series)
    for team in teams:
        upper = [b + float(s.get(team, 0.0)) for b, s in zip(base, series, strict=True)]
        pts = [f"{x(s['t']):.1f},{y(u):.1f}" for s, u in zip(series, upper, strict=True)]
        pts += [f"{x(s['t']):.1f},{y(b):.1f}" for s, b in reversed(list(zip(series, base, strict=True)))]
        out.append(f'<polygon points="{" ".join(pts)}" fill="{palette[team]}" fill-opacity="0.85">'
                   f'<title>{escape(team)}</title></polygon>')
        base = upper
    for k in range(6):
        tv = t0 + span * k / 5
        out.append(f'<text x="{x(tv):.1f}" y="{H - PAD_B + 16}" font-size="11" text-anchor="middle">'
                   f'{escape(_dur(span * k / 5))}</text>')
    out.append(f'<text x="{PAD_L}" y="{H - 4}" font-size="11">time from the first submission; GPUs held</text>')
    out.append("</svg>")
    return "".join(out)


def waits_svg(waits: dict[str, list[float]], teams: list[str], palette: dict[str, str], title: str) -> str:
    """The share of each team's jobs that waited at most x (x from 1 s, log scale); a wait of
    0 counts at the left edge."""
    longest = max((max(v) for v in waits.values() if v), default=0.0)
    hi = max(1.0, math.ceil(math.log10(max(longest, 10.0))))
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def x(v: float) -> float:
        return PAD_L + min(1.0, math.log10(max(v, 1.0)) / hi) * iw

    def y(share: float) -> float:
        return PAD_T + ih - share * ih

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" {FONT} role="img" '
           f'aria-label="{escape(title)}">']
    for s in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y(s):.1f}" y2="{y(s):.1f}" stroke="#ddd"/>'
                   f'<text x="{PAD_L - 6}" y="{y(s) + 4:.1f}" font-size="11" text-anchor="end">{int(s * 100)}%</text>')
    for k in range(int(hi) + 1):
        v = 10 ** k
        out.append(f'<text x="{x(v):.1f}" y="{H - PAD_B + 16}" font-size="11" text-anchor="middle">'
                   f'{escape(_dur(v))}</text>')
    for team in teams:
        vals = sorted(waits.get(team) or [])
        if not vals:
            continue
        pts = [f"{x(1.0):.1f},{y(0):.1f}"]
        n = len(vals)
        for i, v in enumerate(vals):
            pts.append(f"{x(v):.1f},{y(i / n):.1f}")
            pts.append(f"{x(v):.1f},{y((i + 1) / n):.1f}")
        pts.append(f"{x(10 ** hi):.1f},{y(1.0):.1f}")
        out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{palette[team]}" stroke-width="2">'
                   f'<title>{escape(team)}</title></polyline>')
    out.append(f'<text x="{PAD_L}" y="{H - 4}" font-size="11">queue wait (log scale); share of the team\'s jobs '
               f'that waited at most that long</text></svg>')
    return "".join(out)


def _team_table(m: dict[str, Any]) -> str:
    head = ["Team", "Jobs", "Wait p50", "p90", "p99", "Completion p50", "GPU-h", "Borrowed GPU-h", "Lent GPU-h",
            "Preemptions", "Lost GPU-h", "Reclaim p50", "Quota served"]
    rows = []
    for t, r in m["teams"].items():
        cells = [escape(t), str(r["jobs"]), _dur(r["wait_s"]["median"]), _dur(r["wait_s"]["p90"]),
                 _dur(r["wait_s"]["p99"]), _dur(r["completion_s"]["median"]), f"{r['gpu_hours']:.1f}",
                 f"{r['borrowed_gpu_hours']:.1f}", f"{r['lent_gpu_hours']:.1f}", str(r["preemptions"]),
                 f"{r['lost_gpu_hours']:.1f}", _dur(r["reclaim_latency_s"]["median"]), _pct(r["quota_served"])]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    c = m["cluster"]
    return ('<div class="wide"><table><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>"
            + f'<p class="small">Cluster: utilisation {_pct(c["utilisation"])}, wait p50 {_dur(c["wait_s"]["median"])}'
              f', p90 {_dur(c["wait_s"]["p90"])}; {c["preemptions"]} preemptions, {c["lost_gpu_hours"]:.1f} GPU-h '
              f'lost; Jain\'s index {c["jain_index"]}; {c["cycles"]} scheduling cycles.</p>')


def render_html(results: dict[str, dict[str, Any]], extras: dict[str, dict[str, Any]], header: str) -> str:
    """`results`: policy -> measures (batchd.sim.measures); `extras`: policy -> {"series",
    "waits", "capacity"} for the charts."""
    teams = sorted({t for m in results.values() for t in m["teams"]})
    palette = colors(teams)
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
             f"content=\"width=device-width, initial-scale=1\"><title>batchd simulate</title><style>{CSS}</style>"
             f"</head><body><h1>batchd simulate</h1><p class=\"small\">{escape(header)}</p>"]
    if len(results) > 1:
        head = ["Policy", "Team", "Wait p50", "Wait p90", "GPU-h", "Preemptions", "Lost GPU-h", "Quota served",
                "Utilisation", "Jain"]
        rows = []
        for n, m in results.items():
            for t, r in m["teams"].items():
                cells = [escape(n), escape(t), _dur(r["wait_s"]["median"]), _dur(r["wait_s"]["p90"]),
                         f"{r['gpu_hours']:.1f}", str(r["preemptions"]), f"{r['lost_gpu_hours']:.1f}",
                         _pct(r["quota_served"]), _pct(m["cluster"]["utilisation"]), str(m["cluster"]["jain_index"])]
                rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        parts.append("<h2>Side by side</h2><table id=\"compare\"><thead><tr>"
                     + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>" + "".join(rows)
                     + "</tbody></table>")
    for n, m in results.items():
        ex = extras.get(n) or {}
        parts.append(f'<h2 id="policy-{escape(n)}">Policy {escape(n)}</h2><p class="small">'
                     f'{escape(m["policy"]["settings"])}</p>{_team_table(m)}')
        parts.append(f"<h3>GPUs held per team</h3>{_legend(teams, palette)}"
                     + utilisation_svg(ex.get("series") or [], teams, palette, float(ex.get("capacity") or 0),
                                       f"GPUs held per team, policy {n}"))
        parts.append(f"<h3>Queue waits</h3>{_legend(teams, palette)}"
                     + waits_svg(ex.get("waits") or {}, teams, palette, f"queue waits, policy {n}"))
    parts.append("</body></html>\n")
    return "".join(parts)
