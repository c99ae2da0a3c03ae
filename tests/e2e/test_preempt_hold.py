"""Preemption holds what it frees (issue 14, point 3), with real processes: the 8 cards run
low-priority training jobs that trap SIGTERM and take ~3 s to end; a higher-QOS job of the
same account preempts one of them, and a job of another account that the allocation order
serves first (account priority 200) competes for the card. Exactly one victim is preempted,
and the preemptor starts on the card it freed; the competitor keeps waiting."""

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from conftest import CONFIG, Cluster

from batchd.cli.client import request

QOS = """
[[qos]]
name = "normal"
priority = 10
preemptible = true
grace_time_s = 20
[[qos]]
name = "high"
priority = 50
preemptible = true
"""

ACCOUNTS = """
[[account]]
name = "train"
priority = 100
users = ["root"]
[account.resources."gres/gpu"]
quota = 4
limit = -1
over_quota_weight = 1

[[account]]
name = "serve"
priority = 200
users = ["root"]
[account.resources."gres/gpu"]
quota = 0
limit = -1
over_quota_weight = 0
"""



@pytest.fixture
def qos_cluster():
    """The dev cluster with two QOS (appended: the `config_extra` merge cannot add an array of
    tables twice). Jobs are ended through the daemon before it stops."""
    root = Path(tempfile.mkdtemp(prefix="batchd-e2e-hold-"))
    os.chmod(root, 0o777)
    c = Cluster(root, CONFIG + QOS)
    try:
        c.start()
        yield c
    finally:
        if c.proc is not None:
            c.run("scancel", "--user", str(os.getuid()), check=False)
            deadline = time.time() + 30
            while time.time() < deadline and c.run("squeue", "-h", "-t", "R", check=False).stdout.strip():
                time.sleep(0.2)
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


SLOW_TERM = "#!/bin/bash\ntrap 'echo got-term; sleep 3; exit 143' TERM\nsleep 300 & wait\n"


def test_one_victim_and_the_freed_card_goes_to_the_preemptor(qos_cluster):
    cluster = qos_cluster
    (cluster.root / "accounts.toml").write_text(ACCOUNTS)
    cluster.run("batchd", "apply", str(cluster.root / "accounts.toml"))
    low = [cluster.submit("-A", "train", "--qos", "normal", "--gres=gpu:1", "--no-requeue", "-J", f"l{i}",
                          input=SLOW_TERM) for i in range(8)]
    for j in low:
        cluster.wait(j, ("RUNNING",))
    x = cluster.submit("-A", "train", "--qos", "high", "--gres=gpu:1", "-J", "x", "--wrap", "sleep 300")
    y = cluster.submit("-A", "serve", "--qos", "normal", "--gres=gpu:1", "-J", "y", "--wrap", "sleep 300")
    os.environ["BATCHD_SOCKET"] = cluster.sock
    t0 = time.time()
    xj = cluster.wait(x, ("RUNNING",), timeout=40)
    took = time.time() - t0
    # let a few more cycles pass: nothing else may be preempted, y still waits
    deadline = time.time() + 3
    while time.time() < deadline:
        assert cluster.job(y)["state"] == "PENDING"
        time.sleep(0.2)
    jobs = {j["id"]: j for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"]}
    ended = [j for j in low if jobs[j]["state"] != "RUNNING"]
    assert len(ended) == 1, {j: jobs[j]["state"] for j in low}
    (v,) = ended
    assert jobs[v]["state"] == "PREEMPTED"
    assert "got-term" in (cluster.root / f"slurm-{v}.out").read_text()
    assert took >= 2, took  # the victim took its time to end: the reservation had to hold
    assert xj["gres"] == jobs[v]["gres"], (xj["gres"], jobs[v]["gres"])  # the card its victim freed
    assert jobs[y]["state"] == "PENDING"
    log = cluster.log.read_text()
    assert re.findall(r"job preempted job_id=(\d+) .*for=(\d+)", log) == [(str(v), str(x))], log[-3000:]
