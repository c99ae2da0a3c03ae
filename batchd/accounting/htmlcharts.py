"""The HTML bill's charts, inline SVG (no script: every value a reader needs is printed,
not only in a hover title). Standard library only.

Elements tests look for: `svg#daily` with `text.day` (one per day of the period, its
day of the month), `text.ytick` (the y-axis ticks, GPU-hours), `line.grid`, one
`rect.bar` per (day, account) with use, `text.daytotal` per counted day and
`rect.notyet` over the part of the period not counted yet; `svg#quota` with, per
account, `rect.quota` (the whole period's quota), `rect.elapsed` (its part to date),
`rect.use` and `rect.borrowed`.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from batchd.accounting.billtime import MONTHS, Day

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#1f77b4", "#2ca02c", "#8c564b"]
QUOTA_FILL, ELAPSED_FILL = "#e8e6e3", "#bab0ac"
FONT = 'font-family="system-ui,sans-serif"'


def colors(accounts: list[str]) -> dict[str, str]:
    """One colour per account, by the accounts' sorted order."""
    return {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(sorted(accounts))}


def nice_ticks(peak: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at least `peak`: steps of 1, 2, 2.5 or 5 times a power
    of ten, about `n` of them."""
    if peak <= 0:
        return [0.0, 1.0]
    raw = peak / n
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    count = math.ceil(peak / step - 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def fmt_tick(v: float, ticks: list[float]) -> str:
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    places = next((d for d in range(4) if abs(round(step, d) - step) < 1e-9), 4)
    return f"{v:,.{places}f}"


def fmt_short(v: float, peak: float) -> str:
    """A value on a bar (the table below has it exactly): whole GPU-hours where the
    largest is 10 or more, else one place; one format for all bars of a chart."""
    if v <= 0:
        return "0"
    return f"{v:.0f}" if peak >= 10 else f"{v:.1f}"


def _hatch(pid: str, color: str) -> str:
    return (f'<pattern id="{pid}" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{color}" stroke-width="2.5"/></pattern>')


DAILY_PLOT_W = 800 - 62 - 10  # daily_svg's plot area


def totals_on_bars(ndays: int) -> bool:
    """Whether daily_svg prints each day's total above its bar (room for 3 digits)."""
    return DAILY_PLOT_W / max(ndays, 1) >= 18


def _day_labelled(ndays: int, day: int) -> bool:
    """Which days the x-axis numbers: every day up to a month, the 1st, 8th, 15th and
    22nd up to three months, none beyond (the months are named)."""
    return ndays <= 31 or (ndays <= 93 and day in (1, 8, 15, 22))


def daily_svg(days: list[Day], daily: dict[str, dict[str, float]], accounts: list[str],
              palette: dict[str, str], notyet_label: str) -> str:
    """The stacked daily chart: a bar per day of the period, one segment per account (in
    `accounts` order, bottom up), y-axis in GPU-hours with round ticks and grid lines,
    the day's total above each counted day, and the part of the period after `upto`
    hatched and labelled `notyet_label`."""
    # 800 wide: on A4 (about 700 px between the margins) a 12 px label prints at 8 pt
    w, h, left, right, top, bottom = 800, 340, 62, 10, 30, 52
    pw, ph = w - left - right, h - top - bottom
    n = max(len(days), 1)
    step = pw / n
    bw = max(step * 0.72, 1.0)
    totals = [sum(daily.get(d.key, {}).values()) for d in days]
    ticks = nice_ticks(max(totals, default=0.0))
    scale = ph / ticks[-1]
    base = top + ph
    out = [f'<svg id="daily" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" {FONT} role="img" '
           f'aria-label="GPU-hours per account per day">',
           f'<defs>{_hatch("notyet-hatch", "#d0d0d0")}</defs>',
           f'<text x="16" y="{top + ph / 2:.1f}" transform="rotate(-90 16 {top + ph / 2:.1f})" '
           f'text-anchor="middle" font-size="13">GPU-hours per day</text>']
    for t in ticks:
        y = base - t * scale
        out.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{w - right}" y2="{y:.1f}" '
                   f'stroke="{"#555" if t == 0 else "#dcdcdc"}" stroke-width="1"/>')
        out.append(f'<text class="ytick" x="{left - 7}" y="{y + 4:.1f}" text-anchor="end" '
                   f'font-size="12">{fmt_tick(t, ticks)}</text>')
    # the part of the period not counted yet: from `upto` to the end
    cut = next((i + d.counted for i, d in enumerate(days) if d.counted < 1), None)
    if cut is not None:
        x0 = left + cut * step
        out.append(f'<rect class="notyet" x="{x0:.1f}" y="{top}" width="{left + pw - x0:.1f}" height="{ph}" '
                   f'fill="url(#notyet-hatch)" opacity="0.8"/>')
        out.append(f'<line x1="{x0:.1f}" y1="{top - 6}" x2="{x0:.1f}" y2="{base}" stroke="#777" '
                   f'stroke-dasharray="4 3"/>')
        anchor, tx = ("start", x0 + 5) if left + pw - x0 > 230 else ("end", x0 - 5)
        out.append(f'<text x="{tx:.1f}" y="{top - 10}" text-anchor="{anchor}" font-size="12" '
                   f'fill="#444">{escape(notyet_label)}</text>')
    for i, (d, total) in enumerate(zip(days, totals, strict=True)):
        x = left + i * step + (step - bw) / 2
        y = float(base)
        for a in accounts:
            v = daily.get(d.key, {}).get(a, 0.0)
            if v <= 0:
                continue
            bh = v * scale
            y -= bh
            out.append(f'<rect class="bar" x="{x:.2f}" y="{y:.2f}" width="{bw:.2f}" height="{bh:.2f}" '
                       f'fill="{palette[a]}"><title>{escape(d.key)} {escape(a)}: {v:,.2f} GPU-h</title></rect>')
        if d.counted > 0 and totals_on_bars(n):
            out.append(f'<text class="daytotal" x="{x + bw / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle" '
                       f'font-size="{10 if step < 26 else 11}" fill="{"#222" if total else "#999"}" '
                       f'stroke="#fff" stroke-width="3" paint-order="stroke">{fmt_short(total, max(totals))}</text>')
        if _day_labelled(n, d.date.day):
            fill = "#a33" if d.date.weekday() >= 5 else "#222"
            out.append(f'<text class="day" x="{x + bw / 2:.1f}" y="{base + 16}" text-anchor="middle" '
                       f'font-size="12" fill="{fill}">{d.date.day}</text>')
    last_end = -1e9
    for i, d in enumerate(days):
        if i and d.date.day != 1:
            continue
        x = left + i * step
        name = MONTHS[d.date.month - 1]
        if n > 62:
            name = name[:3]
        if n <= 62 or i == 0 or d.date.month == 1:
            name += f" {d.date.year}"
        if x < last_end:  # no room (a period starting at a month's end): the next month's name
            continue
        out.append(f'<text class="month" x="{x:.1f}" y="{base + (36 if n <= 93 else 18)}" font-size="12" '
                   f'fill="#444">{name}</text>')
        last_end = x + 7.5 * len(name) + 10
    out.append("</svg>")
    return "".join(out)


