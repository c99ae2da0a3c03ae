"""Team quotas on the running dev cluster: training borrows every idle card, notebooks
comes back and reclaims its quota within seconds; the victims get SIGTERM, are
requeued with the same id, and sacct shows both runs."""

import os
import time
from pathlib import Path

from batchd.cli.client import request

ROOT = Path(__file__).resolve().parents[2]


def test_training_borrows_then_notebooks_reclaims(cluster):
    first = cluster.run("batchd", "apply", str(ROOT / "examples" / "accounts-16gpu.toml")).stdout
    assert "+ account training" in first and "+ price" in first, first
    # applying the same file again changes nothing (idempotent)
    assert cluster.run("batchd", "apply", str(ROOT / "examples" / "accounts-16gpu.toml")).stdout.strip() == "no changes"
    # 2 nodes x 4 GPUs here: training fills all 8 cards with 1-GPU jobs that log SIGTERM
    script = "#!/bin/bash\ntrap 'echo got-term; exit 143' TERM\necho start $SLURM_RESTART_COUNT\nsleep 300 & wait\n"
    train = [cluster.submit("-A", "training", "--gres=gpu:1", "--requeue", "-J", f"t{i}", input=script)
             for i in range(8)]
    for j in train:
        cluster.wait(j, ("RUNNING",))
    nb = [cluster.submit("-A", "notebooks", "--gres=gpu:1", "--wrap", "sleep 300") for _ in range(2)]
    t0 = time.time()
    for j in nb:
        cluster.wait(j, ("RUNNING",), timeout=30)
    took = time.time() - t0
    assert took < 20, took
    os.environ["BATCHD_SOCKET"] = cluster.sock
    jobs = {j["id"]: j for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"]}
    victims = [j for j in train if jobs[j]["restarts"] == 1]
    assert len(victims) == 2, {j: (jobs[j]["state"], jobs[j]["restarts"]) for j in train}
    for v in victims:
        assert jobs[v]["state"] == "PENDING"
        out = (cluster.root / f"slurm-{v}.out").read_text()
        assert "got-term" in out, out
    # the newest borrowed jobs are the victims (KAI's victim order)
    assert sorted(victims) == sorted(train)[-2:]
    rows = request("GET", "/v1/accounting", query={"ids": str(victims[0]), "duplicates": "1"})["records"]
    states = [r["state"] for r in rows if r["step"] is None]
    assert states[0] in ("PREEMPTED", "REQUEUED") and states[-1] == "PENDING", states


def test_interactive_jobs_count_in_the_quota_and_are_never_the_reclaimed_ones(cluster):
    """srun jobs of the (default) interactive QOS hold cards of their account's quota like
    batch jobs; when the owner of lent cards comes back, the borrowed batch jobs are
    reclaimed and the interactive sessions stream on to their end."""
    import subprocess

    from tests.harness import BIN

    cluster.run("batchd", "apply", str(ROOT / "examples" / "accounts-16gpu.toml"))
    sessions = [subprocess.Popen([str(BIN / "srun"), "-A", "training", "-q", "interactive", "--gres=gpu:1", "-J",
                                  f"s{i}", "sh", "-c", "for i in $(seq 12); do echo tick; sleep 1; done"],
                                 env=cluster.env, cwd=cluster.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for i in range(2)]
    for p in sessions:
        assert p.stdout.readline() == "tick\n"  # running, streaming
    batch = [cluster.submit("-A", "training", "--gres=gpu:1", "--requeue", "--wrap", "sleep 300") for _ in range(6)]
    for j in batch:
        cluster.wait(j, ("RUNNING",))
    os.environ["BATCHD_SOCKET"] = cluster.sock
    jobs = {j["name"]: j for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"]}
    assert jobs["s0"]["qos"] == "interactive" and jobs["s0"]["account"] == "training"
    nb = [cluster.submit("-A", "notebooks", "--gres=gpu:1", "--wrap", "sleep 300") for _ in range(2)]
    for j in nb:
        cluster.wait(j, ("RUNNING",), timeout=30)
    now = {j["id"]: j for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"]}
    assert sum(1 for j in batch if now[j]["restarts"] == 1) == 2  # the borrowed batch jobs went
    for name in ("s0", "s1"):
        assert now[jobs[name]["id"]]["state"] == "RUNNING" and now[jobs[name]["id"]]["restarts"] == 0
    for p in sessions:
        out, _err = p.communicate(timeout=60)
        assert p.returncode == 0 and out.count("tick") == 11  # the other 11 of 12
    for name in ("s0", "s1"):
        done = cluster.wait(jobs[name]["id"], ("COMPLETED",))
        billing = float(dict(kv.split("=") for kv in done["tres_alloc"].split(","))["billing"])
        assert billing > 0  # billed as any job
