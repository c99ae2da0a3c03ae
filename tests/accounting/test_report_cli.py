"""`batchd report/price/eff` and `sreport` end to end through the chargeback routes (the
socket replaced by a direct call into the handlers, as the daemon would make it)."""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
from acct_helpers import add_account, add_node, insert_running, insert_usage, ts, usage
from click.testing import CliRunner
from sqlalchemy import update

from batchd.accounting import routes
from batchd.accounting.efficiency import record_sample
from batchd.accounting.rollup import run_rollup
from batchd.cli import client
from batchd.cli import sreport as sreport_cli
from batchd.cli.cmd_eff import command as eff_cmd
from batchd.cli.cmd_price import command as price_cmd
from batchd.cli.cmd_report import command as report_cmd
from batchd.config import Config
from batchd.server.api import ROUTES as CORE_ROUTES
from batchd.server.service import Caller, Service
from batchd.store.tables import JobRow

H200 = {"cpu": 8, "mem": 65536, "node": 1, "gres/gpu": 2, "gres/gpu:h200": 2}


@pytest.fixture
def daemon(store, monkeypatch):
    os.environ.setdefault("TZ", "UTC")
    svc = Service(Config(path="test.toml", cluster_name="dev16"), store)
    caller = {"uid": 0}
    table = {**CORE_ROUTES, **routes.ROUTES}

    def request(method, path, body=None, query=None, timeout=60.0):
        q = {k: str(v) for k, v in (query or {}).items() if v not in (None, "")}
        try:
            return json.loads(json.dumps(table[(method, path)](svc, Caller(caller["uid"], 0), q, body)))
        except Exception as e:
            if hasattr(e, "envelope"):
                err = e.envelope()["error"]
                raise client.DaemonError(err["code"], err["message"], err["exit"], e.status) from None
            raise

    monkeypatch.setattr(client, "request", request)
    return svc, caller


def _setup(store):
    add_node(store, "gpu01", 4)
    add_account(store, "vision", 2)
    add_account(store, "nlp", 1)
    insert_usage(store, [
        usage(ts("2026-10-01T00:00"), ts("2026-10-01T05:00"), account="vision", user="alice", tres=H200,
              gpu_util_pct=80.0),
        usage(ts("2026-10-02T00:00"), ts("2026-10-02T02:00"), account="nlp", user="bob",
              tres={"cpu": 4, "mem": 8192, "node": 1, "gres/gpu": 1, "gres/gpu:h200": 1}, gpu_util_pct=20.0),
    ])
    run_rollup(store, 0)


