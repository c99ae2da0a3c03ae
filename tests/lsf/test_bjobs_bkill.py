"""bjobs layout and bkill selection against a stand-in daemon (client.request patched)."""

import time

import pytest

from batchd.cli import bjobs, bkill, client

T0 = time.mktime((2026, 11, 30, 15, 54, 0, 0, 0, -1))


def job(id, state="RUNNING", **kw):
    j = {"id": id, "display_id": str(id), "array_job_id": None, "array_task_id": None, "name": f"job{id}",
         "user": "alice", "account": "training", "state": state, "reason": "None", "submit_time": T0 + id,
         "submit_host": "login1", "node_list": "gpu01" if state != "PENDING" else "", "ntasks": 1,
         "nodes": 1, "cpus": 1, "workdir": "/home/alice", "command": "", "time_limit_s": 3600,
         "exit_code": "0:0", "partition": "gpu", "qos": "normal", "priority": 100}
    j.update(kw)
    return j


class FakeDaemon:
    def __init__(self, jobs, signal_reply=None):
        self.jobs = jobs
        self.calls = []
        self.signal_reply = signal_reply

    def __call__(self, method, path, body=None, query=None, timeout=60.0):
        self.calls.append((method, path, body, query))
        if path == "/v1/jobs":
            ids = set((query or {}).get("ids", "").split(",")) - {""}
            return {"jobs": [j for j in self.jobs if not ids or j["display_id"] in ids or str(j["id"]) in ids]}
        if path == "/v1/jobs/signal":
            if self.signal_reply is not None:
                return self.signal_reply
            return {"done": list(body["ids"]), "errors": []}
        raise AssertionError(path)


@pytest.fixture
def daemon(monkeypatch):
    def make(jobs, **kw):
        d = FakeDaemon(jobs, **kw)
        monkeypatch.setattr(client, "request", d)
        monkeypatch.setattr("batchd.cli.fmt.current_user", lambda: "alice")
        return d
    return make


def test_default_layout(daemon, capsys):
    daemon([job(12, "PENDING", reason="Priority"),
            job(7, ntasks=8, node_list="gpu[01-02]", name="a_rather_long_job_name"),
            job(13, "PENDING", reason="JobHeldUser", user="bartholomew", account="inference-team")])
    assert bjobs.main([]) == 0
    when = time.strftime("%b %d %H:%M", time.localtime(T0 + 7))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME"
    assert lines[1] == f"7       alice   RUN   training   login1      4*gpu01     *_job_name {when}"
    assert lines[2] == " " * 45 + "4*gpu02"
    assert lines[3].split() == ["12", "alice", "PEND", "training", "login1", "job12", *lines[3].split()[-3:]]
    assert lines[4].startswith("13      *olomew PSUSP *ence-team login1                  job13")
    assert len(lines) == 5


def test_default_query_is_my_unfinished_jobs(daemon, capsys):
    d = daemon([])
    assert bjobs.main([]) == 0
    assert d.calls[0][3] == {"users": "alice"}
    assert "No unfinished job found" in capsys.readouterr().err
    bjobs.main(["-u", "all", "-a", "-q", "training", "-J", "x"])
    assert d.calls[1][3] == {"accounts": "training", "names": "x", "all": "1"}
    bjobs.main(["12", "13[4]"])
    assert d.calls[2][3] == {"ids": "12,13_4", "all": "1"}


