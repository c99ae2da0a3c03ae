"""Exact arithmetic of the bill on crafted cases: month end, price change, MIG slice,
preempted-and-requeued job, running job; rollups split exactly at boundaries."""

from __future__ import annotations

from decimal import Decimal

from acct_helpers import add_account, add_node, insert_running, insert_usage, ts, usage
from sqlalchemy import select

from batchd.accounting.prices import make_price
from batchd.accounting.report import build_report
from batchd.accounting.rollup import run_rollup
from batchd.model import Node
from batchd.store import accounting as sql
from batchd.store.tables import UsageHourly

H200 = {"cpu": 0, "gres/gpu": 1, "gres/gpu:h200": 1}


def _prices(store, *specs):
    sql.add_prices(store, [make_price(*s) for s in specs])


def _month(store, month, now=None, **kw):
    y, m = map(int, month.split("-"))
    nxt = f"{y + (m == 12)}-{(m % 12) + 1:02d}-01"
    now = ts("2030-01-01") if now is None else now
    return build_report(store, start=int(ts(f"{month}-01")), end=int(ts(nxt)), now=now, **kw)


def _row(rep, **match):
    rows = [r for r in rep["rows"] if all(r.get(k) == v for k, v in match.items())]
    assert len(rows) == 1, rep["rows"]
    return rows[0]


