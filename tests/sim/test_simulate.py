"""batchd.sim on crafted traces whose every figure is computed by hand: the event loop's
arithmetic (starts, ends, reclaim with its grace time, checkpoints, time limits, gangs)
and each measure (waits, GPU-hours, utilisation, borrowed and lent, reclaim latency,
quota served, Jain's index)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchd.priority import job_priorities
from batchd.scheduler import load_snapshot
from batchd.sim.engine import from_files
from batchd.sim.measures import measure, pct
from batchd.sim.trace import TraceJob, read_alibaba, read_csv, transform

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "sim"
CLUSTER, ACCOUNTS = str(FIX / "cluster.toml"), str(FIX / "accounts.toml")
BATCHD = str(Path(sys.executable).parent / "batchd")


def job(i, submit, duration, gpus, team, user, **kw):
    return TraceJob(id=i, submit_s=submit, duration_s=duration, gpus=gpus, team=team, user=user, **kw)


def run(trace, cluster=CLUSTER, **kw):
    sim = from_files(cluster, ACCOUNTS, trace, **kw)
    res = sim.run(trace)
    return res, {j.t.id: j for j in res.jobs}, measure(res)


def test_no_contention():
    res, jobs, m = run([job(1, 0, 100, 1, "A", "alice"), job(2, 0, 50, 2, "B", "bob")])
    assert [(j.first_start, j.end, j.state) for j in jobs.values()] == [(0, 100, "COMPLETED"), (0, 50, "COMPLETED")]
    assert m["teams"]["A"]["gpu_hours"] == round(100 / 3600, 3) and m["teams"]["B"]["gpu_hours"] == round(100 / 3600, 3)
    assert m["cluster"]["utilisation"] == 0.5  # (1*100 + 2*50) / (4 GPUs * 100 s)
    assert m["teams"]["A"]["borrowed_gpu_hours"] == 0 and m["cluster"]["preemptions"] == 0
    assert m["teams"]["A"]["wait_s"]["median"] == 0 and m["teams"]["B"]["completion_s"]["median"] == 50


def test_reclaim_with_grace_and_a_checkpoint_that_was_not_reached():
    res, jobs, m = run([job(1, 0, 1000, 4, "A", "alice", checkpoint_s=100), job(2, 50, 100, 2, "B", "bob")])
    a, b = jobs[1], jobs[2]
    # at 50 B's job is within B's quota and finds no card: A's job is reclaimed, ends 10 s
    # later (grace), B's starts on its cards; A's is requeued as the daemon requeues (held
    # for REQUEUE_HOLD_S, to 180) and starts again then, from the start
    assert b.first_start == 60 and b.end == 160
    assert a.runs == [(0, 60, 4.0), (180, 1180, 4.0)] and a.end == 1180 and a.preemptions == 1
    assert a.lost_gpu_s == 60 * 4  # 60 s worked, the first checkpoint at 100 s
    ta, tb = m["teams"]["A"], m["teams"]["B"]
    assert ta["borrowed_gpu_hours"] == round((60 * 2 + 1000 * 2) / 3600, 3)
    assert tb["lent_gpu_hours"] == round((60 * 2 + 1000 * 2) / 3600, 3)
    assert tb["reclaim_latency_s"] == {"jobs": 1, "median": 10, "p90": 10}
    assert tb["quota_served"] == round(100 / 110, 4)
    assert ta["quota_served"] == round((60 + 1000) / 1180, 4)
    assert ta["lost_gpu_hours"] == round(240 / 3600, 3) and ta["preemptions"] == 1
    # Jain's index over GPU-hours per quota GPU: A 4240 GPU-s / 2, B 200 / 2
    xa, xb = 4240 / 3600 / 2, 200 / 3600 / 2
    assert m["cluster"]["jain_index"] == round((xa + xb) ** 2 / (2 * (xa * xa + xb * xb)), 4)


def test_a_checkpoint_keeps_the_work_up_to_it():
    res, jobs, m = run([job(1, 0, 1000, 4, "A", "alice", checkpoint_s=25), job(2, 50, 100, 2, "B", "bob")])
    a = jobs[1]
    assert a.lost_gpu_s == (60 - 50) * 4  # checkpoints at 25 and 50: 50 s kept
    assert a.runs == [(0, 60, 4.0), (180, 1130, 4.0)]  # 950 s left to run
    # the run's option stands in for a job without its own interval; the job's own wins
    res, jobs, m = run([job(1, 0, 1000, 4, "A", "alice"), job(2, 50, 100, 2, "B", "bob")], checkpoint_s=20)
    assert jobs[1].lost_gpu_s == 0 and jobs[1].runs[1] == (180, 1120, 4.0)
    # a QOS's interval (the jobs' QOS here: normal, the config's) comes between the two
    trace = [job(1, 0, 1000, 4, "A", "alice"), job(2, 50, 100, 2, "B", "bob")]
    res, jobs, m = run(trace, checkpoint_s=20, qos_checkpoint_s={"normal": 25})
    assert jobs[1].lost_gpu_s == 10 * 4 and jobs[1].runs[1] == (180, 1130, 4.0)
    res, jobs, m = run(trace, checkpoint_s=20, qos_checkpoint_s={"normal": 0})  # 0: its jobs start over
    assert jobs[1].lost_gpu_s == 60 * 4 and jobs[1].runs[1] == (180, 1180, 4.0)
    res, jobs, m = run([job(1, 0, 1000, 4, "A", "alice", checkpoint_s=30), trace[1]], qos_checkpoint_s={"normal": 25})
    assert jobs[1].lost_gpu_s == 0  # the job's own 30 s: 60 s kept
    with pytest.raises(ValueError, match="no QOS named gold in"):
        run(trace, qos_checkpoint_s={"gold": 60})


def test_the_requeue_hold_off_is_the_daemons():
    from batchd.node.runs import REQUEUE_HOLD_S as daemon
    from batchd.sim.engine import REQUEUE_HOLD_S as sim
    assert sim == daemon


def test_time_limit_and_gang():
    res, jobs, m = run([job(1, 0, 100, 1, "A", "alice", time_limit_s=30), job(2, 0, 10, 3, "A", "alice")])
    assert (jobs[1].state, jobs[1].end) == ("TIMEOUT", 30)
    assert jobs[2].state == "COMPLETED" and jobs[2].first_start == 0
    assert set(jobs[2].runs[0][2:]) == {3.0} and len(next(iter([jobs[2]])).alloc) == 2  # 3 GPUs: 2 nodes
    assert m["teams"]["A"]["timeouts"] == 1


def test_percentiles_are_nearest_rank():
    assert pct([], 50) is None
    assert pct([5, 1, 3], 50) == 3 and pct([1, 2, 3, 4], 50) == 2 and pct(list(range(1, 101)), 99) == 99


def test_traces(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("submit_s,duration_s,gpus,team,user,checkpoint_s\n10,5,1.5,A,alice,\n0,7,1,,,60\n")
    t = read_csv(p)
    assert [(j.id, j.submit_s, j.gpus, j.team, j.checkpoint_s) for j in t.jobs] == [
        (1, 0, 1, "default", 60), (2, 10, 2, "A", 0)]
    bad = tmp_path / "bad.csv"
    bad.write_text("submit_s,duration_s\n1,2\n")
    with pytest.raises(ValueError, match="lacks gpus"):
        read_csv(bad)
    bad.write_text("submit_s,duration_s,gpus\n1,-2,1\n")
    with pytest.raises(ValueError, match="duration_s: must be a number >= 0"):
        read_csv(bad)
    s = transform(t, scale=10)
    assert [(j.submit_s, j.duration_s, j.checkpoint_s) for j in s.jobs] == [(0, 0.7, 6), (1, 0.5, 0)]
    assert len(transform(t, load=2).jobs) == 4 and len(transform(t, load=3).jobs) == 6
    alibaba = tmp_path / "a.csv"
    alibaba.write_text(
        "job_id,submit_time_s,duration_s,gpus,gpu_milli,gpu_type,gpu_type_aug33,user,team,qos,cpu_milli,memory_mib,"
        "start_time_s,end_time_s,queue_delay_s,final_phase\n"
        "p0,0,100,1,1000,,,,,LS,1,1,0,100,0,Succeeded\n"
        "p1,5,50,2,1000,,,,,BE,1,1,6,56,1,Succeeded\n"
        "p2,6,,1,500,,,,,BE,1,1,,,,Pending\n"
        "p3,7,10,0,0,,,,,BE,1,1,7,17,0,Succeeded\n")
    a = read_alibaba(alibaba, "qos:LS=serving,*=training")
    assert [(j.name, j.team, j.gpus) for j in a.jobs] == [("p0", "serving", 1), ("p1", "training", 2)]
    assert a.skipped == 2 and "QoS" in a.rule
    h = read_alibaba(alibaba, "hash:x=1,y=1", seed=3)
    assert {j.team for j in h.jobs} <= {"x", "y"} and h.jobs == read_alibaba(alibaba, "hash:x=1,y=1", seed=3).jobs


def test_the_command(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("submit_s,duration_s,gpus,team,user\n0,1000,4,A,alice\n50,100,2,B,bob\n")
    out = subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--accounts",
                          ACCOUNTS, "--trace", str(p), "--json"], capture_output=True, text=True, check=True).stdout
    m = json.loads(out)
    assert m["teams"]["B"]["reclaim_latency_s"]["median"] == 10 and m["cluster"]["preemptions"] == 1
    text = subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--accounts",
                           ACCOUNTS, "--trace", str(p)], capture_output=True, text=True, check=True).stdout
    assert "RECLAIM p50" in text and "\nB " in text
    fast = subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--accounts", ACCOUNTS, "--trace", str(p),
                           "--json", "--speedup"], capture_output=True, text=True, check=True)
    fm = json.loads(fast.stdout)
    # the trace spans its first submission to its last end: 0 to 1000 s of work, B's 100 s after reclaim
    span, wall = fm["cluster"]["span_s"], fm["settings"]["wall_s"]
    assert span == m["cluster"]["span_s"] > 1000
    # wall_s is rounded to the millisecond, the speed-up computed before that rounding
    assert span / (wall + 0.0006) <= fm["settings"]["speedup"] <= span / max(wall - 0.0006, 1e-9)
    assert fast.stderr.startswith(f"batchd simulate: policy batchd: {span / 86400:.2f} virtual days in ")
    assert "cycles): speed-up " in fast.stderr and fast.stderr.rstrip().endswith("x real time")
    assert "speedup" not in m["settings"]
    for spec, why in (("normal=-1", "'normal=-1': expected QOS=SECONDS, SECONDS >= 0"),
                      ("normal", "'normal': expected QOS=SECONDS"), ("gold=60", "no QOS named gold in ")):
        bad = subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--trace", str(p), "--qos-checkpoint", spec],
                             capture_output=True, text=True)
        assert bad.returncode == 1 and bad.stderr.startswith(f"batchd simulate: error: --qos-checkpoint: {why}")
    text = subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--accounts", ACCOUNTS, "--trace", str(p),
                           "--qos-checkpoint", "normal=5"], capture_output=True, text=True, check=True).stdout
    assert "checkpoint 0s; per QOS normal 5s" in text.splitlines()[0]
    bad = subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--trace",
                          str(p), "--format", "alibaba"], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("batchd simulate: error: --format alibaba needs --teams")
    bad = subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--trace", str(p), "--start", "2026-01-01T00:30"],
                         capture_output=True, text=True)
    assert (bad.returncode, bad.stderr) == (1, "batchd simulate: error: --start: '2026-01-01T00:30' is not a date "
                                                "(YYYY-MM-DD) or a datetime on a whole hour (UTC)\n")


def test_policies_side_by_side():
    trace = [job(1, 0, 1000, 4, "A", "alice"), job(2, 50, 100, 2, "B", "bob")]
    by = {}
    for name in ("batchd", "static", "fifo", "kueue"):
        sim = from_files(CLUSTER, ACCOUNTS, trace, design=name)
        res = sim.run(trace)
        by[name] = ({j.t.id: j for j in res.jobs}, measure(res))
    # static: A never exceeds its quota of 2, so its 4-GPU job never starts; B is never kept waiting
    jobs, m = by["static"]
    assert jobs[1].first_start is None and jobs[2].first_start == 50 and m["cluster"]["preemptions"] == 0
    assert m["teams"]["A"]["borrowed_gpu_hours"] == 0
    # fifo: no reclaim: B waits for A's job to end
    jobs, m = by["fifo"]
    assert jobs[2].first_start == 1000 and m["cluster"]["preemptions"] == 0
    assert m["teams"]["B"]["reclaim_latency_s"]["median"] == 950  # the measures keep the file's quotas
    # kueue: B may lend at most half its quota (1 GPU), so A's 4-GPU job cannot borrow B's 2
    jobs, m = by["kueue"]
    assert jobs[1].first_start is None or jobs[1].first_start >= 150
    assert by["batchd"][0][2].first_start == 60  # reclaimed, as in the case above
    from batchd.sim.policies import apply_policy
    accts = [{"name": "root", "parent": None, "resources": {}},
             {"name": "T", "parent": "root", "resources": {"gres/gpu": {"quota": 4, "limit": -1,
                                                                          "over_quota_weight": 3}}}]
    k, _u, _p, _m = apply_policy("kueue", accts, [], {}, 0.25)
    assert k[1]["resources"]["gres/gpu"] == {"quota": 4, "limit": -1, "over_quota_weight": 1, "lending_limit": 1.0}
    with pytest.raises(ValueError, match="unknown policy"):
        apply_policy("nope", accts, [], {})


CHROMIUM = __import__("shutil").which("chromium") or "/usr/bin/chromium"


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium (apt-get install -y chromium)")
def test_the_html_page_in_chromium(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("submit_s,duration_s,gpus,team,user\n0,1000,4,A,alice\n50,100,2,B,bob\n100,300,1,B,bob\n")
    page = tmp_path / "sim.html"
    subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--accounts", ACCOUNTS, "--trace", str(p), "--compare",
                    "--html", "-o", str(page)], check=True, capture_output=True)
    js = json.loads(subprocess.run([BATCHD, "simulate", "--config", CLUSTER, "--accounts", ACCOUNTS, "--trace", str(p),
                                    "--compare", "--json"], check=True, capture_output=True, text=True).stdout)
    text = page.read_text()
    assert "<script" not in text and "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--proxy-server=127.0.0.1:9", "--disable-background-networking"]  # nothing may load from the network
    shot = tmp_path / "sim.png"
    subprocess.run([*base, "--force-device-scale-factor=1", f"--screenshot={shot}", "--window-size=1100,3000",
                    page.as_uri()], capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    import re
    rows = re.findall(r"<tr><td>(\w+)</td><td>(\w+)</td><td>[^<]*</td><td>[^<]*</td><td>([0-9.]+)</td>"
                      r"<td>(\d+)</td>", dom.split('id="compare"')[1].split("</table>")[0])
    assert len(rows) == 4 * 2  # every policy, every team
    for policy, team, gpu_h, preempt in rows:
        r = js[policy]["teams"][team]
        assert float(gpu_h) == pytest.approx(r["gpu_hours"], abs=0.05) and int(preempt) == r["preemptions"]
    for policy in js:
        assert f'id="policy-{policy}"' in dom
    assert dom.count("<polygon") >= 4 and dom.count("<polyline") >= 4  # the charts of every policy


def test_history_from_sacct_json(tmp_path):
    from batchd.sim.trace import read_sacct_json

    # a real Slurm's reply of the same shape (slurmdbd v0.0.38, recorded): one job pending,
    # one running when recorded (Slurm gives both an end time): neither is history yet
    real = read_sacct_json(FIX.parent / "slurmrestd" / "real-db-jobs.json")
    assert real.jobs == [] and real.skipped == 2
    # batchd's own sacct --json, as the command writes it
    p = tmp_path / "h.json"
    p.write_text(json.dumps({"jobs": [
        {"job_id": 7, "account": "A", "user": "alice", "qos": "normal", "state": {"current": "COMPLETED"},
         "time": {"submission": 100, "start": 110, "end": 410, "limit": 10},
         "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 2}], "requested": []}},
        {"job_id": 8, "account": "B", "user": "bob", "time": {"submission": 50, "start": 0, "end": 0},
         "tres": {"allocated": [], "requested": [{"type": "gres", "name": "gpu", "count": 1}]}}]}))
    t = read_sacct_json(p)
    assert [(j.name, j.submit_s, j.duration_s, j.gpus, j.team, j.user, j.time_limit_s) for j in t.jobs] == [
        ("7", 100, 300, 2, "A", "alice", 600)]
    assert t.skipped == 1
    res, jobs, m = run(t.jobs)
    assert m["teams"]["A"]["gpu_hours"] == round(600 / 3600, 3)
    with pytest.raises(ValueError, match="no \"jobs\" list"):
        bad = tmp_path / "bad.json"
        bad.write_text("{}")
        read_sacct_json(bad)


def test_the_bill_prices_each_run_by_the_rate_card(tmp_path):
    """Each run is priced as `batchd report` prices a usage record: its charged TRES by the
    accounts file's [[price]], hour by hour (a new price from 01:00 applies from then on)."""
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(Path(ACCOUNTS).read_text() + """
[[price]]
tres = "gres/gpu:t4"
per_hour = "1.00"
currency = "EUR"
valid_from = "2026-01-01"
[[price]]
tres = "gres/gpu:t4"
per_hour = "2.00"
currency = "EUR"
valid_from = "2026-01-01T01:00:00Z"
[[price]]
tres = "cpu"
per_hour = "0.36"
currency = "EUR"
valid_from = "2026-01-01"
""")
    trace = [job(1, 0, 5400, 1, "A", "alice"), job(2, 0, 1800, 2, "B", "bob")]
    sim = from_files(CLUSTER, str(accounts), trace)
    res = sim.run(trace)
    midnight = 1767225600  # 2026-01-01T00:00:00Z
    m = measure(res, start_epoch=midnight)
    # A: 1 card 1 h at 1.00 + 0.5 h at 2.00, 1 CPU 1.5 h at 0.36; B: 2 cards 0.5 h at 1.00, 1 CPU 0.5 h
    assert (m["teams"]["A"]["bill"], m["teams"]["B"]["bill"]) == ("2.54", "1.18")
    assert m["cluster"]["bill"] == {"currency": "EUR", "start_epoch": midnight, "total": "3.72"}
    # by default virtual second 0 is the latest price's start: today's prices throughout
    m = measure(res)
    assert (m["teams"]["A"]["bill"], m["teams"]["B"]["bill"]) == ("3.54", "2.18")
    assert measure(run(trace)[0])["cluster"].get("bill") is None  # no rate card, no bill