def legend_svg(accounts: list[str], palette: dict[str, str]) -> str:
    """The accounts' colours, as SVG so that they print without background graphics."""
    items, x = [], 0
    for a in accounts:
        items.append(f'<rect x="{x}" y="3" width="12" height="12" fill="{palette[a]}"/>'
                     f'<text x="{x + 17}" y="14" font-size="13">{escape(a)}</text>')
        x += 17 + 8 * len(a) + 22
    return (f'<svg class="legend" xmlns="http://www.w3.org/2000/svg" width="{max(x, 1)}" height="18" '
            f'viewBox="0 0 {max(x, 1)} 18" {FONT} role="img" aria-label="legend: colour of each account">'
            + "".join(items) + "</svg>")


def swatch(color: str) -> str:
    return (f'<svg class="swatch" width="11" height="11" viewBox="0 0 11 11" aria-hidden="true">'
            f'<rect width="11" height="11" fill="{color}"/></svg>')


def quota_svg(items: list[dict[str, Any]], palette: dict[str, str]) -> str:
    """Quota against use, one track per item (`label`, `account`, `used`, `whole`: the
    quota for the whole period or None, `to_date`: its part elapsed, `borrowed`): the
    whole period's quota light, its elapsed part darker and marked, the use as a bar in
    the account's colour with its borrowed part hatched."""
    w, left, right, track, gap, top = 800, 100, 270, 24, 14, 34
    h = top + len(items) * (track + gap) + 6
    peak = max([x["used"] for x in items] + [x["whole"] or 0.0 for x in items] + [1e-9])
    scale = (w - left - right) / peak
    out = [f'<svg id="quota" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" {FONT} role="img" '
           f'aria-label="quota versus use per account, GPU-hours">',
           f'<defs>{_hatch("borrow-hatch", "#333")}</defs>']
    key = [(QUOTA_FILL, "quota, whole period"), (ELAPSED_FILL, "quota to date"),
           ("#4e79a7", "used (account colour)"), ("url(#borrow-hatch)", "of which borrowed")]
    x = 10
    for fill, text in key:
        out.append(f'<rect x="{x}" y="6" width="14" height="12" fill="{fill}" stroke="#888" stroke-width="0.5"/>'
                   f'<text x="{x + 19}" y="16" font-size="12">{escape(text)}</text>')
        x += 19 + 7 * len(text) + 20
    for i, it in enumerate(items):
        y = top + i * (track + gap)
        whole, to_date, used = it["whole"], it["to_date"], it["used"]
        out.append(f'<text x="{left - 10}" y="{y + track / 2 + 5:.1f}" text-anchor="end" font-size="13">'
                   f'{escape(it["label"])}</text>')
        if whole is not None:
            out.append(f'<rect class="quota" x="{left}" y="{y}" width="{max(whole * scale, 1):.2f}" '
                       f'height="{track}" fill="{QUOTA_FILL}" stroke="#999" stroke-width="0.5">'
                       f'<title>quota for the whole period {whole:,.2f} GPU-h</title></rect>')
        if to_date is not None:
            xe = left + to_date * scale
            out.append(f'<rect class="elapsed" x="{left}" y="{y}" width="{max(to_date * scale, 1):.2f}" '
                       f'height="{track}" fill="{ELAPSED_FILL}"/>')
            out.append(f'<line x1="{xe:.2f}" y1="{y - 3}" x2="{xe:.2f}" y2="{y + track + 3}" stroke="#333" '
                       f'stroke-width="1.5" stroke-dasharray="3 2"/>')
        ub = max(used * scale, 1.0)
        out.append(f'<rect class="use" x="{left}" y="{y + 7}" width="{ub:.2f}" height="{track - 14}" '
                   f'fill="{palette.get(it["account"], PALETTE[0])}" stroke="#222" stroke-width="0.5"/>')
        if it["borrowed"] > 0:
            bb = min(it["borrowed"], used) * scale
            out.append(f'<rect class="borrowed" x="{left + ub - bb:.2f}" y="{y + 7}" width="{bb:.2f}" '
                       f'height="{track - 14}" fill="url(#borrow-hatch)" stroke="#222" stroke-width="0.5"/>')
        out.append(f'<text x="{w - right + 14}" y="{y + track / 2 + 5:.1f}" font-size="12">'
                   f'{escape(it["caption"])}</text>')
    out.append("</svg>")
    return "".join(out)