def test_price_set_list_and_report_formats(daemon, store):
    _setup(store)
    r = CliRunner()
    res = r.invoke(price_cmd, ["set", "gres/gpu:h200", "2.50", "--currency", "EUR", "--from", "2026-01-01"])
    assert res.exit_code == 0, res.output
    assert r.invoke(price_cmd, ["set", "cpu", "0.01", "--currency", "EUR", "--from", "2026-01-01"]).exit_code == 0
    bad = r.invoke(price_cmd, ["set", "cpu", "0.02", "--currency", "USD", "--from", "2026-02-01"])
    assert bad.exit_code == 1 and "one currency" in bad.output
    out = r.invoke(price_cmd, ["list"]).output.splitlines()
    assert out[0].split() == ["TRES", "PER_HOUR", "CURRENCY", "VALID_FROM", "VALID_TO"]
    assert out[2].split() == ["gres/gpu:h200", "2.50", "EUR", "2026-01-01", "-"]

    js = json.loads(r.invoke(report_cmd, ["--month", "2026-10", "--json"]).output)
    vision = next(x for x in js["rows"] if x["account"] == "vision")
    # 5 h x 2 GPUs x 2.50 + 5 h x 8 CPUs x 0.01
    assert vision["cost"] == "25.40" and vision["gpu_efficiency_pct"] == 80.0
    assert js["totals"]["cost"] == "30.48" and js["reconciled"] and js["currency"] == "EUR"
    assert set(vision) >= {"account", "gpu_hours", "cpu_hours", "billing", "cost", "quota_gpu_hours",
                           "quota_used_pct", "borrowed_gpu_hours", "gpu_efficiency_pct"}

    table = r.invoke(report_cmd, ["--month", "2026-10"]).output
    assert "Reconciled: sum over rows 30.48 EUR = sum over jobs 30.48 EUR" in table
    assert table.splitlines()[0].split()[:2] == ["Account", "GPU-h"]

    rows = list(csv.reader(io.StringIO(r.invoke(report_cmd, ["--month", "2026-10", "--csv"]).output)))
    bill = rows[:rows.index([])]  # the bill, then the rate card after an empty line
    assert bill[0][0] == "Account" and bill[-1][0] == "TOTAL" and "30.48" in bill[-1]

    by = json.loads(r.invoke(report_cmd, ["--month", "2026-10", "--by", "user,gpu-type", "--json",
                                          "--account", "nlp"]).output)
    assert [(x["user"], x["gpu_type"], x["cost"]) for x in by["rows"]] == [("bob", "h200", "5.08")]

    html = r.invoke(report_cmd, ["--month", "2026-10", "--html"]).output
    assert html.startswith("<!DOCTYPE html>") and 'id="daily"' in html and 'class="bar"' in html
    assert "<h1>October 2026</h1>" in html and "cluster dev16" in html
    # the route added the users of each account (by_user=1), at the same clock as the bill
    assert "<h3>vision</h3>" in html and "<td>alice</td>" in html and "<td>bob</td>" in html
    assert "user_rows" not in r.invoke(report_cmd, ["--month", "2026-10", "--json"]).output
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_usage_errors(daemon, store):
    r = CliRunner()
    assert r.invoke(report_cmd, ["--month", "2026-13"]).exit_code == 2
    assert r.invoke(report_cmd, ["--month", "2026-10", "--start", "2026-10-01"]).exit_code == 2
    assert r.invoke(report_cmd, ["--by", "team"]).exit_code == 2
    daemon[1]["uid"] = 4242  # not an admin
    res = r.invoke(price_cmd, ["set", "cpu", "1", "--currency", "EUR", "--from", "2026-01-01"])
    assert res.exit_code == 1 and "administrator" in res.output


def test_eff_prints_seff_like_figures_and_zero_gpu_warning(daemon, store):
    insert_running(store, 42, ts("2026-10-01T00:00"), "cpu=4,mem=16G,node=1,billing=4,gres/gpu=1,gres/gpu:h200=1")
    for i, util in enumerate([0, 0, 0, 0, 0]):
        record_sample(store, 42, 0, {"time": ts("2026-10-01T00:00") + 1200 * i, "cpu_pct": 200.0,
                                     "rss_mb": 2048.0, "gpu_util_pct": float(util), "gpu_mem_mb": 100.0})
    out = CliRunner().invoke(eff_cmd, ["42"]).output
    assert "Job ID: 42" in out and "Cores: 4" in out
    assert "GPU Utilization: 0.0% average" in out
    assert "WARNING: the job held its GPUs at 0% for 01:20:00" in out
    rep = json.loads(CliRunner().invoke(report_cmd, ["--start", "2026-10-01", "--end", "2026-10-02",
                                                     "--json", "--zero-gpu", "1"]).output)
    assert [(f["job_id"], f["reason"]) for f in rep["flags"]] == [(42, "gpu_zero_util")]
    assert CliRunner().invoke(eff_cmd, ["999"]).exit_code == 1