def test_a_job_over_its_accounts_limit_never_runs_and_asks_for_nothing(tmp_path):
    """B may hold 2 cards: its 3-card job pends for ever, is counted as never runnable, and
    B's demand (and so its quota served) leaves it out; --skip drops the first jobs."""
    res, jobs, m = run([job(1, 0, 100, 3, "B", "bob"), job(2, 10, 100, 1, "B", "bob")])
    assert jobs[1].first_start is None and jobs[1].never and not jobs[2].never
    assert m["teams"]["B"]["never_runnable"] == 1 and m["cluster"]["never_runnable"] == 1
    assert m["teams"]["B"]["quota_served"] == 1.0  # it held all it could ask for
    p = tmp_path / "t.csv"
    p.write_text("submit_s,duration_s,gpus,team\n100,5,1,A\n150,5,1,A\n400,5,1,A\n")
    t = transform(read_csv(p), skip_s=50)
    assert [(j.submit_s, j.id) for j in t.jobs] == [(0, 1), (250, 2)] and t.skipped == 1



def test_cached_entries_are_what_the_job_shows(monkeypatch):
    """The simulator rebuilds a job's snapshot entry only where something it shows changed
    (a start, a preemption, a requeue, the end of a hold-off); every cycle of a contended
    trace with reclaims and requeues, each entry it hands out equals one built afresh, and the
    parse it keeps of it (`SimJob.spec`) equals that of a whole snapshot loaded afresh."""
    import random

    from batchd.sim import engine

    rnd = random.Random(5)
    trace = [job(i + 1, rnd.uniform(0, 3000), rnd.uniform(20, 900), rnd.choice([1, 1, 2, 4]),
                 rnd.choice(["A", "B"]), rnd.choice(["alice", "bob", "carol"]), checkpoint_s=rnd.choice([0, 60]))
             for i in range(600)]
    trace.sort(key=lambda t: t.submit_s)
    trace = [TraceJob(id=i + 1, submit_s=t.submit_s, duration_s=t.duration_s, gpus=t.gpus, team=t.team,
                      user=t.user, checkpoint_s=t.checkpoint_s) for i, t in enumerate(trace)]
    orig = engine.decide
    seen = {"checked": 0, "held": 0, "cycles": 0}
    sims = []
    orig_cycle = engine.Simulation._cycle

    def cycle(self, *a, **k):
        sims[:] = [self]
        return orig_cycle(self, *a, **k)

    def checked(loaded, **kw):
        # every job the cycle decides on: its entry as built afresh, parsed as a whole
        # snapshot of those entries parses it, with the priorities computed from them
        sim = sims[0]
        fresh = load_snapshot({**loaded.raw, "jobs": [sim._entry(sim._jobs[sp.id]) for sp in loaded.jobs]})
        assert [sp.raw for sp in loaded.jobs] == fresh.raw["jobs"]
        assert loaded.jobs == fresh.jobs
        assert loaded.raw["jobs"] == [sp.raw for sp in loaded.jobs]
        if seen["cycles"] % 3 == 0:  # (one cycle in three: computed afresh, they take long)
            assert loaded.raw["priorities"] == job_priorities(fresh.raw)
        else:
            assert set(loaded.raw["priorities"]) == {str(sp.id) for sp in loaded.jobs}
        seen["cycles"] += 1
        seen["checked"] += len(loaded.jobs)
        seen["held"] += sum(sp.raw.get("reason") == "BeginTime" for sp in loaded.jobs)
        return orig(loaded, **kw)

    monkeypatch.setattr(engine, "decide", checked)
    monkeypatch.setattr(engine.Simulation, "_cycle", cycle)
    res, jobs, m = run(trace)
    assert m["cluster"]["preemptions"] > 0 and seen["held"] > 0 and seen["checked"] > 1000


