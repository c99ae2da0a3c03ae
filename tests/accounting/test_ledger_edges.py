"""The ledger's edges (`ledger_edges`), the report's per-job side: for any hour-aligned
segments they give the same count x seconds as clipping every rolled-up run by hand,
after incremental, repeated and failed rollups, and after the migration that fills
them from an existing ledger (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from acct_helpers import insert_usage, ts, usage
from sqlalchemy import insert, select

from batchd.accounting.charge import charge_counts, gpu_type_of, run_seconds
from batchd.accounting.rollup import ledger_entry, run_rollup
from batchd.store import Store, rollup_rows
from batchd.store import accounting as sql
from batchd.store.migrate import upgrade
from batchd.store.tables import LedgerEdge, RollupLedger

T0 = ts("2026-10-01")
H = 3600


def _records(n, t0=T0):
    """Runs of seconds to days, fractional starts, several GPU types, a second typed GPU
    and a shard count (stored as "other" TRES), zero-length and CPU-only runs."""
    out = []
    for i in range(n):
        start = t0 + 613.7 * i
        dur = (0, 59.5, 600, 3600, 5 * H + 17, 2 * 86400 + 3)[i % 6] + (i * 7919) % 4000
        tres = {"cpu": 1 + i % 8, "mem": 1024 * (1 + i % 3), "node": 1}
        if i % 4 == 1:
            tres.update({"gres/gpu": 2, "gres/gpu:h200": 2})
        elif i % 4 == 2:
            tres.update({"gres/gpu": 1, "gres/gpu:1g.24gb": 1, "gres/gpu:l4": 0.5, "gres/shard": 3})
        elif i % 4 == 3:
            tres.update({"gres/gpu": 1})  # untyped: charged as gres/gpu:gpu
        out.append(usage(start, start + (0 if i % 17 == 0 else dur), account="abc"[i % 3], user=f"u{i % 5}",
                         tres=tres, billing=0.5 + i % 3))
    return out


def _by_hand(recs, segments, accounts=None, users=None):
    """Per (segment index, TRES): sum over runs of count x whole seconds inside it."""
    out = defaultdict(float)
    for r in recs:
        if (accounts and r["account"] not in accounts) or (users and r["user"] not in users):
            continue
        s, e = run_seconds(r["start_time"], r["end_time"])
        counts = charge_counts(r["tres"], r["billing"])
        counts.pop("gres/gpu", None)  # not charged
        for idx, (a, b) in enumerate(segments):
            secs = min(e, b) - max(s, a)
            if secs > 0:
                for name, n in counts.items():
                    out[(idx, name)] += n * secs
    return dict(out)


def _same(got, want):
    assert set(got) == set(want), (sorted(set(got) ^ set(want)))
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-6), k


def _segments(*cuts):
    bounds = [int(c) for c in cuts]
    return list(zip(bounds, bounds[1:], strict=False))


SEGMENTS = [
    _segments(T0, T0 + 31 * 86400),                              # one month, one price
    _segments(T0 - 86400, T0 + 5 * H, T0 + 6 * H, T0 + 40 * 86400),  # price changes inside runs
    _segments(T0 + 3 * 86400, T0 + 3 * 86400 + H),                 # one hour in the middle
    _segments(T0 + 7 * 86400, T0 + 9 * 86400),                     # runs still open after it
]


@pytest.mark.parametrize("segments", SEGMENTS, ids=["month", "cuts", "hour", "middle"])
def test_edges_equal_runs_clipped_by_hand(store, segments):
    recs = _records(600)
    insert_usage(store, recs)
    assert run_rollup(store, 0, batch=70) == 600
    _same(sql.ledger_sums(store, segments), _by_hand(recs, segments))
    _same(sql.ledger_sums(store, segments, accounts=["b"], users=["u1", "u2"]),
          _by_hand(recs, segments, {"b"}, {"u1", "u2"}))


def test_edges_stay_right_after_incremental_and_repeated_rollups(store):
    recs = _records(300)
    insert_usage(store, recs[:200])
    run_rollup(store, 0, batch=50)
    before = _edges(store)
    assert run_rollup(store, 0) == 0 and _edges(store) == before  # nothing doubled
    insert_usage(store, recs[200:])
    assert run_rollup(store, 0) == 100
    seg = SEGMENTS[1]
    _same(sql.ledger_sums(store, seg), _by_hand(recs, seg))


def test_failed_rollup_leaves_no_edges(store, monkeypatch):
    recs = _records(250)
    insert_usage(store, recs)

    def boom(at):
        if at == "sums":
            raise RuntimeError("injected")

    monkeypatch.setattr(sql, "fault_hook", boom)
    with pytest.raises(RuntimeError):
        run_rollup(store, 0, batch=100)
    assert _edges(store) == {}
    monkeypatch.setattr(sql, "fault_hook", None)
    assert run_rollup(store, 0, batch=100) == 250
    _same(sql.ledger_sums(store, SEGMENTS[1]), _by_hand(recs, SEGMENTS[1]))


def test_migration_fills_edges_from_an_existing_ledger(db_url):
    recs = _records(400)
    store = Store(db_url)
    try:
        upgrade(store.engine, "0004")
        insert_usage(store, recs)
        with store.tx() as s:  # what the rollup of revision 0004 left: ledger rows only
            ids = list(s.scalars(select(RollupLedger.usage_id)))
            assert ids == []
        ledger = [ledger_entry(r, r.id, 0) for r in sql.unrolled_usage(store, 1000)]
        with store.tx() as s:
            s.execute(insert(RollupLedger), ledger)
        upgrade(store.engine)
        got = _edges(store)
        want = {k[:5]: tuple(k[5:]) for k in rollup_rows.edge_rows(ledger)}
        assert set(got) == set(want)
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-9), k
        for seg in SEGMENTS:
            _same(sql.ledger_sums(store, seg), _by_hand(recs, seg))
        assert any(gpu_type_of(r["tres"]) == "1g.24gb" for r in recs)
    finally:
        store.close()


def _edges(store):
    with store.tx() as s:
        found = list(s.execute(select(LedgerEdge.hour, LedgerEdge.account, LedgerEdge.user, LedgerEdge.gpu_type,
                                      LedgerEdge.tres, *[getattr(LedgerEdge, c) for c in rollup_rows.EDGE_VALUES])))
    # rows the migration's SQL keeps with all zeros are the same as no row
    return {tuple(r[:5]): tuple(r[5:]) for r in found if any(r[5:])}
