"""A submission whose reply was lost is not doubled: the daemon dies right after the
submit transaction committed (the test-only hook BATCHD_TEST_CRASH_AFTER_SUBMIT, off by
default), the command waits for the daemon to come back, resends the same token and
prints the one job id it got, with one stderr line saying what happened."""

from __future__ import annotations

import os
import subprocess

import pytest

from batchd.cli.client import request
from tests.harness import BIN, answers, serve_argv, start_daemon


def _start_crashing(cluster) -> subprocess.Popen:
    """The daemon with the crash-after-submit hook on; returns once it answers."""
    env = dict(cluster.env, BATCHD_TEST_CRASH_AFTER_SUBMIT="1")
    return start_daemon(serve_argv("--dev", "--config", str(cluster.cfg)), cwd=cluster.root, env=env,
                        log=cluster.log, ready=answers(cluster.env, cluster.root), poll_s=0.1)


def _all_jobs(cluster) -> list[dict]:
    os.environ["BATCHD_SOCKET"] = cluster.sock
    return request("GET", "/v1/jobs", query={"all": "1"})["jobs"]


@pytest.mark.parametrize("cmd,tasks", [
    (["sbatch", "--parsable"], 1),
    (["sbatch", "--parsable", "-a", "0-3"], 4),
    (["bsub", "-o", "/dev/null"], 1),
], ids=["sbatch", "sbatch-array", "bsub"])
def test_a_lost_reply_is_retried_and_the_job_exists_once(cluster, cmd, tasks):
    runs = cluster.root / "runs.log"
    cluster.stop()
    cluster.proc = _start_crashing(cluster)
    job_cmd = f"echo $SLURM_JOB_ID >> {runs}"
    args = [*cmd, job_cmd] if cmd[0] == "bsub" else [*cmd, "-o", "/dev/null", "--wrap", job_cmd]
    client = subprocess.Popen([str(BIN / args[0]), *args[1:]], env=cluster.env, cwd=cluster.root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the daemon commits the submission and dies before answering
    assert cluster.proc.wait(timeout=30) == 137, cluster.log.read_text()[-3000:]
    assert "dying after the commit" in cluster.log.read_text()
    assert client.poll() is None  # the command waits for the daemon to come back
    cluster.start()  # without the hook
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, (out, err)

    jobs = _all_jobs(cluster)
    assert len(jobs) == tasks, jobs  # stored once, not twice
    master = jobs[0]["array_job_id"] or jobs[0]["id"]
    if cmd[0] == "bsub":
        assert out.splitlines()[0].startswith(f"Job <{master}> is submitted to"), out
    else:
        assert out.strip() == str(master), out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "reply was lost" in lines[0] and "submitted once" in lines[0] \
        and str(master) in lines[0] and lines[0].startswith(f"{cmd[0]}: "), err
    for j in jobs:
        cluster.wait(j["id"], ("COMPLETED",), timeout=30)
    assert sorted(runs.read_text().split()) == sorted(str(j["id"]) for j in jobs)  # each ran once


def test_without_a_lost_reply_nothing_is_said_and_tokens_differ(cluster):
    a = cluster.run("sbatch", "-o", "/dev/null", "--wrap", "true")
    b = cluster.run("sbatch", "-o", "/dev/null", "--wrap", "true")
    assert a.stderr == b.stderr == ""
    assert a.stdout != b.stdout and a.stdout.startswith("Submitted batch job ")
    assert len(_all_jobs(cluster)) == 2
