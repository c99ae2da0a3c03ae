"""The report's rules of issue 14 (docs/report.md), on crafted cases with hand-computed
numbers, on both backends: borrowed and lent GPU-time to the second, capacity only while
it existed, down time apart from idle, --tz month boundaries, each user's share of their
account and what a user who is not an administrator sees."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from acct_helpers import add_account, insert_running, insert_usage, ts, usage

from batchd.accounting.prices import make_price
from batchd.accounting.report import build_report
from batchd.accounting.rollup import run_rollup
from batchd.accounting.routes import report as report_route
from batchd.config import parse_config
from batchd.errors import ConfigError, InvalidRequest, PermissionDenied
from batchd.model import Node
from batchd.server.service import Service
from batchd.store import NOT_RESPONDING
from batchd.store import accounting as sql

NEVER = ts("2030-01-01")


def h200(n: float) -> dict[str, float]:
    return {"cpu": 0, "gres/gpu": n, "gres/gpu:h200": n}


def node(store, name: str, gpus: int, registered: float) -> None:
    store.upsert_node(Node(name=name, state="IDLE", cpus=64, memory_mb=512000,
                           gpus=[{"type": "h200", "count": gpus}], heartbeat=registered))


def price(store, per_hour: str = "1.00") -> None:
    sql.add_prices(store, [make_price("gres/gpu:h200", per_hour, "EUR", "2026-01-01")])


def day(store, text: str = "2026-10-01", **kw):
    return build_report(store, start=int(ts(text)), end=int(ts(text) + 86400), now=kw.pop("now", NEVER), **kw)


def month(store, y: int, m: int, **kw):
    nxt = f"{y + (m == 12)}-{m % 12 + 1:02d}-01"
    return build_report(store, start=int(ts(f"{y}-{m:02d}-01")), end=int(ts(nxt)), now=kw.pop("now", NEVER), **kw)


def row(rep, **match):
    rows = [r for r in rep["rows"] if all(r.get(k) == v for k, v in match.items())]
    assert len(rows) == 1, rep["rows"]
    return rows[0]


# ------------------------------------------------------------------ borrowed and lent
def test_borrowed_inside_one_hour_and_lent_pro_rata(store):
    """16 cards, quotas a 6, b 6, c 4 (all capacity guaranteed). a holds 10 cards for
    half an hour (6 rolled up, 4 not yet: both sources count), c holds 2 for the hour.
    a borrows 4 x 0.5 = 2 GPU-hours (the hourly average, 5 of 6, showed 0). The 4 borrowed
    cards come from the unused quotas, b 6 and c 4 - 2 = 2: lent b 4 x 6/8 x 0.5 = 1.5,
    c 4 x 2/8 x 0.5 = 0.5."""
    node(store, "gpu01", 16, 0.0)
    add_account(store, "a", 6)
    add_account(store, "b", 6)
    add_account(store, "c", 4)
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T00:30"), account="a", tres=h200(6)),
                         usage(ts("2026-10-01T00:00"), ts("2026-10-01T01:00"), account="c", tres=h200(2))])
    run_rollup(store, 0)
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T00:30"), account="a", tres=h200(4))])
    rep = day(store)
    a, b, c = row(rep, account="a"), row(rep, account="b"), row(rep, account="c")
    assert (a["gpu_hours"], a["borrowed_gpu_hours"], a["lent_gpu_hours"]) == (5.0, 2.0, 0.0)
    assert (b["borrowed_gpu_hours"], b["lent_gpu_hours"]) == (0.0, 1.5)
    assert (c["borrowed_gpu_hours"], c["lent_gpu_hours"]) == (0.0, 0.5)
    assert (a["quota_gpu_hours"], c["quota_gpu_hours"]) == (144.0, 96.0)


def test_borrowing_is_served_first_from_unguaranteed_capacity(store):
    """18 cards, 16 guaranteed: of a's 4 borrowed cards 2 come from the 2 nobody is
    guaranteed, the other 2 from b's unused quota (c's is all used): b lends 2 x 0.5 h.
    A running job counts to now like a finished run."""
    node(store, "gpu01", 18, 0.0)
    add_account(store, "a", 6)
    add_account(store, "b", 6)
    add_account(store, "c", 4)
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T00:30"), account="a", tres=h200(10)),
                         usage(ts("2026-10-01T00:00"), ts("2026-10-01T01:00"), account="c", tres=h200(4))])
    run_rollup(store, 0)
    insert_running(store, 900, ts("2026-10-01T03:00"), "cpu=1,gres/gpu=8,gres/gpu:h200=8", account="b")
    rep = day(store, now=ts("2026-10-01T03:15"))
    a, b, c = row(rep, account="a"), row(rep, account="b"), row(rep, account="c")
    assert (a["borrowed_gpu_hours"], b["lent_gpu_hours"], c["lent_gpu_hours"]) == (2.0, 1.0, 0.0)
    # b's running job: 8 cards on a 6-card quota for 15 minutes; nobody lends (4 + 8 free)
    assert (b["borrowed_gpu_hours"], a["lent_gpu_hours"]) == (0.5, 0.0)


def test_borrowed_per_gpu_type_quota_inside_one_hour(store):
    from batchd.model import Account

    node(store, "gpu01", 8, 0.0)
    store.put_account(Account(name="a", parent="root", resources={
        "gres/gpu": {"quota": 8, "limit": -1}, "gres/gpu:h200": {"quota": 2, "limit": -1}}))
    insert_usage(store, [usage(ts("2026-10-01T00:10"), ts("2026-10-01T00:40"), account="a", tres=h200(5))])
    run_rollup(store, 0)
    rep = day(store, group_by=["account", "gpu_type"])
    r = row(rep, account="a", gpu_type="h200")
    assert (r["gpu_hours"], r["borrowed_gpu_hours"], r["quota_gpu_hours"]) == (2.5, 1.5, 48.0)


# ------------------------------------------------------------------ capacity while it existed
def test_node_added_mid_month(store):
    """gpu01 (4 cards) registers on 11 October, gpu02 (4) on 16 October: October's
    capacity is 4 x 21 x 24 + 4 x 16 x 24 = 3552 GPU-hours, all idle; a's 2-card quota
    counts from the first registration: 2 x 21 x 24 = 1008."""
    price(store)
    node(store, "gpu01", 4, ts("2026-10-11"))
    node(store, "gpu02", 4, ts("2026-10-16"))
    add_account(store, "a", 2)
    rep = month(store, 2026, 10)
    assert (rep["capacity_gpu_hours"], rep["idle_gpu_hours"], rep["idle_cost"]) == (3552.0, 3552.0, "3552.00")
    assert row(rep, account="a")["quota_gpu_hours"] == 1008.0
    assert rep["down_gpu_hours"] == 0.0


def test_month_before_any_node_has_no_capacity(store):
    """A cluster set up on 1 December: November has no capacity, no idle time and no
    quota (it showed 16 x 720 = 11,520 idle GPU-hours); December counts from the 1st."""
    price(store)
    node(store, "gpu01", 16, ts("2026-12-01"))
    add_account(store, "a", 4)
    nov = month(store, 2026, 11)
    assert (nov["capacity_gpu_hours"], nov["idle_gpu_hours"], nov["idle_cost"]) == (0.0, 0.0, "0.00")
    a = row(nov, account="a")
    assert (a["quota_gpu_hours"], a["quota_used_pct"]) == (0.0, None)
    dec = month(store, 2026, 12, now=ts("2026-12-02"))
    assert (dec["capacity_gpu_hours"], dec["idle_gpu_hours"]) == (384.0, 384.0)
    assert row(dec, account="a")["quota_gpu_hours"] == 96.0


def test_drained_and_down_node_time_is_down_not_idle(store):
    """Two 4-card nodes all day; gpu02 drained 06:00-12:00 (24 GPU-hours), gpu01 DOWN for
    not responding 20:00 until its heartbeat at 21:00 (4). a uses 1 card for 2 h:
    idle = 192 - 28 - 2 = 162."""
    price(store)
    node(store, "gpu01", 4, 0.0)
    node(store, "gpu02", 4, 0.0)
    store.set_node_state("gpu02", "DRAIN", "maintenance", 0, now=ts("2026-10-01T06:00"))
    store.set_node_state("gpu02", "IDLE", None, 0, now=ts("2026-10-01T12:00"))
    store.set_node_state("gpu01", "DOWN", NOT_RESPONDING, 0, now=ts("2026-10-01T20:00"))
    store.heartbeat(["gpu01"], ts("2026-10-01T21:00"))
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T02:00"), tres=h200(1))])
    run_rollup(store, 0)
    rep = day(store)
    assert (rep["capacity_gpu_hours"], rep["down_gpu_hours"], rep["down_cost"]) == (192.0, 28.0, "28.00")
    assert (rep["idle_gpu_hours"], rep["idle_cost"]) == (162.0, "162.00")
    events = {n: ev for n, _reg, _g, ev in store.node_history()}
    assert [s for _, s in events["gpu01"]] == ["IDLE", "DOWN", "IDLE"]


# ------------------------------------------------------------------ --tz and who sees what
class _Service(Service):
    """The service's authorization (require_admin) over a stub identity: admins by name."""

    def __init__(self, store, admins=(), tz="UTC"):  # the stub needs no config or daemon
        self.store = store
        self.cfg = SimpleNamespace(cluster_name="c", report_timezone=tz, zero_gpu_flag_s=3600.0)
        self.admins = set(admins)

    def is_admin(self, caller) -> bool:
        return caller.user in self.admins