def test_a_budget_holds_new_starts_once_used_up(tmp_path):
    """GrpTRESMins as the controller counts it (batchd.accounting.budget): B's budget of 90
    GPU-minutes. Its first job (1 GPU, 0 to 3600 s) uses 60 by its end; the second (1 GPU,
    from 3600 s) has used 30 more by 5400 s. A third job submitted at 6000 s pends
    (AssocGrpGRESMinutes) for ever: the period is `none`. With a budget of 200 it runs at once."""
    def accounts(mins: int) -> str:
        text = Path(ACCOUNTS).read_text()
        return text.replace('name = "B"\nusers = ["bob"]\n',
                            f'name = "B"\nusers = ["bob"]\n[account.policy]\n'
                            f'grp_tres_mins = {{ "gres/gpu" = {mins} }}\nbudget_period = "none"\n', 1)

    trace = [job(1, 0, 3600, 1, "B", "bob"), job(2, 3600, 3600, 1, "B", "bob"), job(3, 6000, 600, 1, "B", "bob")]
    out = {}
    for mins in (90, 200):
        p = tmp_path / f"accounts-{mins}.toml"
        p.write_text(accounts(mins))
        assert "grp_tres_mins" in p.read_text()
        sim = from_files(CLUSTER, str(p), trace)
        res = sim.run(trace)
        out[mins] = {j.t.id: j for j in res.jobs}
    held = out[90]
    assert held[1].first_start == 0 and held[2].first_start == 3600  # 60 minutes used at 3600: under 90
    assert held[3].state == "PENDING" and held[3].first_start is None
    assert out[200][3].first_start == 6000 and out[200][3].state == "COMPLETED"


