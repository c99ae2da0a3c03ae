"""Prices: `[[price]]` tables, validity periods, Decimal money, replace-on-apply."""

from __future__ import annotations

import datetime as dt
import tomllib
from decimal import Decimal
from fractions import Fraction

import pytest
from acct_helpers import ts

from batchd.accounting.charge import charge_counts, split_hours, unit_price
from batchd.accounting.prices import PriceBook, PriceError, make_price, parse_prices
from batchd.store import accounting as sql

DOC = """
[[price]]
tres = "gres/gpu:rtxpro6000"
per_hour = "1.20"
currency = "EUR"
valid_from = 2026-01-01

[[price]]
tres = "GRES/gpu:RTXPRO6000"
per_hour = "1.35"
currency = "EUR"
valid_from = "2026-10-01"
valid_to = 2026-12-31

[[price]]
tres = "mem"
per_hour = "0.01"
currency = "eur"
valid_from = 2026-01-01T06:00:00Z
"""


def test_parse_prices_from_an_accounts_file():
    ps = parse_prices(tomllib.loads(DOC))
    assert [(p.tres, p.per_hour, p.currency) for p in ps] == [
        ("gres/gpu:rtxpro6000", Decimal("1.20"), "EUR"), ("gres/gpu:rtxpro6000", Decimal("1.35"), "EUR"),
        ("mem", Decimal("0.01"), "EUR")]
    assert ps[0].valid_from == ts("2026-01-01") and ps[0].valid_to is None
    assert ps[1].valid_to == ts("2027-01-01")  # a date valid_to is inclusive: through Dec 31
    assert ps[2].valid_from == ts("2026-01-01T06:00")
    book = PriceBook(ps)
    assert book.at("gres/gpu:rtxpro6000", ts("2026-09-30T23:59")) == Decimal("1.20")
    assert book.at("gres/gpu:rtxpro6000", ts("2026-10-01")) == Decimal("1.35")
    assert book.at("gres/gpu:rtxpro6000", ts("2027-01-01")) == Decimal("1.20")  # the older, open price again
    assert book.at("cpu", ts("2026-10-01")) is None
    assert book.segments(int(ts("2026-09-30")), int(ts("2026-10-03"))) == [
        (int(ts("2026-09-30")), int(ts("2026-10-01"))), (int(ts("2026-10-01")), int(ts("2026-10-03")))]
    # mem is priced per GiB-hour: 1024 MiB for one hour cost 0.01
    assert unit_price(book, "mem", ts("2026-10-01")) * 1024 * 3600 == Fraction(1, 100)


@pytest.mark.parametrize("entry, message", [
    ({"tres": "cpu", "per_hour": 1.2, "currency": "EUR", "valid_from": "2026-01-01"}, "decimal string"),
    ({"tres": "cpu", "per_hour": "-1", "currency": "EUR", "valid_from": "2026-01-01"}, ">= 0"),
    ({"tres": "cpu", "per_hour": "x", "currency": "EUR", "valid_from": "2026-01-01"}, "not a decimal"),
    ({"tres": "cpu", "per_hour": "1", "currency": "EUR", "valid_from": "2026-01-01T10:30"}, "whole hour"),
    ({"tres": "cpu", "per_hour": "1", "currency": "EUR", "valid_from": "2026-02-01", "valid_to": "2026-01-01"},
     "not after"),
    ({"tres": "cpu", "per_hour": "1", "valid_from": "2026-01-01"}, "currency: missing"),
    ({"tres": "cpu", "per_hour": "1", "currency": "EUR", "valid_from": "2026-01-01", "vat": 1}, "unknown key"),
])
def test_bad_prices_are_refused_with_the_field_named(entry, message):
    with pytest.raises(PriceError, match=message) as e:
        parse_prices({"price": [entry]})
    assert str(e.value).startswith("price[0]")


def test_one_currency_only():
    with pytest.raises(PriceError, match="one currency"):
        parse_prices({"price": [{"tres": "cpu", "per_hour": "1", "currency": "EUR", "valid_from": dt.date(2026, 1, 1)},
                                {"tres": "mem", "per_hour": "1", "currency": "USD", "valid_from": dt.date(2026, 1, 1)}]})


def test_replace_prices_makes_the_store_match_and_is_idempotent(store):
    ps = parse_prices(tomllib.loads(DOC))
    diff = sql.replace_prices(store, ps)
    assert len(diff["added"]) == 3 and diff["removed"] == []
    assert sql.replace_prices(store, ps) == {"added": [], "removed": []}
    diff = sql.replace_prices(store, ps[:1])
    assert len(diff["removed"]) == 2 and sql.list_prices(store) == ps[:1]
    assert [a["action"] for a in store.list_audit()] == ["price.replace", "price.replace"]
    sql.add_prices(store, ps[:1])  # the same price again is not a second row
    assert len(sql.list_prices(store)) == 1


def test_split_hours_and_charge_counts():
    assert list(split_hours(3599, 7201)) == [(0, 1), (3600, 3600), (7200, 1)]
    assert list(split_hours(10, 10)) == []
    assert charge_counts({"cpu": 2, "gres/gpu": 1}, 3.0) == {"cpu": 2.0, "gres/gpu": 1.0, "gres/gpu:gpu": 1.0,
                                                             "billing": 3.0}
    assert make_price("gres/gpu", "7", "EUR", "2026-01-01").per_hour == Decimal(7)
