"""salloc against a real daemon (issue 19, item 3): the allocation's messages as a real
Slurm 22.05 salloc printed them, the command run here with the allocation's variables,
srun inside on its GPUs, the exit code kept by the job, and a revoked allocation."""

from __future__ import annotations

import os
import subprocess
import time

from tests.e2e.test_srun_outside import _named
from tests.harness import BIN


def test_the_command_runs_here_in_the_allocation_and_srun_uses_it(cluster):
    r = cluster.run("salloc", "--gres=gpu:h200:2", "sh", "-c",
                    'echo $SLURM_JOB_ID $SLURM_JOB_NODELIST $SLURM_JOB_NAME $SLURM_NNODES; '
                    'srun sh -c "echo \\$CUDA_VISIBLE_DEVICES"; exit 4', check=False)
    assert r.returncode == 4, r.stderr
    first, gpus = r.stdout.splitlines()
    jid, node, name, nnodes = first.split()
    assert node in ("node1", "node2") and name == "interactive" and nnodes == "1"
    assert gpus == "0,1"
    assert r.stderr.splitlines() == [f"salloc: Granted job allocation {jid}",
                                     f"salloc: Relinquishing job allocation {jid}"]
    job = cluster.wait(int(jid), ("FAILED",))
    assert job["exit_code"] == "4:0"  # the command's code, as Slurm's sacct shows it


def test_the_default_command_is_the_users_shell(cluster):
    env = dict(cluster.env, SHELL="/bin/sh")
    r = subprocess.run([str(BIN / "salloc"), "-Q"], env=env, cwd=cluster.root, input="echo in $SLURM_JOB_ID\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("in ") and r.stdout.split()[1].isdigit()


def test_a_waiting_allocation_says_so_as_slurm_does(cluster):
    blocker = cluster.submit("-N", "2", "--gres=gpu:4", "--wrap", "sleep 4")
    cluster.wait(blocker, ("RUNNING",))
    r = cluster.run("salloc", "--gres=gpu:1", "-J", "waiter", "true")
    jid = _named(cluster, "waiter", states=("COMPLETED",))["id"]
    assert r.stderr.splitlines() == [f"salloc: Pending job allocation {jid}",
                                     f"salloc: job {jid} queued and waiting for resources",
                                     f"salloc: job {jid} has been allocated resources",
                                     f"salloc: Granted job allocation {jid}",
                                     f"salloc: Relinquishing job allocation {jid}"]


def test_scancel_revokes_the_allocation_and_salloc_waits_for_the_command(cluster):
    """As Slurm 22.05's salloc (recorded): `salloc sh -c 'sleep 20; echo after'`, scancel'd
    after 4 s, said `salloc: Job allocation N has been revoked.`, the command went on to
    print `after`, and salloc exited 0, the command's code."""
    p = subprocess.Popen([str(BIN / "salloc"), "-J", "held", "sh", "-c", "sleep 3; echo after"], env=cluster.env,
                         cwd=cluster.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = _named(cluster, "held")
    time.sleep(1)  # the command has started
    cluster.run("scancel", str(job["id"]))
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and out == "after\n"
    assert err.splitlines() == [f"salloc: Granted job allocation {job['id']}",
                                f"salloc: Job allocation {job['id']} has been revoked."]
    assert cluster.job(job["id"])["state"] == "CANCELLED"


def test_kill_command_signals_the_command_when_revoked(cluster):
    p = subprocess.Popen([str(BIN / "salloc"), "-J", "killed", "--kill-command=INT", "sleep", "60"],
                         env=cluster.env, cwd=cluster.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = _named(cluster, "killed")
    time.sleep(1)
    cluster.run("scancel", str(job["id"]))
    _out, err = p.communicate(timeout=30)
    assert p.returncode == 130  # sleep ended by SIGINT
    assert f"salloc: Job allocation {job['id']} has been revoked." in err.splitlines()
    bad = cluster.run("salloc", "--kill-command=NOPE", "true", check=False)
    assert (bad.returncode, bad.stderr) == (1, "salloc: error: Invalid signal specification: NOPE\n")


def test_the_commands_variables_are_slurm_sallocs(cluster):
    """The SLURM_* set a real Slurm 22.05 salloc gave `salloc -n 2 -c 2 --mem=1G
    --gres=gpu:h200:2` (SLURM_CONF aside: batchd has no slurm.conf); no GPU variables and
    no task variables (those are srun's)."""
    r = cluster.run("salloc", "-n", "2", "-c", "2", "--mem=1G", "--gres=gpu:h200:2", "sh", "-c",
                    'env | grep -E "^(SLURM|CUDA)" | sort')
    env = dict(line.split("=", 1) for line in r.stdout.splitlines())
    jid = env["SLURM_JOB_ID"]
    node = env["SLURM_JOB_NODELIST"]
    assert env == {
        "SLURM_CLUSTER_NAME": "e2e", "SLURM_CPUS_PER_TASK": "2", "SLURM_JOBID": jid, "SLURM_JOB_ACCOUNT": env[
            "SLURM_JOB_ACCOUNT"], "SLURM_JOB_CPUS_PER_NODE": "4", "SLURM_JOB_ID": jid,
        "SLURM_JOB_NAME": "interactive", "SLURM_JOB_NODELIST": node, "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_QOS": "normal", "SLURM_MEM_PER_NODE": "1024", "SLURM_NNODES": "1",
        "SLURM_NODELIST": node, "SLURM_NODE_ALIASES": "(null)", "SLURM_NPROCS": "2", "SLURM_NTASKS": "2",
        "SLURM_SUBMIT_DIR": str(cluster.root), "SLURM_SUBMIT_HOST": os.uname().nodename.split(".")[0],
        "SLURM_TASKS_PER_NODE": "2"}