MIG_CLUSTER = str(FIX / "cluster-mig.toml")


def test_mig_instances_count_their_card_share_and_wait_for_an_instance_of_their_profile():
    trace = [job(1, 0, 100, 1, "A", "alice", gres="gpu:1g.24gb:4"),   # every 1g.24gb there is
             job(2, 0, 50, 1, "A", "alice", gres="gpu:1g.24gb:1"),    # none left: waits for job 1
             job(3, 0, 100, 1, "B", "bob", gres="gpu:3g.71gb:2"),     # 2 x 3/7 of the H200
             job(4, 0, 10, 1, "B", "bob", gres="gpu:1g.18gb:2")]      # the cluster has one such instance
    res, jobs, m = run(trace, cluster=MIG_CLUSTER)
    assert [(j.req_key, j.req_n, j.demand) for j in jobs.values()] == [
        ("gres/gpu:1g.24gb", 4, 1.0), ("gres/gpu:1g.24gb", 1, 0.25), ("gres/gpu:3g.71gb", 2, 6 / 7),
        ("gres/gpu:1g.18gb", 2, 2 / 7)]
    assert jobs[1].runs == [(0, 100, 1.0)] and jobs[3].runs == [(0, 100, pytest.approx(6 / 7))]
    assert jobs[2].runs == [(100, 150, 0.25)] and jobs[2].first_start - jobs[2].t.submit_s == 100
    assert jobs[4].never and jobs[4].runs == [] and m["teams"]["B"]["never_runnable"] == 1
    assert m["teams"]["A"]["gpu_hours"] == round((100 * 1.0 + 50 * 0.25) / 3600, 3)
    assert m["teams"]["B"]["gpu_hours"] == round(100 * 6 / 7 / 3600, 3)
    # utilisation: card shares over the 4 cards (two split in instances, two whole), 150 s
    assert m["cluster"]["utilisation"] == round((100 + 12.5 + 100 * 6 / 7) / (4 * 150), 4)


