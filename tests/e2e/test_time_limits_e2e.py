"""Time limits with a real daemon and the real commands (issue 15.1), as the Slurm 22.05
peer answered (tests/compat/test_time_limits.py): a job over its partition's MaxTime pends
PartitionTimeLimit and runs once lowered; a job without -t takes the partition's DefaultTime;
`scontrol update TimeLimit=` on a running job reaches its supervisor and ends it TIMEOUT at
the new limit; a user may only lower a running job's limit."""

import os
import pwd
import subprocess
import time
import uuid

import pytest

from batchd.cli.client import request
from tests.hostlock import account_tool

SHORT = """
[[partition]]
name = "short"
nodes = "ALL"
max_time = "01:00:00"
default_time = "00:10:00"
"""


def _show(cluster, jid: int) -> str:
    return cluster.run("scontrol", "show", "job", str(jid)).stdout


@pytest.mark.config_extra(SHORT)
def test_over_max_time_pends_partition_time_limit_and_runs_once_lowered(cluster):
    jid = cluster.submit("-p", "short", "-t", "2:00:00", "--wrap", "true")
    deadline = time.time() + 20
    while cluster.job(jid)["reason"] != "PartitionTimeLimit":
        assert cluster.job(jid)["state"] == "PENDING"
        assert time.time() < deadline, cluster.job(jid)
        time.sleep(0.1)
    assert cluster.run("squeue", "-h", "-j", str(jid), "-o", "%l %r").stdout.split() == \
        ["2:00:00", "PartitionTimeLimit"]
    assert "TimeLimit=02:00:00" in _show(cluster, jid)
    time.sleep(1.5)  # a cycle or more later it still pends
    assert cluster.job(jid)["state"] == "PENDING"
    r = cluster.run("scontrol", "update", f"JobId={jid}", "TimeLimit=30")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    cluster.wait(jid, ("COMPLETED",))
    assert "TimeLimit=00:30:00" in _show(cluster, jid)


@pytest.mark.config_extra(SHORT)
def test_a_job_without_time_takes_the_partition_default(cluster):
    short = cluster.submit("-H", "-p", "short", "--wrap", "true")
    gpu = cluster.submit("-H", "--wrap", "true")
    assert cluster.run("squeue", "-h", "-j", str(short), "-o", "%l").stdout == "10:00\n"
    assert cluster.run("squeue", "-h", "-j", str(gpu), "-o", "%l").stdout == "UNLIMITED\n"
    assert "TimeLimit=00:10:00" in _show(cluster, short)
    assert "TimeLimit=UNLIMITED" in _show(cluster, gpu)
    sacct = ("sacct", "-X", "-n", "-P", "-o", "TimelimitRaw,Timelimit", "-j")
    assert cluster.run(*sacct, str(short)).stdout == "10|00:10:00\n"
    # no limit of its own until it starts (Slurm's NO_VAL), then the partition's MaxTime
    assert cluster.run(*sacct, str(gpu)).stdout == "Partition_Limit|Partition_Limit\n"
    cluster.run("scontrol", "release", str(gpu))
    cluster.wait(gpu, ("COMPLETED",))
    assert cluster.run(*sacct, str(gpu)).stdout == "UNLIMITED|UNLIMITED\n"


def test_lowered_limit_of_a_running_job_reaches_its_supervisor(cluster):
    jid = cluster.submit("-t", "10", "--wrap", "sleep 120")
    cluster.wait(jid, ("RUNNING",))
    # the command's unit is the minute: the update is sent to the supervisor...
    r = cluster.run("scontrol", "update", f"JobId={jid}", "TimeLimit=5")
    assert (r.returncode, r.stderr) == (0, "")
    deadline = time.time() + 10
    while f"job time limit sent job_id={jid} run=0 time_limit_s=300" not in cluster.log.read_text():
        assert time.time() < deadline, cluster.log.read_text()[-2000:]
        time.sleep(0.1)
    # ...and the wire takes seconds: 3 s from its start ends it TIMEOUT there
    os.environ["BATCHD_SOCKET"] = cluster.sock
    assert request("POST", "/v1/jobs/update", {"ids": [str(jid)], "changes": {"time_limit_s": 3}})["errors"] == []
    j = cluster.wait(jid, ("TIMEOUT", "COMPLETED", "FAILED", "CANCELLED"), timeout=20)
    assert j["state"] == "TIMEOUT"
    assert j["run_time_s"] < 15


@pytest.fixture
def user():
    if os.geteuid() != 0 or not os.path.exists("/usr/sbin/useradd"):
        pytest.skip("needs root and useradd")
    name = f"bd{uuid.uuid4().hex[:6]}"
    account_tool("useradd", "--create-home", "--shell", "/bin/bash", name)
    try:
        pw = pwd.getpwnam(name)
        yield pw.pw_uid, pw.pw_gid, pw.pw_dir
    finally:
        subprocess.run(["pkill", "-9", "-u", name], check=False)
        account_tool("userdel", "--remove", name, check=False)


@pytest.mark.root
def test_a_user_may_only_lower_a_running_jobs_limit(cluster, user):
    uid, gid, home = user
    as_user = {"user": (uid, gid), "cwd": home}
    jid = cluster.submit("-t", "10", "--wrap", "sleep 60", **as_user)
    cluster.wait(jid, ("RUNNING",))
    r = cluster.run("scontrol", "update", f"JobId={jid}", "TimeLimit=20", check=False, **as_user)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f"Access/permission denied for job {jid}\n")
    r = cluster.run("scontrol", "update", f"JobId={jid}", "TimeLimit=5", check=False, **as_user)
    assert (r.returncode, r.stderr) == (0, "")
    assert "TimeLimit=00:05:00" in _show(cluster, jid)
    root_job = cluster.submit("-H", "--wrap", "true")
    r = cluster.run("scontrol", "update", f"JobId={root_job}", "TimeLimit=5", check=False, **as_user)
    assert (r.returncode, r.stderr) == (1, f"Invalid user id for job {root_job}\n")
    assert cluster.run("scontrol", "update", f"JobId={jid}", "TimeLimit=30").returncode == 0  # root may
    assert "TimeLimit=00:30:00" in _show(cluster, jid)


def test_zero_or_negative_limits_are_refused_at_the_door(cluster, tmp_path):
    """`sbatch -t 0` is UNLIMITED (Slurm's reading, recorded); a raw 0 or -5 on the socket is a
    400 naming the field, never a job without a limit."""
    from batchd.cli.client import DaemonError

    jid = cluster.submit("-H", "-t", "0", "--wrap", "true")
    assert "TimeLimit=UNLIMITED" in _show(cluster, jid)
    os.environ["BATCHD_SOCKET"] = cluster.sock
    spec = {"script": "#!/bin/sh\ntrue\n", "workdir": str(cluster.root), "environment": {}, "argv": []}
    for bad in (0, -5):
        with pytest.raises(DaemonError) as e:
            request("POST", "/v1/jobs", {"spec": {**spec, "time_limit_s": bad}})
        assert e.value.status == 400 and e.value.message.startswith("spec.time_limit_s"), e.value.message
        with pytest.raises(DaemonError) as e:
            request("POST", "/v1/jobs/update", {"ids": [str(jid)], "changes": {"time_limit_s": bad}})
        assert e.value.status == 400 and e.value.message.startswith("changes.time_limit_s"), e.value.message
    assert [j["id"] for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"]] == [jid]