def _as(user: str):
    return SimpleNamespace(user=user, uid=1000, gid=1000)


def test_tz_month_boundary(store):
    """Europe/Berlin's October is [30 Sep 22:00, 31 Oct 23:00) UTC: a run 22:30-23:30 UTC
    on 30 September is October's (its day, in Berlin, the 1st); a run at 23:30 UTC on 31
    October is November's. Asia/Kolkata (+05:30) starts at 18:30 UTC, rounded down to
    18:00 UTC, the rollup's hour."""
    price(store)
    insert_usage(store, [usage(ts("2026-09-30T22:30"), ts("2026-09-30T23:30"), tres=h200(1)),
                         usage(ts("2026-10-31T23:30"), ts("2026-11-01T00:30"), tres=h200(1))])
    run_rollup(store, 0)
    svc = _Service(store, admins={"root"})
    berlin = report_route(svc, _as("root"), {"month": "2026-10", "tz": "Europe/Berlin", "daily": "1"}, None)
    assert berlin["period"] == {"start": ts("2026-09-30T22:00"), "end": ts("2026-10-31T23:00"),
                                "upto": ts("2026-10-31T23:00"), "tz": "Europe/Berlin"}
    assert row(berlin, account="a")["gpu_hours"] == 1.0 and berlin["totals"]["cost"] == "1.00"
    assert berlin["daily"] == {"2026-10-01": {"a": 1.0}}
    utc = report_route(svc, _as("root"), {"month": "2026-10"}, None)
    assert row(utc, account="a")["gpu_hours"] == 0.5 and utc["period"]["tz"] == "UTC"
    # the config's default zone, and dates of --start/--end read in it
    dflt = report_route(_Service(store, admins={"root"}, tz="Europe/Berlin"), _as("root"),
                        {"start": "2026-10-01", "end": "2026-10-02"}, None)
    assert dflt["period"]["start"] == ts("2026-09-30T22:00") and row(dflt, account="a")["gpu_hours"] == 1.0
    kol = report_route(svc, _as("root"), {"month": "2026-10", "tz": "Asia/Kolkata"}, None)
    assert (kol["period"]["start"], kol["period"]["end"]) == (ts("2026-09-30T18:00"), ts("2026-10-31T18:00"))
    with pytest.raises(InvalidRequest, match="unknown time zone"):
        report_route(svc, _as("root"), {"month": "2026-10", "tz": "Mars/Olympus"}, None)
    with pytest.raises(ConfigError, match="report.timezone: unknown time zone 'Mars/Olympus'"):
        parse_config({"report": {"timezone": "Mars/Olympus"}})