def test_shards_and_a_share_of_a_card_on_a_cluster_with_shards_and_without():
    trace = [job(1, 0, 100, 1, "A", "alice", gres="shard:4"),          # a whole card's 4 shards
             job(2, 0, 100, 1, "A", "alice", gpu_fraction=0.3),        # 0.3 of a card: 2 of its 4 shards
             job(3, 0, 50, 1, "B", "bob", gres="shard:2"),             # the last 2 of the 8
             job(4, 10, 30, 1, "B", "bob", gres="shard:1")]            # waits for job 3's
    res, jobs, m = run(trace, cluster=MIG_CLUSTER)
    assert [(j.req_key, j.req_n, j.demand) for j in jobs.values()] == [
        ("gres/shard", 4, 1.0), ("gres/shard", 2, 0.5), ("gres/shard", 2, 0.5), ("gres/shard", 1, 0.25)]
    assert [j.runs for j in jobs.values()] == [[(0, 100, 1.0)], [(0, 100, 0.5)], [(0, 50, 0.5)], [(50, 80, 0.25)]]
    assert jobs[4].first_start - jobs[4].t.submit_s == 40 and m["teams"]["B"]["wait_s"]["p90"] == 40
    assert m["teams"]["A"]["gpu_hours"] == round(150 / 3600, 3) and m["teams"]["B"]["gpu_hours"] == round(32.5 / 3600, 3)
    # the 4-card cluster of whole T4s offers no shards: the share is a whole card, a shard job never runs
    res, jobs, m = run(trace)
    assert (jobs[2].req_key, jobs[2].req_n, jobs[2].runs) == ("gres/gpu", 1, [(0, 100, 1.0)])
    assert [jobs[i].never for i in (1, 3, 4)] == [True, True, True] and m["teams"]["A"]["never_runnable"] == 1


