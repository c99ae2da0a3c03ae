"""The bill of MIG instances and shards (issue 14): each is charged its share of its card by
the GPU model (batchd/slurm/gres.py), at its own price where its profile (or gres/shard) has one,
else at its card's price times the share; idle capacity is what the cards offered minus those
shares, so capacity = the sum over accounts + idle, to the cent. Crafted arithmetic, on both
backends, with records in the form the controller writes (a charge's record)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from acct_helpers import insert_running, insert_usage, ts, usage

from batchd.accounting.prices import make_price
from batchd.accounting.report import build_report
from batchd.accounting.rollup import run_rollup
from batchd.model import Node
from batchd.slurm.gres import charge_of_allocation, parse_node_gpus
from batchd.store import accounting as sql

GPUS = [
    {"index": 0, "uuid": "GPU-r", "type": "rtxpro6000", "mig": [{"profile": "1g.24gb", "uuid": f"R{i}"} for i in range(4)]},
    {"index": 1, "uuid": "GPU-h", "type": "h200", "mig": [{"profile": "3g.71gb", "uuid": "H3a"},
                                                        {"profile": "3g.71gb", "uuid": "H3b"},
                                                        {"profile": "1g.18gb", "uuid": "H1"}]},
    {"index": 2, "uuid": "GPU-2", "type": "h200"},
    {"index": 3, "uuid": "GPU-3", "type": "h200"},
]
INV = {"mix01": parse_node_gpus(GPUS, shards=8)}  # cards 2 and 3: 4 shards each


def rec(**alloc):
    """The record form of an allocation on mix01 (what the controller stores)."""
    return charge_of_allocation({"mix01": {"cpus": 0, **alloc}}, INV).record()


MIG_RTX = rec(gpus=["0:R1"])             # 1/4 of an rtxpro6000
MIG_H3 = rec(gpus=["1:H3a"])             # 3/7 of an h200
SHARD2 = rec(shards=2, shard_gpus=[2])   # 2 of 4 shards: 1/2 of an h200
WHOLE = rec(gpus=[3])                    # a whole h200


@pytest.fixture
def cluster(store):
    store.upsert_node(Node(name="mix01", state="IDLE", cpus=64, memory_mb=512000, gpus=GPUS, heartbeat=0.0))
    sql.add_prices(store, [make_price("gres/gpu:h200", "2.00", "EUR", "2026-01-01"),
                           make_price("gres/gpu:rtxpro6000", "1.20", "EUR", "2026-01-01"),
                           make_price("gres/gpu", "1.00", "EUR", "2026-01-01")])
    d = ts("2026-10-01")
    insert_usage(store, [usage(d, d + 2 * 3600, account="nb", tres=MIG_RTX, node="mix01"),
                         usage(d, d + 3600, account="tr", tres=MIG_H3, node="mix01"),
                         usage(d, d + 4 * 3600, account="nb", user="v", tres=SHARD2, node="mix01"),
                         usage(d, d + 3600, account="tr", tres=WHOLE, node="mix01")])
    run_rollup(store, 0)
    return store


def _day(store, **kw):
    return build_report(store, start=int(ts("2026-10-01")), end=int(ts("2026-10-02")), now=ts("2030-01-01"), **kw)


def test_shares_and_card_prices(cluster):
    rep = _day(cluster)
    rows = {r["account"]: r for r in rep["rows"]}
    # nb: 1/4 rtx x 2 h + 1/2 h200 x 4 h = 0.5 + 2 GPU-h; 0.25 x 1.20 x 2 + 0.5 x 2.00 x 4 = 0.60 + 4.00
    assert rows["nb"]["gpu_hours"] == 2.5 and rows["nb"]["cost"] == "4.60"
    # tr: 3/7 h200 x 1 h + 1 h200 x 1 h; 3/7 x 2.00 + 2.00 = 2.857142...
    assert rows["tr"]["gpu_hours"] == pytest.approx(1 + 3 / 7, abs=1e-6) and rows["tr"]["cost"] == "2.86"
    assert rep["totals"]["cost"] == "7.46" and rep["reconciled"]
    # capacity = sum over accounts + idle, in GPU-hours and in money (every card priced here)
    used = sum(r["gpu_hours"] for r in rep["rows"])
    assert rep["capacity_gpu_hours"] == 96.0
    assert used + rep["idle_gpu_hours"] == pytest.approx(96.0, abs=1e-5)
    card_value = Decimal("1.20") * 24 + Decimal("2.00") * 24 * 3
    assert Decimal(rep["totals"]["cost"]) + Decimal(rep["idle_cost"]) == card_value == Decimal("172.80")


def test_own_prices_of_a_profile_and_of_shards_win(cluster):
    sql.add_prices(cluster, [make_price("gres/gpu:1g.24gb", "0.40", "EUR", "2026-01-01"),
                             make_price("gres/shard", "0.30", "EUR", "2026-01-01")])
    rep = _day(cluster)
    rows = {r["account"]: r for r in rep["rows"]}
    # nb: one 1g.24gb x 2 h x 0.40 + 2 shards x 4 h x 0.30 = 0.80 + 2.40; GPU-hours unchanged
    assert rows["nb"]["cost"] == "3.20" and rows["nb"]["gpu_hours"] == 2.5
    assert rep["totals"]["cost"] == "6.06" and rep["reconciled"]
    # idle: 1g.24gb instances at their own price (4 x 24 - 2 = 94 x 0.40), whole h200 cards
    # (48 - 1 - 2 shard-hours of card = 45 x 2.00), the h200 MIG card (24 - 3/7) x 2.00
    assert rep["idle_cost"] == str((Decimal("37.60") + Decimal("90.00") + Decimal(2 * (24 - 3 / 7))).quantize(Decimal("0.01")))


def test_sacct_view_of_the_record_keeps_slurm_tres(cluster):
    from batchd.slurm.tres import format_tres
    assert format_tres(SHARD2, 1.0, alphabetical=True) == "billing=1,gres/gpu=0.5,gres/shard=2,node=1"
    assert format_tres(MIG_RTX, 1.0, alphabetical=True) == "billing=1,gres/gpu:1g.24gb=1,gres/gpu=0.25,node=1"


def test_a_running_shard_job_counts_to_now(store):
    store.upsert_node(Node(name="mix01", state="IDLE", cpus=64, memory_mb=512000, gpus=GPUS, heartbeat=0.0))
    sql.add_prices(store, [make_price("gres/gpu:h200", "2.00", "EUR", "2026-01-01")])
    insert_running(store, 7, ts("2026-10-01T10:00"), "gres/shard=2", account="nb", node="mix01", charge=SHARD2)
    rep = build_report(store, start=int(ts("2026-10-01")), end=int(ts("2026-10-02")), now=ts("2026-10-01T13:00"))
    (row,) = rep["rows"]
    assert row["gpu_hours"] == 1.5 and row["cost"] == "3.00" and rep["reconciled"]


def test_a_shard_run_across_the_month_end(store):
    store.upsert_node(Node(name="mix01", state="IDLE", cpus=64, memory_mb=512000, gpus=GPUS, heartbeat=0.0))
    sql.add_prices(store, [make_price("gres/gpu:h200", "2.00", "EUR", "2026-01-01")])
    insert_usage(store, [usage(ts("2026-10-31T23:00"), ts("2026-11-01T02:00"), account="nb", tres=SHARD2,
                               node="mix01")])
    run_rollup(store, 0)
    oct_ = build_report(store, start=int(ts("2026-10-01")), end=int(ts("2026-11-01")), now=ts("2030-01-01"))
    nov = build_report(store, start=int(ts("2026-11-01")), end=int(ts("2026-12-01")), now=ts("2030-01-01"))
    assert (oct_["rows"][0]["cost"], nov["rows"][0]["cost"]) == ("1.00", "2.00")  # 1 h and 2 h of half a card
    assert oct_["rows"][0]["gpu_hours"] == 0.5 and nov["rows"][0]["gpu_hours"] == 1.0


def test_records_written_before_charges_keep_the_old_mig_rule(store):
    store.upsert_node(Node(name="mix01", state="IDLE", cpus=64, memory_mb=512000, gpus=GPUS, heartbeat=0.0))
    sql.add_prices(store, [make_price("gres/gpu", "1.40", "EUR", "2026-01-01")])
    d = ts("2026-10-01")
    insert_usage(store, [usage(d, d + 3600, tres={"gres/gpu": 1 / 7, "gres/gpu:1g.24gb": 1}, node="mix01")])
    run_rollup(store, 0)
    rep = _day(store)
    assert rep["totals"]["cost"] == "0.20" and rep["reconciled"]  # 1/7 x 1.40, as it was billed before