def test_wide_and_pending_reasons(daemon, capsys):
    daemon([job(7, name="a_rather_long_job_name"), job(12, "PENDING", reason="Dependency")])
    bjobs.main(["-w"])
    assert "a_rather_long_job_name" in capsys.readouterr().out
    bjobs.main(["-p"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "JOBID   USER    STAT  QUEUE      FROM_HOST   JOB_NAME   SUBMIT_TIME"
    assert lines[1].startswith("12      alice   PEND  training   login1      job12")
    assert lines[2] == " Job dependency condition not satisfied;"
    assert len(lines) == 3
    bjobs.main(["-r", "-noheader"])
    assert [x.split()[0] for x in capsys.readouterr().out.splitlines()] == ["7"]


def test_finished_and_array_rows(daemon, capsys):
    daemon([job(20, "COMPLETED"), job(21, "FAILED", exit_code="3:0"),
            job(31, "PENDING", array_job_id=30, array_task_id=2, name="sweep", display_id="30_2")])
    bjobs.main(["-a"])
    rows = [x.split()[:3] for x in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["30", "alice", "PEND"], ["20", "alice", "DONE"], ["21", "alice", "EXIT"]]
    bjobs.main(["-d", "-w"])
    out = capsys.readouterr().out
    assert "sweep[2]" not in out and "DONE" in out


def test_unknown_job_id(daemon, capsys):
    daemon([job(5)])
    assert bjobs.main(["5", "6"]) == 255
    captured = capsys.readouterr()
    assert "Job <6> is not found" in captured.err
    assert captured.out.splitlines()[1].startswith("5 ")
    assert bjobs.main(["abc"]) == 255
    assert "abc: Illegal job ID." in capsys.readouterr().err


def test_long_form(daemon, capsys):
    daemon([job(7, "FAILED", exit_code="2:0", end_time=T0 + 60, start_time=T0 + 10, comment="projX",
                stdout="/home/alice/out.7")])
    bjobs.main(["-l", "7"])
    out = capsys.readouterr().out
    assert out.startswith("Job <7>, Job Name <job7>, User <alice>, Project <projX>, Status <EXIT>, Queue <training>")
    assert "Output File </home/alice/out.7>" in out
    assert " RUNLIMIT\n 60.0 min" in out
    assert "Exited with exit code 2." in out


def test_bkill_ids(daemon, capsys):
    d = daemon([])
    assert bkill.main(["12", "13[4]"]) == 0
    assert d.calls[-1][2] == {"ids": ["12", "13_4"], "filters": {}, "signal": None, "batch_only": False}
    assert capsys.readouterr().out == "Job <12> is being terminated\nJob <13[4]> is being terminated\n"
    assert bkill.main(["-s", "USR1", "12"]) == 0
    assert d.calls[-1][2]["signal"] == 10
    assert capsys.readouterr().out == "Job <12> is being signaled\n"


def test_bkill_errors(daemon, capsys):
    daemon([], signal_reply={"done": [], "errors": [
        {"id": "9", "message": "Invalid job id specified"},
        {"id": "8", "message": "Job/step already completing or completed"},
        {"id": "7", "message": "Access/permission denied"}]})
    assert bkill.main(["9", "8", "7"]) == 255
    assert capsys.readouterr().err.splitlines() == [
        "Job <9>: No matching job found", "Job <8>: Job has already finished", "Job <7>: User permission denied"]
    assert bkill.main(["-s", "NOPE", "1"]) == 255
    assert "NOPE: Illegal signal value" in capsys.readouterr().err
    assert bkill.main(["x1"]) == 255


def test_bkill_zero_and_most_recent(daemon, capsys):
    jobs = [job(3, "PENDING"), job(5), job(4, "PENDING", name="keep"),
            job(9, "PENDING", array_job_id=8, array_task_id=1, display_id="8_1", submit_time=T0 + 8)]
    d = daemon(jobs)
    assert bkill.main(["0"]) == 0
    assert d.calls[0][3] == {"users": "alice"}
    assert sorted(d.calls[1][2]["ids"]) == ["3", "4", "5", "8_1"]
    capsys.readouterr()
    assert bkill.main([]) == 0                      # no id: only the most recent job (here an array)
    assert d.calls[-1][2]["ids"] == ["8"]
    assert bkill.main(["-stat", "run", "0"]) == 0
    assert d.calls[-1][2]["ids"] == ["5"]
    assert bkill.main(["-u", "all", "-q", "training", "-J", "keep"]) == 0
    assert d.calls[-2][3] == {"accounts": "training", "names": "keep"}
    d.jobs = []
    assert bkill.main(["0"]) == 255
    assert "No unfinished job found" in capsys.readouterr().err


def test_bkill_reports_an_array_once():
    assert bkill.acted(["5"], ["5_3", "5_1", "5_2"]) == ["5"]
    assert bkill.acted(["5_2", "7"], ["5_2", "7"]) == ["5_2", "7"]
    assert bkill.acted(["5"], ["5"]) == ["5"]
    assert bkill.acted(["5", "50"], ["50_1", "5_1"]) == ["50", "5"]


def test_default_hides_jobs_that_just_ended(daemon, capsys):
    daemon([job(1, "CANCELLED"), job(2), job(3, "COMPLETED")])
    bjobs.main(["-noheader"])
    assert [x.split()[0] for x in capsys.readouterr().out.splitlines()] == ["2"]
    bjobs.main(["-noheader", "3"])
    assert [x.split()[0] for x in capsys.readouterr().out.splitlines()] == ["3"]