def test_mig_and_shard_requests_in_the_trace_files(tmp_path):
    from batchd.sim.trace import read_sacct_json

    p = tmp_path / "t.csv"
    p.write_text("submit_s,duration_s,gpus,team,user,gres\n0,100,,A,alice,gpu:1g.24gb:2\n5,60,,B,bob,shard:3\n"
                 "9,30,2,B,bob,\n")
    t = read_csv(p)
    assert [(j.gres, j.gpus) for j in t.jobs] == [("gpu:1g.24gb:2", 2), ("shard:3", 1), ("", 2)]
    for bad, why in (("gpu:1g.24gb:0", "COUNT at least 1"), ("mps:2", "expected one gpu"),
                     ("gpu:1,shard:2", "expected one gpu"), ("gpu::2", "expected one gpu")):
        p.write_text(f'submit_s,duration_s,gpus,gres\n0,1,,"{bad}"\n')
        with pytest.raises(ValueError, match=why):
            read_csv(p)
    p.write_text("submit_s,duration_s,gpus,gres\n0,1,,\n")
    with pytest.raises(ValueError, match=r"gpus \(or gres\) are required"):
        read_csv(p)
    # sacct --json: MIG instances and shards as such (batchd's AllocTRES of such jobs), whole cards as cards
    h = tmp_path / "h.json"
    rec = {"account": "A", "user": "alice", "state": {"current": "COMPLETED"},
           "time": {"submission": 5, "start": 10, "end": 110}}
    h.write_text(json.dumps({"jobs": [
        {**rec, "job_id": 1, "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 0},
                                                    {"type": "gres", "name": "gpu:1g.24gb", "count": 2}]}},
        {**rec, "job_id": 2, "tres": {"allocated": [{"type": "gres", "name": "shard", "count": 3}]}},
        {**rec, "job_id": 3, "tres": {"allocated": [{"type": "gres", "name": "gpu", "count": 2},
                                                    {"type": "gres", "name": "gpu:h200", "count": 2}]}}]}))
    assert [(j.gres, j.gpus) for j in read_sacct_json(h).jobs] == [("gpu:1g.24gb:2", 1), ("shard:3", 1), ("", 2)]
    # Alibaba: a pod's share of one card is kept
    a = tmp_path / "a.csv"
    a.write_text("job_id,submit_time_s,duration_s,gpus,gpu_milli,qos,start_time_s\np0,0,10,1,460,LS,0\n"
                 "p1,5,10,1,1000,LS,5\np2,6,10,2,1000,BE,6\n")
    assert [j.gpu_fraction for j in read_alibaba(a, "qos:*=x").jobs] == [0.46, 1.0, 1.0]