def test_eff_of_an_array_task_is_that_task(daemon, store):
    # issue 15: `batchd eff 5_2` showed job 52 (int() reads "5_2" as 52)
    insert_running(store, 52, ts("2026-10-01T00:00"), "cpu=1,node=1,billing=1")
    insert_running(store, 57, ts("2026-10-01T00:00"), "cpu=8,node=1,billing=8")
    with store.tx() as s:
        s.execute(update(JobRow).where(JobRow.id == 57).values(array_job_id=5, array_task_id=2))
    out = CliRunner().invoke(eff_cmd, ["5_2"]).output
    assert "Job ID: 57" in out and "Cores: 8" in out
    assert "Job ID: 52" in CliRunner().invoke(eff_cmd, ["52"]).output
    bad = CliRunner().invoke(eff_cmd, ["5_x"])
    assert bad.exit_code == 1 and "Invalid job id: 5_x" in bad.output
    assert CliRunner().invoke(eff_cmd, ["5_9"]).exit_code == 1


def test_sreport_layouts(daemon, store, capsys):
    _setup(store)
    sreport_cli.main(["-t", "hours", "cluster", "AccountUtilizationByUser", "start=2026-10-01",
                      "end=2026-11-01", "-P"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "-" * 80
    assert out[1] == "Cluster/Account/User Utilization 2026-10-01T00:00:00 - 2026-10-31T23:59:59 (2678400 secs)"
    assert out[2] == "Usage reported in CPU Hours"
    assert out[4] == "Cluster|Account|Login|Proper Name|Used|Energy"
    assert out[5:] == ["dev16|root|||48|0", "dev16|nlp|||8|0", "dev16|nlp|bob||8|0",
                       "dev16|vision|||40|0", "dev16|vision|alice||40|0"]

    sreport_cli.main(["-t", "minutes", "-T", "billing,gres/gpu", "cluster", "AccountUtilizationByUser",
                      "start=2026-10-01", "end=2026-11-01", "-P", "Accounts=nlp"])
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "Usage reported in TRES Minutes"
    assert out[4] == "Cluster|Account|Login|Proper Name|TRES Name|Used"
    assert "dev16|nlp|bob||gres/gpu|120" in out and "dev16|nlp|bob||billing|120" in out

    sreport_cli.main(["-T", "gres/gpu", "-t", "hourper", "cluster", "Utilization", "start=2026-10-01",
                      "end=2026-10-02", "-P"])
    out = capsys.readouterr().out.splitlines()
    assert out[4] == "Cluster|Allocated|Down|PLND Down|Idle|Planned|Reported"
    assert out[5] == "dev16|10(10.42%)|0(0.00%)|0(0.00%)|86(89.58%)|0(0.00%)|96(100.00%)"

    sreport_cli.main(["user", "TopUsage", "start=2026-10-01", "end=2026-11-01", "-t", "hours", "-T", "gres/gpu"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("Top 10 Users 2026-10-01T00:00:00")
    assert out[4].split() == ["Cluster", "Login", "Proper", "Name", "Account", "Used", "Energy"]
    assert out[6].split() == ["dev16", "alice", "vision", "10", "0"]
    assert out[7].split() == ["dev16", "bob", "nlp", "2", "0"]
def test_sixteen_gpu_example_after_a_simulated_month_prints_a_bill_that_reconciles(daemon, store):
    from monthgen import month_records

    from batchd.config import EXAMPLE_CONFIG, load_config
    from batchd.model import Node

    cfg = load_config(str(EXAMPLE_CONFIG))
    for n in cfg.nodes:
        store.upsert_node(Node(name=n.name, state="IDLE", cpus=n.cpus, memory_mb=n.memory_mb,
                               gpus=n.gpus if isinstance(n.gpus, list) else [], heartbeat=0.0))
    for i, team in enumerate(["vision", "nlp", "speech", "robotics"]):
        add_account(store, team, (6, 4, 4, 2)[i])
    start, end = ts("2026-10-01"), ts("2026-11-01")
    recs = month_records(4000, start - 86400, int(end - start), gpu_types=("rtxpro6000", "rtxpro6000"),
                         accounts=4)
    for r in recs:
        r["account"] = ["vision", "nlp", "speech", "robotics"][int(r["account"][4:])]
    insert_usage(store, recs)
    r = CliRunner()
    for tres, price in [("gres/gpu:rtxpro6000", "1.20"), ("gres/gpu", "1.20"), ("cpu", "0.01")]:
        assert r.invoke(price_cmd, ["set", tres, price, "--currency", "EUR", "--from", "2026-01-01"]).exit_code == 0
    assert r.invoke(price_cmd, ["set", "gres/gpu:rtxpro6000", "1.40", "--currency", "EUR",
                                "--from", "2026-10-16"]).exit_code == 0
    half = run_rollup(store, 0, batch=1000)  # a rollup has run; later records are not rolled up yet
    assert half == 4000
    res = r.invoke(report_cmd, ["--month", "2026-10"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert [x.split()[0] for x in lines[2:6]] == ["nlp", "robotics", "speech", "vision"]
    assert lines[7].startswith("TOTAL")
    js = json.loads(r.invoke(report_cmd, ["--month", "2026-10", "--json"]).output)
    assert js["capacity_gpu_hours"] == 16 * 31 * 24
    assert abs(js["idle_gpu_hours"] + js["totals"]["gpu_hours"] - 16 * 31 * 24) < 1e-6 or \
        js["idle_gpu_hours"] > 16 * 31 * 24 - js["totals"]["gpu_hours"]  # idle never negative per hour
    assert f"Reconciled: sum over rows {js['totals']['cost']} EUR = sum over jobs {js['totals']['cost']} EUR" \
        in res.output


NOW = ts("2026-12-01T18:52")


def test_end_now_includes_the_current_partial_hour(daemon, store, monkeypatch):
    """`--end now` counts the open hour up to now: a run rolled up in it, one the rollup
    has not taken, and a RUNNING job; the rows reconcile with the jobs to the cent."""
    import datetime as dt
    import types

    from batchd.cli import cmd_report

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime.fromtimestamp(NOW, tz)

    monkeypatch.setattr(routes, "time", types.SimpleNamespace(time=lambda: NOW))  # the daemon's clock
    monkeypatch.setattr(cmd_report, "_dt", types.SimpleNamespace(datetime=Clock, UTC=dt.UTC))  # the CLI's
    add_node(store, "gpu01", 4)
    add_account(store, "vision", 2)
    one = {"cpu": 1, "node": 1, "gres/gpu": 1, "gres/gpu:h200": 1}
    insert_usage(store, [usage(ts("2026-12-01T17:00"), ts("2026-12-01T18:00"), account="vision", tres=one),
                         usage(ts("2026-12-01T18:10"), ts("2026-12-01T18:40"), account="vision", tres=one)])
    run_rollup(store, NOW)
    insert_usage(store, [usage(ts("2026-12-01T18:20"), ts("2026-12-01T18:50"), account="vision", tres=one)])
    insert_running(store, 77, ts("2026-12-01T18:30"), "cpu=1,node=1,gres/gpu=1,gres/gpu:h200=1", account="vision")
    r = CliRunner()
    assert r.invoke(price_cmd, ["set", "gres/gpu:h200", "2.50", "--currency", "EUR", "--from", "2026-01-01"]).exit_code == 0
    want_h = 1 + 0.5 + 0.5 + 22 / 60
    for args in (["--start", "2026-12-01", "--end", "now"], ["--end", "now"]):
        res = r.invoke(report_cmd, [*args, "--json"])
        assert res.exit_code == 0, res.output
        js = json.loads(res.output)
        (row,) = js["rows"]
        assert abs(row["gpu_hours"] - want_h) < 1e-6, js
        assert js["totals"]["cost"] == js["jobs_cost"] == "5.92" and js["reconciled"]  # 2.3667 h x 2.50
        assert js["period"] == {"start": ts("2026-12-01"), "end": NOW, "upto": NOW, "tz": "UTC"}
        assert js["running_included"] == 2
        assert abs(js["capacity_gpu_hours"] - 4 * (18 + 52 / 60)) < 1e-6
        assert abs(js["idle_gpu_hours"] - (4 * (18 + 52 / 60) - want_h)) < 1e-6
        assert abs(row["quota_gpu_hours"] - 2 * (18 + 52 / 60)) < 1e-6
    table = r.invoke(report_cmd, ["--start", "2026-12-01", "--end", "now"]).output
    assert "Period: 2026-12-01T00:00:00 - 2026-12-01T18:52:00 UTC" in table
    # an end already passed is still rounded down to its hour, as sreport does
    js = json.loads(r.invoke(report_cmd, ["--start", "2026-12-01", "--end", "2026-12-01T18:30", "--json"]).output)
    assert js["rows"][0]["gpu_hours"] == 1.0 and js["period"]["end"] == ts("2026-12-01T18:00")


def test_percentages_say_they_are_percentages(daemon, store):
    """Table and HTML print "80.0%"; the CSV keeps plain numbers under "... (%)"; the
    JSON keeps its field names."""
    _setup(store)
    r = CliRunner()
    table = r.invoke(report_cmd, ["--month", "2026-10"]).output.splitlines()
    head = table[0]
    assert "Quota used" in head and "GPU eff" in head and "%" not in head
    vision = next(x for x in table if x.startswith("vision"))
    # 10 of 2 x 744 GPU-h; borrowed and lent 0; 80 % busy
    assert vision.split()[-5:] == ["1,488.00", "0.7%", "0.00", "0.00", "80.0%"]
    rows = list(csv.reader(io.StringIO(r.invoke(report_cmd, ["--month", "2026-10", "--csv"]).output)))
    cols = dict(zip(rows[0], next(x for x in rows if x[0] == "vision"), strict=True))
    assert cols["Quota used (%)"] == "0.67" and cols["GPU eff (%)"] == "80.0"
    js = json.loads(r.invoke(report_cmd, ["--month", "2026-10", "--json"]).output)
    v = next(x for x in js["rows"] if x["account"] == "vision")
    assert v["quota_used_pct"] == 0.67 and v["gpu_efficiency_pct"] == 80.0
    html = r.invoke(report_cmd, ["--month", "2026-10", "--html"]).output
    assert '<th scope="col">Quota used</th>' in html and '<td class="n">80.0%</td>' in html


def test_csv_carries_period_and_currency_and_every_format_shows_the_rate_card(daemon, store):
    """The prices in force in October only: one ended in September, one superseded
    before October and one starting in November are not on the card."""
    _setup(store)
    r = CliRunner()
    for args in (["gres/gpu:h200", "2.00", "--from", "2025-01-01"],   # superseded by 2.50 from 2026-01-01
                 ["gres/gpu:h200", "2.50", "--from", "2026-01-01"],
                 ["gres/gpu:h200", "3.00", "--from", "2026-10-16"],
                 ["cpu", "0.01", "--from", "2026-01-01", "--to", "2026-09-30"],  # ends before October
                 ["gres/gpu", "1.00", "--from", "2026-11-01"]):                  # starts after it
        res = r.invoke(price_cmd, ["set", *args, "--currency", "EUR"])
        assert res.exit_code == 0, res.output
    js = json.loads(r.invoke(report_cmd, ["--month", "2026-10", "--json"]).output)
    assert js["rate_card"] == [
        {"tres": "gres/gpu:h200", "per_hour": "2.50", "currency": "EUR", "valid_from": ts("2026-01-01"),
         "valid_to": None, "applied_from": ts("2026-10-01"), "applied_to": ts("2026-10-16")},
        {"tres": "gres/gpu:h200", "per_hour": "3.00", "currency": "EUR", "valid_from": ts("2026-10-16"),
         "valid_to": None, "applied_from": ts("2026-10-16"), "applied_to": ts("2026-11-01")}]
    assert js["totals"]["cost"] == "30.00" and js["reconciled"]  # (10 + 2) GPU-h x 2.50, all before the 16th

    rows = list(csv.reader(io.StringIO(r.invoke(report_cmd, ["--month", "2026-10", "--csv"]).output)))
    gap = rows.index([])
    head, bill, card = rows[0], rows[1:gap], rows[gap + 1:]
    assert head[-4:] == ["period_start", "period_end", "counted_up_to", "currency"]
    assert [x[0] for x in bill] == ["nlp", "vision", "TOTAL"]
    for line in bill:
        assert len(line) == len(head)
        assert line[-4:] == ["2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z", "EUR"]
    assert card == [["tres", "per_hour", "currency", "valid_from", "valid_to", "applied_from", "applied_to"],
                    ["gres/gpu:h200", "2.50", "EUR", "2026-01-01T00:00:00Z", "", "2026-10-01T00:00:00Z",
                     "2026-10-16T00:00:00Z"],
                    ["gres/gpu:h200", "3.00", "EUR", "2026-10-16T00:00:00Z", "", "2026-10-16T00:00:00Z",
                     "2026-11-01T00:00:00Z"]]

    table = r.invoke(report_cmd, ["--month", "2026-10"]).output.splitlines()
    at = next(i for i, x in enumerate(table) if x.startswith("Rate card (per unit-hour"))
    assert [x.split()[:6] for x in table[at + 1:at + 3]] == [
        ["gres/gpu:h200", "2.50", "EUR", "valid", "from", "2026-01-01"],
        ["gres/gpu:h200", "3.00", "EUR", "valid", "from", "2026-10-16"]]
    assert table[at + 1].split()[-4:] == ["applied", "2026-10-01", "-", "2026-10-16"]
    html = r.invoke(report_cmd, ["--month", "2026-10", "--html"]).output
    assert ('<tr><td>gres/gpu:h200</td><td class="n">3.00 per GPU-hour</td><td>EUR</td><td class="d">2026-10-16</td>'
            '<td class="d">open-ended</td><td>16–31 October 2026</td></tr>') in html



def test_tz_and_a_non_admin_through_the_cli(daemon, store):
    """--tz cuts the month in the zone and the table prints its period there; a user who
    is not an administrator (nobody, in nlp only) sees nlp's row, is refused vision, and
    gets no idle capacity."""
    _setup(store)
    r = CliRunner()
    js = json.loads(r.invoke(report_cmd, ["--month", "2026-10", "--tz", "Europe/Berlin", "--json"]).output)
    assert js["period"]["tz"] == "Europe/Berlin" and js["period"]["start"] == ts("2026-09-30T22:00")
    table = r.invoke(report_cmd, ["--month", "2026-10", "--tz", "Europe/Berlin"]).output
    assert "Period: 2026-10-01T00:00:00 - 2026-11-01T00:00:00 Europe/Berlin" in table
    svc, caller = daemon
    store.put_association("nobody", "nlp")
    caller["uid"] = 65534
    js = json.loads(r.invoke(report_cmd, ["--month", "2026-10", "--json"]).output)
    assert [x["account"] for x in js["rows"]] == ["nlp"] and js["idle_gpu_hours"] is None
    res = r.invoke(report_cmd, ["--month", "2026-10", "--account", "vision"])
    assert res.exit_code == 1
    assert "batchd report: error: Access/permission denied: user nobody is not a member of account vision" in (
        res.output + (res.stderr if res.stderr_bytes is not None else ""))
    assert "administrators only" in r.invoke(report_cmd, ["--month", "2026-10"]).output
    assert "Idle GPU capacity</dt><dd>shown to administrators only" in r.invoke(
        report_cmd, ["--month", "2026-10", "--html"]).output
