"""sacct layouts against views/05_sacct.txt, 06_scancel_errors.txt and 08_requeue.txt."""

import pytest

from batchd.cli import sacct
from tests.cli.conftest import golden, ts

TRES1 = "billing=1,cpu=1,mem=1G,node=1"


def row(job_id, name, state, exit_code="0:0", elapsed=0, alloc=TRES1, req=TRES1, start=None, end=None,
        **kw):
    """An ACCT_ROW; a step row (`123.batch`) has the empty fields Slurm gives steps."""
    step = "." in job_id
    r = {"job_id": job_id, "job_id_raw": job_id, "name": name, "user": None if step else "root", "uid": 0,
         "group": "root", "account": "training", "partition": None if step else "gpu",
         "qos": None if step else "normal", "state": state, "exit_code": exit_code,
         "derived_exit_code": None if step else "0:0", "submit": ts(start) if start else None,
         "eligible": ts(start) if start else None, "start": ts(start) if start else None,
         "end": ts(end) if end else None, "elapsed_s": elapsed,
         "time_limit_s": None if step else -1, "alloc_tres": alloc,
         "req_tres": None if step else req, "node_list": "vm", "nnodes": 1, "ncpus": 1, "ntasks": 1,
         "restarts": 0, "workdir": None if step else "/scratch/golden/x", "comment": None,
         "reason": None if step else "None", "priority": 1, "alloc_cpus": 1,
         "req_mem": None if step else 1024, "billing": 1, "cancelled_by": None}
    r.update(kw)
    return r


def steps_rows():
    """The jobs of `sacct -a -S 2020-01-01 --parsable2 ... -j 1,3,11,...` (views/05_sacct.txt)."""
    g2 = "cpu=1,gres/gpu:h200=2,gres/gpu=2,mem=1G,node=1"
    g11 = "cpu=2,gres/gpu:h200=2,gres/gpu=2,mem=1500M,node=1"
    g4 = "cpu=1,gres/gpu:h200=4,gres/gpu=4,mem=1G,node=1"
    a, b = "2026-11-30T14:39:24", "2026-11-30T14:40:53"
    return [
        row("1", "job.sh", "TIMEOUT", elapsed=89, start=a, end=b),
        row("1.batch", "batch", "CANCELLED", "0:15", 89, "cpu=1,mem=1G,node=1", start=a, end=b),
        row("3", "wrap", "COMPLETED", alloc="billing=5," + g2, req="billing=5,cpu=1,gres/gpu=2,mem=1G,node=1",
            start="2026-11-30T14:39:26", end="2026-11-30T14:39:26"),
        row("3.batch", "batch", "COMPLETED", alloc=g2, start="2026-11-30T14:39:26", end="2026-11-30T14:39:26"),
        row("11", "cli_name_wins", "COMPLETED", alloc="billing=6," + g11, req="billing=6," + g11,
            account="serving", start="2026-11-30T14:39:50", end="2026-11-30T14:39:50"),
        row("11.batch", "batch", "COMPLETED", alloc=g11, account="serving", start="2026-11-30T14:39:50",
            end="2026-11-30T14:39:50"),
        row("15", "wrap", "FAILED", "0:53", start="2026-11-30T14:40:02", end="2026-11-30T14:40:02"),
        row("15.batch", "batch", "CANCELLED", "0:53", alloc="cpu=1,mem=1G,node=1", start="2026-11-30T14:40:02",
            end="2026-11-30T14:40:02"),
        row("57", "wrap", "FAILED", "3:0", start="2026-11-30T14:42:42", end="2026-11-30T14:42:42"),
        row("57.batch", "batch", "FAILED", "3:0", alloc="cpu=1,mem=1G,node=1", start="2026-11-30T14:42:42",
            end="2026-11-30T14:42:42"),
        row("58", "wrap", "FAILED", "0:9", start="2026-11-30T14:42:45", end="2026-11-30T14:42:45"),
        row("58.batch", "batch", "CANCELLED", "0:9", alloc="cpu=1,mem=1G,node=1", start="2026-11-30T14:42:45",
            end="2026-11-30T14:42:45"),
        row("87", "cpu-only", "FAILED", "0:10", 6, "billing=2,cpu=2,mem=2G,node=1", "billing=2,cpu=2,mem=2G,node=1",
            start="2026-11-30T14:43:42", end="2026-11-30T14:43:48"),
        row("87.batch", "batch", "CANCELLED", "0:10", 6, "cpu=2,mem=2G,node=1", start="2026-11-30T14:43:42",
            end="2026-11-30T14:43:48"),
        row("99", "victim", "CANCELLED", alloc=None, req="billing=9,cpu=1,gres/gpu=4,mem=1G,node=1",
            end="2026-11-30T14:45:24", cancelled_by=0),
        row("938", "victim-noreq", "PREEMPTED", elapsed=3, alloc="billing=9," + g4,
            req="billing=9,cpu=1,gres/gpu=4,mem=1G,node=1", start="2026-11-30T14:48:34", end="2026-11-30T14:48:37"),
        row("938.batch", "batch", "CANCELLED", "0:15", 3, g4, start="2026-11-30T14:48:34",
            end="2026-11-30T14:48:37"),
        row("942", "rq", "CANCELLED", elapsed=3, start="2026-11-30T14:49:21", end="2026-11-30T14:49:24",
            cancelled_by=0),
        row("942.batch", "batch", "CANCELLED", "0:15", 3, "cpu=1,mem=1G,node=1", start="2026-11-30T14:49:21",
            end="2026-11-30T14:49:24"),
    ]


