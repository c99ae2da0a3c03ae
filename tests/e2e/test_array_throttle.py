"""The array throttle with real processes (issue 15): `sbatch --array=0-3%1` runs one task at a
time and `bsub -J "x[1-4]%2"` two, however many cards are idle (every task used to start at once)."""

import os
import time

from batchd.cli.client import request


def _max_running(cluster, array_id: int, tasks: int, timeout: float = 60) -> int:
    """Poll the array's tasks until all have ended; the most seen RUNNING at once."""
    os.environ["BATCHD_SOCKET"] = cluster.sock
    most = 0
    deadline = time.time() + timeout
    while time.time() < deadline:
        jobs = [j for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"]
                if j.get("array_job_id") == array_id]
        running = sum(1 for j in jobs if j["state"] == "RUNNING")
        most = max(most, running)
        if len(jobs) == tasks and all(j["state"] in ("COMPLETED", "FAILED", "CANCELLED") for j in jobs):
            assert all(j["state"] == "COMPLETED" for j in jobs), jobs
            return most
        time.sleep(0.05)
    raise AssertionError(f"array {array_id} did not finish")


def test_sbatch_array_throttle_runs_one_task_at_a_time(cluster):
    jid = cluster.submit("--array=0-3%1", "--gres=gpu:1", "--wrap", "sleep 1")
    assert _max_running(cluster, jid, 4) == 1


def test_bsub_array_throttle_runs_two_at_a_time(cluster):
    out = cluster.run("bsub", "-J", "x[1-4]%2", "sleep 1").stdout
    jid = int(out.split("<", 1)[1].split(">", 1)[0])
    assert _max_running(cluster, jid, 4) == 2
