"""Time zones of reports: month and day boundaries in a named IANA zone (zoneinfo).

The hourly rollup counts UTC hours, so a boundary is cut exactly where the zone's offset
is a whole number of hours; in a zone with a half- or quarter-hour offset
(Asia/Kolkata, +05:30) the report rounds each boundary down to the UTC hour, as it does
with any --start/--end, so a month there starts and ends 30 (45) minutes early and
consecutive months still neither overlap nor leave a gap.
"""

from __future__ import annotations

import datetime as _dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class UnknownZone(ValueError):
    """A zone name zoneinfo does not know."""


def zone_of(name: str | None) -> _dt.tzinfo:
    """The zone of an IANA name ("UTC" or empty: UTC); UnknownZone when there is none."""
    if not name or name.upper() == "UTC":
        return _dt.UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UnknownZone(f"unknown time zone {name!r} (an IANA name such as Europe/Berlin)") from None


def month_bounds_in(year: int, month: int, zone: _dt.tzinfo) -> tuple[int, int]:
    """[first day 00:00, next month's first day 00:00) local time of `zone`, unix seconds."""
    first = _dt.datetime(year, month, 1, tzinfo=zone)
    nxt = _dt.datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=zone)
    return int(first.timestamp()), int(nxt.timestamp())


def parse_time_in(text: str, zone: _dt.tzinfo) -> int:
    """YYYY-MM-DD or YYYY-MM-DDTHH[:MM[:SS]] (local time of `zone` unless it carries an
    offset), or unix seconds -> unix seconds. ValueError when it is neither."""
    t = text.strip()
    if t.isdigit() and len(t) > 8:
        return int(t)
    try:
        return int(float(t)) if t.replace(".", "", 1).isdigit() else _iso(t, zone)
    except ValueError:
        raise ValueError(f"{text!r} is not a date (YYYY-MM-DD[THH:MM]) or unix seconds") from None


def _iso(t: str, zone: _dt.tzinfo) -> int:
    d = _dt.datetime.fromisoformat(t)
    return int(d.replace(tzinfo=d.tzinfo or zone).timestamp())