def test_by_user_account_share(store):
    """Cost shares of the account: a = u1 3.00 + u2 1.00, b = u1 4.00. --by account,user:
    75 / 25 / 100 %; --by user: u1 7 of its accounts' 8 = 87.5 %, u2 1 of 4 = 25 %; a user
    filter keeps the account's whole cost as the denominator."""
    price(store)
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T03:00"), account="a", user="u1", tres=h200(1)),
                         usage(ts("2026-10-01T00:00"), ts("2026-10-01T01:00"), account="a", user="u2", tres=h200(1)),
                         usage(ts("2026-10-01T00:00"), ts("2026-10-01T04:00"), account="b", user="u1", tres=h200(1))])
    run_rollup(store, 0)
    rep = day(store, group_by=["account", "user"])
    assert [(r["account"], r["user"], r["account_share_pct"]) for r in rep["rows"]] == [
        ("a", "u1", 75.0), ("a", "u2", 25.0), ("b", "u1", 100.0)]
    rep = day(store, group_by=["user"])
    assert [(r["user"], r["account_share_pct"]) for r in rep["rows"]] == [("u1", 87.5), ("u2", 25.0)]
    rep = day(store, group_by=["account", "user"], users=["u2"])
    assert [(r["user"], r["cost"], r["account_share_pct"]) for r in rep["rows"]] == [("u2", "1.00", 25.0)]
    assert "account_share_pct" not in day(store)["rows"][0]


