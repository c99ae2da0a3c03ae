"""Chargeback prices: a price per TRES-hour with a validity period, in one currency.

Standard library and batchd.model only (the CLI imports it). Money is `decimal.Decimal`, never float.

A price applies to one TRES name (`gres/gpu:rtxpro6000`, a MIG profile such as
`gres/gpu:1g.24gb`, `gres/gpu` as the fallback for GPU types without their own price,
`cpu`, `mem`, or any other TRES): `per_hour` is the price of one unit for one hour;
for `mem` the unit is one GiB (usage records count MiB). Validity is
[valid_from, valid_to) in unix seconds, UTC, aligned to whole hours so that hourly
rollups split exactly at price changes. In the accounts file (`[[price]]`),
`valid_from` is a date (inclusive, from 00:00 UTC) or an hour-aligned datetime, and
`valid_to` a date (inclusive: the price applies through that day) or a datetime
(exclusive). Where periods of one TRES overlap, the price whose period starts latest
applies: a new price from the 1st of a month needs no edit of the old one and does
not change past months.
"""

from __future__ import annotations

import datetime as _dt
from bisect import bisect_right
from decimal import Decimal, InvalidOperation
from typing import Any

from batchd.model import DAY_S, HOUR_S, Price


class PriceError(ValueError):
    """A malformed price (message names the field)."""


def parse_when(value: Any, *, end: bool = False, field: str = "valid_from") -> float:
    """A date or datetime (TOML value or ISO text, UTC) -> unix seconds.

    A plain date means its midnight; with `end=True` a plain date is inclusive and
    means the next midnight. Datetimes must fall on a whole hour."""
    if isinstance(value, _dt.datetime):
        d = value if value.tzinfo else value.replace(tzinfo=_dt.UTC)
        ts = d.timestamp()
    elif isinstance(value, _dt.date):
        ts = _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.UTC).timestamp()
        if end:
            ts += DAY_S
    elif isinstance(value, str):
        text = value.strip()
        parsed: _dt.date
        try:
            if len(text) == 10:
                parsed = _dt.date.fromisoformat(text)
            else:
                parsed = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise PriceError(f"{field}: {value!r} is not a date (YYYY-MM-DD) or datetime") from None
        return parse_when(parsed, end=end, field=field)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        ts = float(value)
    else:
        raise PriceError(f"{field}: {value!r} is not a date")
    if ts % HOUR_S:
        raise PriceError(f"{field}: {value!r} is not on a whole hour (UTC)")
    return float(ts)


def parse_amount(value: Any, field: str = "per_hour") -> Decimal:
    """A decimal string (or int) -> Decimal >= 0. Floats are refused: they cannot
    hold money exactly."""
    if isinstance(value, bool) or isinstance(value, float):
        raise PriceError(f"{field}: give money as a decimal string, e.g. \"1.20\" (got {value!r})")
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        raise PriceError(f"{field}: {value!r} is not a decimal number") from None
    if not d.is_finite() or d < 0:
        raise PriceError(f"{field}: {value!r} must be a number >= 0")
    return d


def make_price(tres: str, per_hour: Any, currency: str, valid_from: Any, valid_to: Any = None) -> Price:
    """Check and build one price (see the module docstring for the field rules)."""
    name = str(tres or "").strip().lower()
    if not name or "=" in name or "," in name:
        raise PriceError(f"tres: {tres!r} is not a TRES name")
    cur = str(currency or "").strip().upper()
    if not cur.isalpha() or len(cur) > 8:
        raise PriceError(f"currency: {currency!r} is not a currency code")
    vf = parse_when(valid_from, field="valid_from")
    vt = None if valid_to in (None, "") else parse_when(valid_to, end=True, field="valid_to")
    if vt is not None and vt <= vf:
        raise PriceError(f"valid_to: {valid_to!r} is not after valid_from {valid_from!r}")
    return Price(name, parse_amount(per_hour), cur, vf, vt)


def parse_prices(toml_dict: dict[str, Any]) -> list[Price]:
    """The `[[price]]` tables of an accounts file (already read by tomllib) -> prices,
    in file order. Raises PriceError naming `price[i].field` on a bad entry and when
    the prices use more than one currency."""
    raw = toml_dict.get("price", [])
    if not isinstance(raw, list):
        raise PriceError("price: expected [[price]] tables")
    out: list[Price] = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise PriceError(f"price[{i}]: expected a table")
        unknown = set(t) - {"tres", "per_hour", "currency", "valid_from", "valid_to"}
        if unknown:
            raise PriceError(f"price[{i}]: unknown key {sorted(unknown)[0]!r}")
        for key in ("tres", "per_hour", "currency", "valid_from"):
            if key not in t:
                raise PriceError(f"price[{i}].{key}: missing")
        try:
            out.append(make_price(t["tres"], t["per_hour"], t["currency"], t["valid_from"], t.get("valid_to")))
        except PriceError as e:
            raise PriceError(f"price[{i}].{e}") from None
    currencies = {p.currency for p in out}
    if len(currencies) > 1:
        raise PriceError(f"price: one currency only, got {', '.join(sorted(currencies))}")
    return out


class PriceBook:
    """Prices indexed for lookup. `at(tres, t)` is the price in force at unix second t
    (the applicable period starting latest), or None."""

    def __init__(self, prices: list[Price]):
        self.prices = list(prices)
        currencies = sorted({p.currency for p in self.prices})
        if len(currencies) > 1:
            raise PriceError(f"prices in more than one currency: {', '.join(currencies)}")
        self.currency = currencies[0] if currencies else ""
        self._by_tres: dict[str, list[Price]] = {}
        for p in sorted(self.prices, key=lambda p: p.valid_from):
            self._by_tres.setdefault(p.tres, []).append(p)
        self._edges = sorted({p.valid_from for p in self.prices}
                             | {p.valid_to for p in self.prices if p.valid_to is not None})

    def at(self, tres: str, t: float) -> Decimal | None:
        best = self.price_at(tres, t)
        return None if best is None else best.per_hour

    def price_at(self, tres: str, t: float) -> Price | None:
        """The Price of `tres` in force at unix second t (the applicable period starting
        latest), or None."""
        best: Price | None = None
        for p in self._by_tres.get(tres, ()):
            if p.valid_from > t:
                break
            if p.valid_to is None or t < p.valid_to:
                best = p
        return best

    def in_force(self, start: int, end: int) -> list[tuple[Price, int, int]]:
        """The rate card of [start, end): every price in force at some second of it (a
        price entirely superseded there is not), with the first second it applied and
        the end of the last; by TRES then valid_from."""
        used: dict[int, tuple[Price, int, int]] = {}
        for a, b in self.segments(start, end):
            for tres in self._by_tres:
                p = self.price_at(tres, a)
                if p is not None:
                    first = used[id(p)][1] if id(p) in used else a
                    used[id(p)] = (p, first, b)
        return sorted(used.values(), key=lambda u: (u[0].tres, u[0].valid_from))

    def segments(self, start: int, end: int) -> list[tuple[int, int]]:
        """[start, end) cut at every price change inside it: consecutive, hour-aligned
        where start/end are, in time order. Within a segment every price is constant."""
        cuts = [int(e) for e in self._edges[bisect_right(self._edges, start):] if e < end]
        bounds = [start, *cuts, end]
        return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