def run(daemon, argv, capsys):
    rc = sacct.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_parsable2_with_steps(daemon, capsys):
    daemon.records = steps_rows()
    rc, out, err = run(daemon, ["-a", "-S", "2020-01-01", "--parsable2", "--format=JobID,JobName,Account,User,"
                                "State,ExitCode,Elapsed,AllocTRES,ReqTRES,Start,End",
                                "-j", "1,3,11,15,57,58,87,99,938,942"], capsys)
    assert (rc, err) == (0, "")
    assert out == golden("sacct_steps_P.txt")
    q = daemon.calls[-1][3]
    assert q["ids"] == "1,3,11,15,57,58,87,99,938,942" and q["all_users"] == "1"
    assert q["start"] == str(int(ts("2020-01-01T00:00:00")))


def test_default_layout_cuts_with_plus(daemon, capsys):
    daemon.records = [r for r in steps_rows() if r["job_id"] in ("1", "1.batch", "99", "938", "942")]
    daemon.records.insert(2, row("3", "wrap", "COMPLETED"))
    rc, out, _ = run(daemon, ["-X", "-j", "1,3,99,938,942"], capsys)
    assert out == golden("sacct_default.txt")


def test_requeue_duplicates(daemon, capsys):
    def r(jid, state, exit_code, submit, elig, start, end, **kw):
        x = row(jid, "rq", state, exit_code, start=start, end=end, **kw)
        x["submit"], x["eligible"] = ts(submit), ts(elig)
        return x
    daemon.records = [
        r("942", "REQUEUED", "0:0", "2026-11-30T14:49:09", "2026-11-30T14:49:09", "2026-11-30T14:49:10",
          "2026-11-30T14:49:12"),
        r("942.batch", "CANCELLED", "0:15", "2026-11-30T14:49:10", "2026-11-30T14:49:10", "2026-11-30T14:49:10",
          "2026-11-30T14:49:12"),
        r("942", "CANCELLED", "0:0", "2026-11-30T14:49:12", "2026-11-30T14:49:20", "2026-11-30T14:49:21",
          "2026-11-30T14:49:24", cancelled_by=0),
        r("942.batch", "CANCELLED", "0:15", "2026-11-30T14:49:21", "2026-11-30T14:49:21", "2026-11-30T14:49:21",
          "2026-11-30T14:49:24"),
    ]
    rc, out, _ = run(daemon, ["-D", "--parsable2", "-j", "942",
                              "--format=JobID,State,ExitCode,Submit,Eligible,Start,End"], capsys)
    assert out == golden("sacct_requeue_D.txt")
    assert daemon.calls[-1][3]["duplicates"] == "1"


