"""The bill's times in words, for the HTML page: the period ("December 2026, month to
date as of 1 December 18:52 UTC", "November 2026", "1–15 December 2026"), moments and
the days of the period. Times are shown in the report's zone, `period.tz` (an IANA
name), UTC when the report names none or one this machine does not know. Standard
library only."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC_NAMES = ("UTC", "Etc/UTC", "Z", "GMT")


def zone(rep: dict[str, Any]) -> tuple[_dt.tzinfo, str]:
    """(tzinfo, label) of the report's zone: `period.tz`, else UTC."""
    name = (rep.get("period") or {}).get("tz") or "UTC"
    if name in UTC_NAMES:
        return _dt.UTC, "UTC"
    try:
        return ZoneInfo(str(name)), str(name)
    except (ZoneInfoNotFoundError, ValueError):
        return _dt.UTC, "UTC"


def local(ts: float, tz: _dt.tzinfo) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ts, tz)


def day_month(d: _dt.date) -> str:
    """1 December (English month names, whatever the locale)."""
    return f"{d.day} {MONTHS[d.month - 1]}"


def moment(ts: float, tz: _dt.tzinfo, label: str, year: bool = False) -> str:
    """`1 December 18:52 UTC`; with `year`, `1 December 2026, 18:52 UTC`."""
    d = local(ts, tz)
    return f"{day_month(d)}{' ' + str(d.year) if year else ''}{',' if year else ''} {d:%H:%M} {label}"


def _midnight(d: _dt.datetime) -> bool:
    return (d.hour, d.minute, d.second, d.microsecond) == (0, 0, 0, 0)


def _next_month(d: _dt.datetime) -> _dt.datetime:
    return d.replace(year=d.year + (d.month == 12), month=d.month % 12 + 1)


def span_words(s: _dt.datetime, e: _dt.datetime, label: str) -> str:
    """[s, e) in words: whole days as `1–15 December 2026` (the last day inclusive),
    anything else with times."""
    if _midnight(s) and _midnight(e):
        a, z = s.date(), e.date() - _dt.timedelta(days=1)
        if a >= z:
            return f"{day_month(a)} {a.year}"
        if (a.year, a.month) == (z.year, z.month):
            return f"{a.day}–{z.day} {MONTHS[a.month - 1]} {a.year}"
        if a.year == z.year:
            return f"{day_month(a)} – {day_month(z)} {a.year}"
        return f"{day_month(a)} {a.year} – {day_month(z)} {z.year}"
    if s.date() == e.date() or (_midnight(e) and e - s <= _dt.timedelta(days=1)):
        return f"{day_month(s)} {s.year}, {s:%H:%M}–{'24:00' if _midnight(e) else f'{e:%H:%M}'} {label}"
    return f"{day_month(s)} {s.year} {s:%H:%M} – {day_month(e)} {e.year} {e:%H:%M} {label}"


def month_of(rep: dict[str, Any]) -> tuple[_dt.datetime, _dt.datetime, bool] | None:
    """(first day, first day of the next month, complete) when the period is a calendar
    month: the whole month, or its start up to now (`--end now`: an end before the
    month's end, equal to `upto` and not on a whole hour); else None."""
    tz, _ = zone(rep)
    p = rep["period"]
    s, e = local(p["start"], tz), local(p["end"], tz)
    u = local(p.get("upto", p["end"]), tz)
    first = s.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if s != first:
        return None
    nxt = _next_month(first)
    if e == nxt:
        return first, nxt, u >= e
    if e == u and e < nxt and (e.minute, e.second) != (0, 0):
        return first, nxt, False
    return None


def period_words(rep: dict[str, Any]) -> str:
    """The period as a reader says it. A calendar month is `November 2026`; one still
    running, or asked up to now, is `December 2026, month to date as of 1 December 18:52
    UTC` (see `month_of`); any other period is `span_words`, with `, counted up to ...`
    when it reaches past `upto`."""
    tz, label = zone(rep)
    p = rep["period"]
    upto = p.get("upto", p["end"])
    month = month_of(rep)
    if month:
        words = f"{MONTHS[month[0].month - 1]} {month[0].year}"
        return words if month[2] else f"{words}, month to date as of {moment(upto, tz, label)}"
    s, e = local(p["start"], tz), local(p["end"], tz)
    words = span_words(s, e, label)
    if upto < p["end"]:
        words += f", counted up to {moment(upto, tz, label)}"
    return words


@dataclass(frozen=True)
class Day:
    """One calendar day of the period in the report's zone: `start`/`end` unix seconds
    (clipped to the period), `counted` the share of it counted so far (0 to 1: the
    days after `upto` are 0, the day that holds it a fraction)."""

    date: _dt.date
    start: float
    end: float
    counted: float

    @property
    def key(self) -> str:
        return self.date.isoformat()


def days_of(rep: dict[str, Any]) -> list[Day]:
    """Every day of [period.start, period.end), in order; a partial first or last day
    is one of them. A month counted up to now (`month_of`) has all its days: those
    after now are not counted yet."""
    tz, _ = zone(rep)
    p = rep["period"]
    start, end = float(p["start"]), float(p["end"])
    upto = float(p.get("upto", end))
    month = month_of(rep)
    if month:
        end = month[1].timestamp()
    out: list[Day] = []
    d = local(start, tz).date()
    while True:
        a = _dt.datetime(d.year, d.month, d.day, tzinfo=tz).timestamp()
        nd = d + _dt.timedelta(days=1)
        b = _dt.datetime(nd.year, nd.month, nd.day, tzinfo=tz).timestamp()
        a, b = max(a, start), min(b, end)
        if a >= end:
            break
        counted = 1.0 if upto >= b else 0.0 if upto <= a else (upto - a) / (b - a)
        out.append(Day(d, a, b, counted))
        d = nd
    return out


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
