"""Within-account preemption at the account's limit while other cards are idle (issue 16,
rule 1), with real processes. The 8 cards of the dev cluster are mostly idle; account `team`
may hold 2 of them (quota 2, limit 2), account `other` holds none. Two 1-GPU `low` jobs of
`team` run (they write a marker and trap SIGTERM); a 1-GPU `high` job of `team` arrives.
`team` is at its limit, so the daemon preempts exactly one low job, the newest, although 6
cards are idle; the victim is requeued (PENDING again, same id, Restarts 1, reason BeginTime
as slurmctld's requeue hold-off) and the high job runs; the older low job runs throughout and
`team` never runs more than 2 cards. sacct -D shows the victim's run PREEMPTED and the job
PENDING again (Slurm 22.05's records of a preempted, requeued job).
With `within_account = "never"` in team's policy the high job pends AssocGrpGRES and nothing
is preempted."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import CONFIG, Cluster

from batchd.cli.client import request

QOS = """
[[qos]]
name = "low"
priority = 10
preemptible = true
grace_time_s = 2
[[qos]]
name = "high"
priority = 100
preemptible = true
"""

ACCOUNTS = """
[[account]]
name = "team"
users = ["root"]
[account.resources."gres/gpu"]
quota = 2
limit = 2
{policy}
[[account]]
name = "other"
users = ["root"]
[account.resources."gres/gpu"]
quota = 6
limit = -1
"""

NEVER = '[account.policy]\nwithin_account = "never"\n'

# a marker per run in the submit directory; SIGTERM is logged, then the job exits
LOW = ("#!/bin/bash\n"
       "m=$SLURM_SUBMIT_DIR/marker-$SLURM_JOB_ID\n"
       "trap 'echo got-term >> $m; exit 143' TERM\n"
       "echo start ${SLURM_RESTART_COUNT:-0} >> $m\n"
       "sleep 300 & wait\n")


@pytest.fixture
def team_cluster():
    """The 2 x 4 h200 dev cluster with QOS `low` and `high` (appended: `config_extra` cannot
    add an array of tables twice). Jobs are ended through the daemon before it stops."""
    root = Path(tempfile.mkdtemp(prefix="batchd-e2e-team-"))
    os.chmod(root, 0o777)
    c = Cluster(root, CONFIG + QOS)
    try:
        c.start()
        os.environ["BATCHD_SOCKET"] = c.sock
        yield c
    finally:
        if c.proc is not None:
            c.run("scancel", "--user", str(os.getuid()), check=False)
            deadline = time.time() + 20
            while time.time() < deadline and c.run("squeue", "-h", "-t", "R", check=False).stdout.strip():
                time.sleep(0.2)
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def jobs_now() -> dict[int, dict[str, Any]]:
    return {j["id"]: j for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"]}


def until(c: Cluster, what: str, timeout_s: float, done: Callable[[dict[int, dict[str, Any]]], bool],
          always: Callable[[dict[int, dict[str, Any]]], None]) -> dict[int, dict[str, Any]]:
    """Poll the jobs until `done(jobs)`, at most `timeout_s`; `always(jobs)` asserts what must
    hold at every look."""
    deadline = time.time() + timeout_s
    while True:
        jobs = jobs_now()
        always(jobs)
        if done(jobs):
            return jobs
        if time.time() > deadline:
            raise AssertionError(f"not reached in {timeout_s} s: {what}\n"
                                 + "\n".join(f"{i}: {j['state']} {j['reason']} restarts={j['restarts']}"
                                             for i, j in sorted(jobs.items()))
                                 + f"\ndaemon log:\n{c.log.read_text()[-3000:]}")
        time.sleep(0.1)


def watch(seconds: float, always: Callable[[dict[int, dict[str, Any]]], None]) -> dict[int, dict[str, Any]]:
    """Look at the jobs for `seconds` (a few scheduler cycles), asserting `always` each time."""
    deadline = time.time() + seconds
    while True:
        jobs = jobs_now()
        always(jobs)
        if time.time() > deadline:
            return jobs
        time.sleep(0.1)


def marker(c: Cluster, job_id: int) -> str:
    p = c.root / f"marker-{job_id}"
    return p.read_text() if p.exists() else ""


def start_two_low(c: Cluster, policy: str) -> list[int]:
    (c.root / "accounts.toml").write_text(ACCOUNTS.format(policy=policy))
    r = c.run("batchd", "apply", str(c.root / "accounts.toml"), check=False)
    assert r.returncode == 0, r.stderr
    low = [c.submit("-A", "team", "--qos", "low", "--gres=gpu:1", "--requeue", "-J", f"low{i}", input=LOW)
           for i in range(2)]
    # running, and their SIGTERM traps set (the marker is written after the trap)
    until(c, "both low jobs run and wrote their marker", 15,
          lambda js: all(js[j]["state"] == "RUNNING" and marker(c, j) == "start 0\n" for j in low),
          lambda js: None)
    return low


def test_high_job_preempts_the_newest_low_job_while_cards_are_idle(team_cluster):
    c = team_cluster
    old, new = start_two_low(c, "")
    high = c.submit("-A", "team", "--qos", "high", "--gres=gpu:1", "-J", "high", "--wrap", "sleep 300")

    def invariants(js: dict[int, dict[str, Any]]) -> None:
        assert js[old]["state"] == "RUNNING" and js[old]["restarts"] == 0, js[old]
        running = [j for j in js.values() if j["state"] == "RUNNING"]
        # team's limit holds at every look: the high job starts only after its victim ended
        assert len(running) <= 2, [(j["id"], j["name"]) for j in running]

    js = until(c, "the high job runs and the newest low job is requeued", 15,
               lambda js: js[high]["state"] == "RUNNING" and js[new]["state"] == "PENDING", invariants)
    # a few more cycles: nothing else is preempted, nothing moves
    js = watch(3, invariants)
    assert (js[high]["state"], js[new]["state"]) == ("RUNNING", "PENDING")
    assert js[new]["restarts"] == 1 and js[new]["reason"] == "BeginTime", js[new]
    # 6 of the 8 cards stayed idle: only team's two jobs hold GPUs
    assert sum(1 for j in js.values() if j["state"] == "RUNNING") == 2
    assert marker(c, new) == "start 0\ngot-term\n"
    assert marker(c, old) == "start 0\n"
    log = c.log.read_text()
    assert re.findall(r"job preempted job_id=(\d+) reason=(\w+) .*for=(\d+)", log) == [
        (str(new), "preempt", str(high))], log[-3000:]

    # what the user sees
    sq = c.run("squeue", "-h", "-o", "%i %j %q %T %r").stdout.split("\n")
    assert sorted(x for x in sq if x) == sorted([f"{old} low0 low RUNNING None", f"{new} low1 low PENDING BeginTime",
                                                 f"{high} high high RUNNING None"]), sq
    acct = c.run("sacct", "-X", "-D", "-n", "-P", "-o", "JobID,JobName,QOS,State,Start,End",
                 "-j", f"{old},{new},{high}").stdout.splitlines()
    rows = [r.split("|") for r in acct]
    assert [r[:4] for r in rows] == [[str(old), "low0", "low", "RUNNING"], [str(new), "low1", "low", "PREEMPTED"],
                                     [str(new), "low1", "low", "PENDING"], [str(high), "high", "high", "RUNNING"]], acct
    victim_end, high_start = rows[1][5], rows[3][4]
    assert victim_end <= high_start, acct  # ISO times: the high job started after its victim ended
    # with its batch step (the script's exit code after its trap is its own: not compared)
    steps = c.run("sacct", "-D", "-n", "-P", "-o", "JobID,State", "-j", str(new)).stdout.splitlines()
    assert steps == [f"{new}|PREEMPTED", f"{new}.batch|CANCELLED", f"{new}|PENDING"], steps


def test_within_account_never_keeps_the_high_job_waiting(team_cluster):
    c = team_cluster
    low = start_two_low(c, NEVER)
    high = c.submit("-A", "team", "--qos", "high", "--gres=gpu:1", "-J", "high", "--wrap", "sleep 300")

    def invariants(js: dict[int, dict[str, Any]]) -> None:
        for j in low:
            assert js[j]["state"] == "RUNNING" and js[j]["restarts"] == 0, js[j]
        assert js[high]["state"] == "PENDING", js[high]

    until(c, "the high job pends AssocGrpGRES", 10, lambda js: js[high]["reason"] == "AssocGrpGRES", invariants)
    js = watch(3, invariants)  # a few more cycles: still nothing preempted
    assert js[high]["reason"] == "AssocGrpGRES"
    assert all(marker(c, j) == "start 0\n" for j in low)
    assert "job preempted" not in c.log.read_text()
    sq = c.run("squeue", "-h", "-j", str(high), "-o", "%i %T %r").stdout
    assert sq == f"{high} PENDING AssocGrpGRES\n", sq
