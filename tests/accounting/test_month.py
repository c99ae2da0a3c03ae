"""A generated month of 100,000 usage records across 10 accounts: the report's total
equals the sum of per-job costs, computed here independently, to the cent, and the
rows add up to it (SQLite and PostgreSQL)."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from acct_helpers import insert_usage, ts
from monthgen import month_records

from batchd.accounting.prices import make_price
from batchd.accounting.report import build_report
from batchd.accounting.rollup import run_rollup
from batchd.store import accounting as sql

PRICES = [("gres/gpu:rtxpro6000", "1.20", "2026-01-01", None), ("gres/gpu:rtxpro6000", "1.35", "2026-10-16", None),
          ("gres/gpu:h200", "3.10", "2026-01-01", None), ("gres/gpu:1g.24gb", "0.33", "2026-01-01", None),
          ("cpu", "0.012", "2026-01-01", None), ("mem", "0.0025", "2026-01-01", "2026-10-20")]


def _job_cost(rec, start, end, change):
    """Independent per-job arithmetic: seconds of the run inside [start, end) times the
    price in force, for each priced TRES."""
    s, e = max(math.floor(rec["start_time"]), start), min(math.floor(rec["end_time"]), end)
    if e <= s:
        return Fraction(0)
    before, after = max(0, min(e, change) - s), max(0, e - max(s, change))
    mem_end = int(ts("2026-10-21"))
    mem_s = max(0, min(e, mem_end) - s)
    t = rec["tres"]
    c = Fraction(0)
    c += t.get("gres/gpu:rtxpro6000", 0) * (Fraction("1.20") * before + Fraction("1.35") * after)
    c += t.get("gres/gpu:h200", 0) * Fraction("3.10") * (e - s)
    c += t.get("gres/gpu:1g.24gb", 0) * Fraction("0.33") * (e - s)
    c += t["cpu"] * Fraction("0.012") * (e - s)
    c += Fraction(t["mem"]) / 1024 * Fraction("0.0025") * mem_s
    return c / 3600


@pytest.mark.slow  # 100,000 records: one to two minutes per backend
def test_generated_month_reconciles_to_the_cent(store):
    start, end = int(ts("2026-10-01")), int(ts("2026-11-01"))
    recs = month_records(100_000, start - 86400, end - start + 86400)
    insert_usage(store, recs)
    sql.add_prices(store, [make_price(t, p, "EUR", f, to) for t, p, f, to in PRICES])
    assert run_rollup(store, 0, batch=5000) == 100_000
    rep = build_report(store, start=start, end=end, now=ts("2027-01-01"))
    change = int(ts("2026-10-16"))
    want = sum((_job_cost(r, start, end, change) for r in recs), Fraction(0))
    want_cents = (Decimal(want.numerator) / Decimal(want.denominator)).quantize(Decimal("0.01"))
    assert len(rep["rows"]) == 10
    assert rep["totals"]["cost"] == str(want_cents), (rep["totals"], want_cents)
    assert rep["jobs_cost"] == rep["totals"]["cost"] and rep["reconciled"]
    assert sum(Decimal(r["cost"]) for r in rep["rows"]) == want_cents
