"""srun outside a job against a real daemon (issue 19, item 1): a job for the command, its
output streamed, its exit code, Slurm's messages while it waits, Ctrl-C, several tasks.
The expected lines are what a real Slurm 22.05 srun printed for the same commands."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.harness import BIN


def _popen(cluster, *args):
    return subprocess.Popen([str(BIN / "srun"), *args], env=cluster.env, cwd=cluster.root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _named(cluster, name, states=("RUNNING",), timeout=30):
    from batchd.cli.client import request

    os.environ["BATCHD_SOCKET"] = cluster.sock
    deadline = time.time() + timeout
    while time.time() < deadline:
        jobs = [j for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"] if j["name"] == name]
        if jobs and jobs[-1]["state"] in states:
            return jobs[-1]
        time.sleep(0.1)
    raise AssertionError(f"no job {name} in {states}")


def test_the_command_runs_as_a_job_with_its_output_and_exit_code(cluster):
    r = cluster.run("srun", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert r.returncode == 3
    assert r.stdout == "out\n"
    lines = r.stderr.splitlines()
    assert "err" in lines
    assert lines[-1].startswith("srun: error: node") and lines[-1].endswith(": task 0: Exited with exit code 3")
    assert "queued" not in r.stderr  # it started at once: no waiting messages
    job = _named(cluster, "sh", states=("FAILED",))
    assert job["exit_code"] == "3:0" and job["partition"] == "gpu"
    sacct = cluster.run("sacct", "-X", "-n", "-j", str(job["id"]), "-o", "jobname,state,exitcode").stdout.split()
    assert sacct == ["sh", "FAILED", "3:0"]
    ok = cluster.run("srun", "true")
    assert ok.returncode == 0 and ok.stdout == "" and ok.stderr == ""


def test_gpus_are_pinned_and_labels_prefix_every_line(cluster):
    r = cluster.run("srun", "-l", "--gres=gpu:h200:2", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES; printf last")
    assert r.stdout.splitlines() == ["0: 0,1", "0: last"]


def test_several_tasks_run_as_one_step_on_the_jobs_nodes(cluster):
    r = cluster.run("srun", "-N", "2", "-n", "4", "-l", "sh", "-c", "echo $SLURM_PROCID $SLURMD_NODENAME")
    got = sorted(r.stdout.splitlines())
    assert [line.split()[:2] for line in got] == [["0:", "0"], ["1:", "1"], ["2:", "2"], ["3:", "3"]]
    assert {line.split()[2] for line in got} == {"node1", "node2"}


def test_output_is_streamed_while_the_command_runs(cluster):
    p = _popen(cluster, "sh", "-c", "echo first; sleep 4; echo second")
    t0 = time.monotonic()
    first = p.stdout.readline()
    seen_after = time.monotonic() - t0
    assert first == "first\n" and p.poll() is None and seen_after < 3.5, seen_after
    out, _err = p.communicate(timeout=30)
    assert out == "second\n" and p.returncode == 0


def test_a_job_that_must_wait_says_so_as_slurm_does(cluster):
    blocker = cluster.submit("-N", "2", "--gres=gpu:4", "--wrap", "sleep 4")
    cluster.wait(blocker, ("RUNNING",))
    r = cluster.run("srun", "--gres=gpu:1", "-J", "second", "echo", "hello")
    assert r.stdout == "hello\n"
    jid = _named(cluster, "second", states=("COMPLETED",))["id"]
    assert r.stderr.splitlines() == [f"srun: job {jid} queued and waiting for resources",
                                     f"srun: job {jid} has been allocated resources"]
    blocker = cluster.submit("-N", "2", "--gres=gpu:4", "--wrap", "sleep 3")
    cluster.wait(blocker, ("RUNNING",))
    quiet = cluster.run("srun", "-Q", "--gres=gpu:1", "echo", "hi")
    assert quiet.stdout == "hi\n" and quiet.stderr == ""


def test_ctrl_c_once_reports_twice_cancels(cluster):
    p = _popen(cluster, "-J", "longone", "sleep", "60")
    job = _named(cluster, "longone")
    p.send_signal(signal.SIGINT)
    time.sleep(1.5)  # more than a second: a second report, not an abort
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    _out, err = p.communicate(timeout=30)
    assert p.returncode == 130
    lines = err.splitlines()
    assert lines[:2] == ["srun: interrupt (one more within 1 sec to abort)",
                         f"srun: StepId={job['id']}.batch task 0: running"]
    assert lines.count("srun: interrupt (one more within 1 sec to abort)") == 2
    assert f"srun: sending Ctrl-C to StepId={job['id']}.batch" in lines and "srun: forcing job termination" in lines
    assert cluster.wait(job["id"], ("CANCELLED",))["state"] == "CANCELLED"


def test_refusals_are_srun_s(cluster):
    bad = cluster.run("srun", "--bogus", "true", check=False)
    assert bad.returncode == 255 and "unrecognized option '--bogus'" in bad.stderr
    none = cluster.run("srun", "-N", "1", check=False)
    assert none.returncode == 1 and none.stderr == "srun: fatal: No command given to execute.\n"
    big = cluster.run("srun", "--gres=gpu:9", "true", check=False)
    assert big.returncode == 1
    assert big.stderr == "srun: error: Unable to allocate resources: Requested node configuration is not available\n"


def test_stdin_goes_to_the_task(cluster):
    r = cluster.run("srun", "-l", "cat", input="a\nb\n")
    assert r.stdout == "0: a\n0: b\n"
    # a task that never reads its stdin: srun ends with it, whatever waits on the pipe
    p = subprocess.Popen(f"yes | {BIN / 'srun'} true", shell=True, env=cluster.env, cwd=cluster.root,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.wait(timeout=30) == 0


INTERACTIVE_QOS = """
[[qos]]
name = "normal"
[[qos]]
name = "interactive"
preemptible = false
max_wall = "8:00:00"
idle_timeout = "1:00:00"
"""


@pytest.mark.config_extra(INTERACTIVE_QOS)
def test_an_interactive_qos_bounds_time_and_is_billed_like_a_batch_job(cluster):
    """The examples' interactive QOS: a longer -t is refused as Slurm refuses it, no -t
    gets its MaxWall, and the job is an ordinary job for accounting (its billing)."""
    big = cluster.run("srun", "-q", "interactive", "-t", "9:00:00", "true", check=False)
    assert big.returncode == 1
    assert big.stderr == ("srun: error: Unable to allocate resources: Requested time limit is invalid "
                          "(missing or exceeds some limit)\n")
    r = cluster.run("srun", "-q", "interactive", "--gres=gpu:2", "-J", "inter", "sh", "-c", "sleep 1")
    assert r.returncode == 0
    job = _named(cluster, "inter", states=("COMPLETED",))
    assert job["qos"] == "interactive" and job["time_limit_s"] == 8 * 3600
    # billed as any job of the cluster's weights (CPU=1.0,Mem=0.25G,GRES/gpu=2.0): 2 GPUs = 4
    billing = dict(kv.split("=") for kv in job["tres_alloc"].split(","))["billing"]
    assert int(billing) >= 4
    row = cluster.run("sacct", "-X", "-n", "-P", "-j", str(job["id"]), "-o", "qos,state,timelimit").stdout.split("|")
    assert [c.strip() for c in row] == ["interactive", "COMPLETED", "08:00:00"]


def test_the_time_limit_ends_the_task_with_slurms_lines(cluster):
    """Slurm 22.05's srun at its time limit (recorded): slurmstepd's `*** STEP N.0 ON vm
    CANCELLED AT ... DUE TO TIME LIMIT ***`, `srun: error: vm: task 0: Terminated`, exit 143
    (batchd names the job, whose batch step is srun's task)."""
    from batchd.cli.client import request

    p = _popen(cluster, "-t", "1", "-J", "limited", "sh", "-c", "echo start; sleep 60")
    job = _named(cluster, "limited")
    assert p.stdout.readline() == "start\n"
    os.environ["BATCHD_SOCKET"] = cluster.sock  # the wire takes seconds: 3 s from its start
    assert request("POST", "/v1/jobs/update", {"ids": [str(job["id"])], "changes": {"time_limit_s": 3}})["errors"] == []
    _out, err = p.communicate(timeout=40)
    assert p.returncode == 143, err
    lines = err.splitlines()
    assert lines[-1] == "srun: error: node1: task 0: Terminated"
    assert lines[-2].startswith(f"slurmstepd: error: *** JOB {job['id']} ON node1 CANCELLED AT ")
    assert lines[-2].endswith(" DUE TO TIME LIMIT ***")
    assert cluster.wait(job["id"], ("TIMEOUT",))["state"] == "TIMEOUT"