def test_non_admin_sees_only_their_accounts(store):
    price(store)
    node(store, "gpu01", 4, 0.0)
    add_account(store, "a", 2)
    add_account(store, "b", 2)
    store.put_association("alice", "a")
    store.put_association("bob", "b")
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T02:00"), account="a", user="alice",
                               tres=h200(1)),
                         usage(ts("2026-10-01T00:00"), ts("2026-10-01T03:00"), account="b", user="bob",
                               tres=h200(1))])
    run_rollup(store, 0)
    svc = _Service(store, admins={"root"})
    q = {"start": str(int(ts("2026-10-01"))), "end": str(int(ts("2026-10-02")))}
    mine = report_route(svc, _as("alice"), dict(q), None)
    assert [r["account"] for r in mine["rows"]] == ["a"] and mine["totals"]["cost"] == "2.00"
    assert mine["idle_gpu_hours"] is None and mine["idle_cost"] is None and mine["scope"] == "member_accounts"
    assert mine["capacity_gpu_hours"] == 96.0
    with pytest.raises(PermissionDenied, match="not a member of account b"):
        report_route(svc, _as("alice"), dict(q, accounts="b"), None)
    with pytest.raises(PermissionDenied, match="spread-idle"):
        report_route(svc, _as("alice"), dict(q, spread_idle="1"), None)
    assert report_route(svc, _as("carol"), dict(q), None)["rows"] == []
    everyone = report_route(svc, _as("root"), dict(q), None)
    assert [r["account"] for r in everyone["rows"]] == ["a", "b"] and everyone["totals"]["cost"] == "5.00"
    assert everyone["idle_gpu_hours"] == 96.0 - 5 and everyone["scope"] == "all"
    from batchd.accounting.render import render_table

    assert "administrators only" in render_table(mine)


def test_migration_0010_registers_existing_nodes(db_url):
    """Nodes that existed before 0010 are registered at the earliest usage record or job
    started on them, else at their heartbeat, with one event of their current state."""
    from sqlalchemy import text

    from batchd.store import Store
    from batchd.store.migrate import upgrade
    from batchd.store.tables import UsageRecord

    s = Store(db_url)
    try:
        upgrade(s.engine, "0009")
        with s.tx() as tx:
            tx.execute(text("INSERT INTO nodes (name, state, reason, cpus, memory_mb, gpus, heartbeat) VALUES "
                            "('gpu01', 'IDLE', NULL, 4, 1000, '[]', 9000.0), "
                            "('gpu02', 'DRAIN', 'broken', 4, 1000, '[]', 7000.0)"))
            tx.execute(UsageRecord.__table__.insert(), [usage(5000.0, 6000.0, node="gpu01"),
                                                        usage(4000.0, 6000.0, node="gpu01")])
        upgrade(s.engine)
        hist = {n: (reg, ev) for n, reg, _g, ev in s.node_history()}
        assert hist == {"gpu01": (4000.0, [(4000.0, "IDLE")]), "gpu02": (7000.0, [(7000.0, "DRAIN")])}
    finally:
        s.close()