def test_no_records_prints_the_header(daemon, capsys):
    assert run(daemon, ["-j", "999999"], capsys) == (0, golden("sacct_empty.txt"), "")


def test_helpformat(daemon, capsys):
    assert run(daemon, ["-e"], capsys) == (0, golden("sacct_helpformat.txt"), "")


def test_invalid_field(daemon, capsys):
    rc, out, err = run(daemon, ["-X", "-j", "16", "--parsable2", "--format=JobID,JobIDRaw,ArrayJobID"], capsys)
    assert (rc, out, err) == (1, "", 'sacct: error: Invalid field requested: "ArrayJobID"\n')
    assert daemon.calls == []


@pytest.mark.parametrize("spec,expected", [
    ("JobID%20,State", "                  42  COMPLETED \n"),
    ("JobID%-5,JobName%4", "42    lon+ \n"),
    ("jobid,elapsed,timelimit,ncpus,cputimeraw", "42             01:01:01 2-00:00:00          4      14644 \n"),
])
def test_widths_and_names(daemon, capsys, spec, expected):
    daemon.records = [row("42", "longname", "COMPLETED", elapsed=3661, time_limit_s=172800, alloc_cpus=4)]
    rc, out, _ = run(daemon, ["-n", "-o", spec], capsys)
    assert rc == 0 and out == expected


def test_parsable_trailing_bar_and_brief(daemon, capsys):
    daemon.records = [row("42", "x", "FAILED", "1:0"), row("42.batch", "batch", "FAILED", "1:0")]
    assert run(daemon, ["-p", "-b"], capsys)[1] == "JobID|State|ExitCode|\n42|FAILED|1:0|\n42.batch|FAILED|1:0|\n"
    assert run(daemon, ["-P", "-n", "-X", "-b"], capsys)[1] == "42|FAILED|1:0\n"


def test_time_window_and_filters(daemon, capsys, monkeypatch):
    now = ts("2026-11-30T14:43:48")
    monkeypatch.setattr(sacct.time, "time", lambda: now)
    run(daemon, [], capsys)
    assert daemon.calls[-1][3]["start"] == str(int(ts("2026-11-30T00:00:00")))
    run(daemon, ["-j", "5"], capsys)
    assert "start" not in daemon.calls[-1][3]
    run(daemon, ["-s", "CA,to", "-A", "training", "-u", "alice", "-E", "now"], capsys)
    q = daemon.calls[-1][3]
    assert q["states"] == "CANCELLED,TIMEOUT" and q["start"] == q["end"] == str(int(now))
    assert q["accounts"] == "training" and q["users"] == "alice"
    rc, _, err = run(daemon, ["-S", "yesterday-ish"], capsys)
    assert rc == 1 and "Invalid time specification" in err


def test_step_rows_leave_job_fields_empty(daemon, capsys):
    job = row("7", "wrap", "COMPLETED", start="2026-11-30T14:39:38", end="2026-11-30T14:39:38")
    step = dict(job, job_id="7.batch", job_id_raw="7.batch", name="batch", alloc_tres="cpu=1,mem=1G,node=1")
    daemon.records = [job, step]
    rc, out, _ = run(daemon, ["-P", "-n", "-o", "JobID,User,Partition,QOS,Timelimit,ReqMem,ReqTRES,WorkDir,"
                              "Reason,Account,AllocTRES"], capsys)
    assert out.splitlines() == [
        "7|root|gpu|normal|UNLIMITED|1G|billing=1,cpu=1,mem=1G,node=1|/scratch/golden/x|None|training|"
        "billing=1,cpu=1,mem=1G,node=1",
        "7.batch|||||||||training|cpu=1,mem=1G,node=1",
    ]


def test_cancelled_by_in_state_string(daemon, capsys):
    daemon.records = [row("5", "x", "CANCELLED by 1000")]
    assert run(daemon, ["-n", "-X", "-o", "State%20,State"], capsys)[1] == \
        "   CANCELLED by 1000 CANCELLED+ \n"