def test_run_across_month_end_is_split_at_midnight(store):
    _prices(store, ("gres/gpu:h200", "2.00", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-31T22:00"), ts("2026-11-01T02:30"), tres=H200)])
    assert run_rollup(store, 0) == 1
    oct_, nov = _month(store, "2026-10"), _month(store, "2026-11")
    assert _row(oct_, account="a")["gpu_hours"] == 2.0 and oct_["totals"]["cost"] == "4.00"
    assert _row(nov, account="a")["gpu_hours"] == 2.5 and nov["totals"]["cost"] == "5.00"
    assert oct_["reconciled"] and nov["reconciled"]
    with store.tx() as s:
        rows = list(s.scalars(select(UsageHourly).order_by(UsageHourly.hour)))
    hours = [r.hour for r in rows]
    amounts = [r.gpu_s for r in rows]
    assert all(r.gpu_type_s == r.gpu_s and r.gpu_type == "h200" for r in rows)
    assert [h - hours[0] for h in hours] == [0, 3600, 7200, 10800, 14400]
    assert amounts == [3600.0, 3600.0, 3600.0, 3600.0, 1800.0]


def test_price_change_mid_month(store):
    _prices(store, ("gres/gpu:h200", "2.00", "EUR", "2026-10-01"), ("gres/gpu:h200", "3.50", "EUR", "2026-10-15"))
    insert_usage(store, [usage(ts("2026-10-14T22:00"), ts("2026-10-15T01:00"), tres=H200),
                         usage(ts("2026-10-20T00:00"), ts("2026-10-20T00:20"), tres=H200, user="v")])
    run_rollup(store, 0)
    rep = _month(store, "2026-10", group_by=["user"])
    # 2 h at 2.00 + 1 h at 3.50; 20 minutes at 3.50
    assert _row(rep, user="u")["cost"] == "7.50"
    assert _row(rep, user="v")["cost"] == "1.17"
    assert rep["totals"]["cost"] == "8.67" and rep["jobs_cost"] == "8.67" and rep["reconciled"]
    # the old price still applies to a past month
    insert_usage(store, [usage(ts("2026-10-02T00:00"), ts("2026-10-02T01:00"), tres=H200, account="b")])
    assert _row(_month(store, "2026-10"), account="b")["cost"] == "2.00"


def test_mig_slice_is_charged_as_its_profile(store):
    mig = {"cpu": 2, "mem": 8192, "gres/gpu": 0.25, "gres/gpu:1g.24gb": 1}
    _prices(store, ("gres/gpu:1g.24gb", "0.40", "EUR", "2026-01-01"), ("gres/gpu", "7.00", "EUR", "2026-01-01"),
            ("mem", "0.01", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-05T10:00"), ts("2026-10-05T13:00"), tres=mig)])
    run_rollup(store, 0)
    row = _row(_month(store, "2026-10"), account="a")
    # 3 h x 0.40 for the slice (never the whole-card 7.00) + 8 GiB x 3 h x 0.01
    assert row["cost"] == "1.44"
    assert row["gpu_hours"] == 0.75 and row["gpu_hours_by_type"] == {"1g.24gb": 3.0}


def test_mig_profile_without_price_falls_back_to_its_share_of_a_card(store):
    _prices(store, ("gres/gpu", "7.00", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-05T10:00"), ts("2026-10-05T12:00"),
                               tres={"gres/gpu": 2 / 7, "gres/gpu:2g.35gb": 1})])
    run_rollup(store, 0)
    assert _month(store, "2026-10")["totals"]["cost"] == "4.00"  # 2/7 of 7.00 for 2 h


def test_preempted_and_requeued_job_bills_both_runs(store):
    _prices(store, ("gres/gpu:h200", "1.00", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-03T00:00"), ts("2026-10-03T01:00"), job_id=500, run=0, tres=H200),
                         usage(ts("2026-10-03T02:00"), ts("2026-10-03T04:00"), job_id=500, run=1, tres=H200)])
    run_rollup(store, 0)
    rep = _month(store, "2026-10")
    assert rep["totals"]["cost"] == "3.00" and rep["jobs_cost"] == "3.00" and rep["reconciled"]


def test_running_job_counts_up_to_now_and_is_not_rolled_up(store):
    _prices(store, ("gres/gpu:h200", "2.00", "EUR", "2026-01-01"), ("cpu", "0.10", "EUR", "2026-01-01"))
    insert_running(store, 77, ts("2026-10-10T08:00"), "cpu=4,mem=16G,node=1,billing=6,gres/gpu=2,gres/gpu:h200=2",
                   billing=6.0)
    now = ts("2026-10-10T10:30")
    assert run_rollup(store, now) == 0
    rep = _month(store, "2026-10", now=now)
    row = _row(rep, account="a")
    # 2.5 h x (2 GPUs x 2.00 + 4 CPUs x 0.10)
    assert row["cost"] == "11.00" and row["gpu_hours"] == 5.0 and row["billing"] == 15.0
    assert rep["reconciled"] and rep["running_included"] == 1
    assert rep["period"]["upto"] == now


def test_unrolled_records_are_in_the_report_before_the_rollup_runs(store):
    _prices(store, ("gres/gpu:h200", "1.00", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-03T00:00"), ts("2026-10-03T03:00"), tres=H200)])
    before = _month(store, "2026-10")
    run_rollup(store, 0)
    after = _month(store, "2026-10")
    assert before["rows"] == after["rows"] and before["totals"]["cost"] == "3.00"


def test_quota_borrowed_idle_and_spread(store):
    add_node(store, "gpu01", 4)
    add_account(store, "a", 1)
    add_account(store, "b", 3)
    _prices(store, ("gres/gpu:h200", "1.00", "EUR", "2026-01-01"))
    # a uses 3 GPUs for 2 h of a 1-GPU quota: 2 GPUs borrowed for 2 h
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T02:00"),
                               tres={"gres/gpu": 3, "gres/gpu:h200": 3})])
    run_rollup(store, 0)
    rep = build_report(store, start=int(ts("2026-10-01")), end=int(ts("2026-10-02")), now=ts("2030-01-01"),
                       spread_idle=True)
    a, b = _row(rep, account="a"), _row(rep, account="b")
    assert (a["quota_gpu_hours"], a["borrowed_gpu_hours"], a["gpu_hours"]) == (24.0, 4.0, 6.0)
    assert a["quota_used_pct"] == 25.0
    assert (b["quota_gpu_hours"], b["gpu_hours"], b["cost"]) == (72.0, 0.0, "0.00")
    assert rep["idle_gpu_hours"] == 96 - 6 and rep["idle_cost"] == "90.00"
    assert (a["idle_cost"], b["idle_cost"]) == ("22.50", "67.50")
    assert rep["totals"]["cost_with_idle"] == "96.00"


def test_quota_per_gpu_type_with_by_account_gpu_type(store):
    """--by account,gpu-type: a row's quota is the account's `gres/gpu:TYPE` quota (per GPU
    model); a type without one has no quota columns in its row."""
    from batchd.model import Account

    add_node(store, "gpu01", 4)
    store.put_account(Account(name="a", parent="root", resources={
        "gres/gpu": {"quota": 3, "limit": -1}, "gres/gpu:h200": {"quota": 1, "limit": -1}}))
    _prices(store, ("gres/gpu:h200", "1.00", "EUR", "2026-01-01"), ("gres/gpu:l4", "0.50", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T02:00"),
                               tres={"gres/gpu": 3, "gres/gpu:h200": 3}),
                         usage(ts("2026-10-01T03:00"), ts("2026-10-01T04:00"),
                               tres={"gres/gpu": 2, "gres/gpu:l4": 2})])
    run_rollup(store, 0)
    rep = build_report(store, start=int(ts("2026-10-01")), end=int(ts("2026-10-02")), now=ts("2030-01-01"),
                       group_by=["account", "gpu_type"])
    h200, l4 = _row(rep, account="a", gpu_type="h200"), _row(rep, account="a", gpu_type="l4")
    # 3 h200 for 2 h on a 1-GPU h200 quota: 2 borrowed for 2 h
    assert (h200["quota_gpu_hours"], h200["borrowed_gpu_hours"], h200["gpu_hours"]) == (24.0, 4.0, 6.0)
    assert h200["quota_used_pct"] == 25.0
    assert "quota_gpu_hours" not in l4 and l4["gpu_hours"] == 2.0
    assert rep["reconciled"]
    from batchd.accounting.render import columns

    assert ("quota_gpu_hours", "Quota GPU-h") in columns(rep)


def test_idle_capacity_counts_a_mig_gpu_as_its_slices(store):
    # gpu01: GPU 0 whole, GPU 1 in MIG mode as seven 1g.24gb instances (each 1/7 of it)
    mig = [{"profile": "1g.24gb", "uuid": f"MIG-{i}"} for i in range(7)]
    store.upsert_node(Node(name="gpu01", state="IDLE", cpus=64, memory_mb=512000, heartbeat=0.0,
                           gpus=[{"index": 0, "uuid": "GPU-0", "type": "h200"},
                                 {"index": 1, "uuid": "GPU-1", "type": "h200", "mig": mig}]))
    _prices(store, ("gres/gpu:h200", "2.00", "EUR", "2026-01-01"), ("gres/gpu:1g.24gb", "0.30", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T02:00"), tres=H200),
                         usage(ts("2026-10-01T05:00"), ts("2026-10-01T08:00"),
                               tres={"gres/gpu": 1 / 7, "gres/gpu:1g.24gb": 1})])
    run_rollup(store, 0)
    rep = build_report(store, start=int(ts("2026-10-01")), end=int(ts("2026-10-02")), now=ts("2030-01-01"),
                       raw=True)
    # the MIG GPU is no whole h200: its capacity is its seven slices (and one card)
    assert rep["capacity"] == {"cpu": 64.0, "gres/gpu": 2.0, "gres/gpu:h200": 1.0, "gres/gpu:1g.24gb": 7.0,
                               "gres/gpu:h200@1g.24gb": 1.0}  # the instances' card share (batchd.slurm.gres)
    # idle h200: 24 - 2 h at 2.00; idle slices: 7 x 24 - 3 h at 0.30
    assert rep["idle_cost"] == "93.50"
    assert rep["idle_gpu_hours"] == round(48 - 2 - 3 / 7, 6) and rep["capacity_gpu_hours"] == 48.0
    assert rep["totals"]["cost"] == "4.90" and rep["reconciled"]


def test_rows_add_up_to_the_total_to_the_cent(store):
    # three accounts of 1/3 cent-fractions each: rounding row by row would lose a cent
    _prices(store, ("cpu", "0.01", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T00:00") + 1200, account=x,
                               tres={"cpu": 1}) for x in "abc"])
    run_rollup(store, 0)
    rep = _month(store, "2026-10")
    assert sum(Decimal(r["cost"]) for r in rep["rows"]) == Decimal(rep["totals"]["cost"]) == Decimal("0.01")
    assert rep["reconciled"]


def test_group_by_gpu_type_and_node(store):
    _prices(store, ("gres/gpu:h200", "2.00", "EUR", "2026-01-01"), ("gres/gpu:l4", "0.50", "EUR", "2026-01-01"))
    insert_usage(store, [usage(ts("2026-10-01T00:00"), ts("2026-10-01T01:00"), tres=H200, node="gpu01"),
                         usage(ts("2026-10-01T00:00"), ts("2026-10-01T02:00"), node="gpu02", account="b",
                               tres={"gres/gpu": 1, "gres/gpu:l4": 1})])
    run_rollup(store, 0)
    rep = _month(store, "2026-10", group_by=["gpu_type", "node"])
    assert _row(rep, gpu_type="h200", node="gpu01")["cost"] == "2.00"
    assert _row(rep, gpu_type="l4", node="gpu02")["cost"] == "1.00"
    assert "quota_gpu_hours" not in rep["rows"][0] and "account" not in rep["rows"][0]
    only_b = _month(store, "2026-10", accounts=["b"])
    assert [r["account"] for r in only_b["rows"]] == ["b"] and only_b["reconciled"]