def test_a_request_over_its_accounts_limit_of_a_model_or_profile_never_runs(tmp_path):
    acc = tmp_path / "acc.toml"
    acc.write_text('[[account]]\nname = "A"\nusers = ["alice"]\n[account.resources."gres/gpu"]\nquota = 4\n'
                   'limit = -1\n[account.resources."gres/gpu:1g.24gb"]\nquota = 2\nlimit = 2\n'
                   '[account.resources."gres/shard"]\nquota = 3\n')  # an unset limit is the quota
    trace = [job(1, 0, 100, 1, "A", "alice", gres="gpu:1g.24gb:3"), job(2, 0, 100, 1, "A", "alice", gres="gpu:1g.24gb:2"),
             job(3, 0, 100, 1, "A", "alice", gres="shard:4"), job(4, 0, 100, 1, "A", "alice", gres="shard:3")]
    res = from_files(MIG_CLUSTER, str(acc), trace).run(trace)
    jobs = {j.t.id: j for j in res.jobs}
    assert [(jobs[i].never, [r[:2] for r in jobs[i].runs]) for i in (1, 2, 3, 4)] == [
        (True, []), (False, [(0, 100)]), (True, []), (False, [(0, 100)])]
    assert measure(res)["teams"]["A"]["never_runnable"] == 2