def test_json(daemon, capsys):
    import json
    daemon.records = [r for r in steps_rows() if r["job_id"] in ("3", "3.batch", "15", "15.batch", "99")]
    rc, out, _ = run(daemon, ["--json", "-j", "3,15,99"], capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["errors"] == [] and doc["meta"]["Slurm"]["release"] == "22.05.8"
    j = {x["job_id"]: x for x in doc["jobs"]}
    assert set(j) == {3, 15, 99}
    assert {"type": "gres", "name": "gpu:h200", "id": None, "count": 2} in j[3]["tres"]["allocated"]
    assert {"type": "mem", "name": "", "id": None, "count": 1024} in j[3]["tres"]["allocated"]
    assert [s["step"]["id"] for s in j[3]["steps"]] == ["3.batch"]
    assert j[15]["exit_code"] == {"status": "SIGNALED", "return_code": 0, "signal": {"signal_id": 53}}
    assert j[99]["state"]["current"] == "CANCELLED" and j[99]["time"]["start"] == 0


def test_pending_array_tasks_fold(daemon, capsys):
    daemon.records = [row("3_0", "arr", "RUNNING", start="2026-11-30T14:39:24")] + \
        [row(f"3_{k}", "arr", "PENDING", alloc="") for k in (1, 2, 3, 5)] + [row("4", "x", "PENDING", alloc="")]
    assert run(daemon, ["-P", "-n", "-o", "JobID,State"], capsys)[1] == "3_0|RUNNING\n3_[1-3,5]|PENDING\n4|PENDING\n"


@pytest.mark.parametrize("value,base,units,noconvert,want", [
    (2140, "K", None, False, "2140K"),
    (2048, "K", None, False, "2M"),           # exact: up one unit (as 2048M -> 2G)
    (3 * 1024 * 1024, "K", None, False, "3G"),
    (2048, "K", None, True, "2048K"),
    (10432156, "K", "G", False, "9.95G"),
    (2048, "M", "G", False, "2G"),
    (1500, "M", "K", False, "1536000K"),
    (4000, "M", "G", False, "3.91G"),
], ids=["kib", "exact-m", "exact-g", "noconvert", "units-g", "units-whole", "units-down", "reqmem-g"])
def test_fmt_size(value, base, units, noconvert, want):
    assert sacct.fmt_size(value, base, units, noconvert) == want


@pytest.mark.parametrize("secs,want", [(0.0, "00:00.000"), (1.2345, "00:01.234"), (125.5, "02:05.500"),
                                       (3725.0, "01:02:05"), (90061.0, "1-01:01:01")])
def test_fmt_cpu_time(secs, want):
    assert sacct.fmt_cpu_time(secs) == want


def test_maxrss_totalcpu_and_units(daemon, capsys):
    daemon.records = [row("5", "wrap", "COMPLETED", total_cpu_s=1.5),
                      row("5.batch", "batch", "COMPLETED", total_cpu_s=1.5, max_rss_kb=10432156)]
    fmt = "--format=JobID,ReqMem,MaxRSS,AveRSS,MaxRSSNode,TotalCPU"
    rc, out, err = run(daemon, ["-P", "-j", "5", fmt], capsys)
    assert (rc, err) == (0, "")
    assert out.splitlines() == ["JobID|ReqMem|MaxRSS|AveRSS|MaxRSSNode|TotalCPU",
                                "5|1G||||00:01.500", "5.batch||10432156K|10432156K|vm|00:01.500"]
    rc, out, _ = run(daemon, ["-P", "-j", "5", fmt, "--units=g"], capsys)
    assert out.splitlines()[1:] == ["5|1G||||00:01.500", "5.batch||9.95G|9.95G|vm|00:01.500"]
    rc, out, _ = run(daemon, ["-P", "-j", "5", fmt, "--noconvert"], capsys)
    assert out.splitlines()[1] == "5|1024M||||00:01.500"


def test_bad_units(daemon, capsys):
    rc, out, err = run(daemon, ["--units=X"], capsys)
    assert (rc, out) == (1, "")
    assert err == "sacct: error: Invalid unit type 'X'. Possible options are KMGTP\n"
