"""srun --pty (issue 19, item 2) against a real daemon, on real pseudo-terminals: the task
gets a terminal of its own of srun's size, follows its resizes, does job control, and
its end is srun's. The Slurm lines are what a real Slurm 22.05 srun printed."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.harness import BIN
from tests.ptydriver import PtyDriver

#: an interactive shell with a prompt the test can wait for
SHELL = ["sh", "-i"]
PROMPT = r"PTY\$ "


@pytest.fixture
def term(cluster):
    made: list[PtyDriver] = []

    def start(*args: str, rows: int = 24, cols: int = 80) -> PtyDriver:
        env = dict(cluster.env, PS1="PTY$ ", TERM="xterm")
        d = PtyDriver([str(BIN / "srun"), *args], env, str(cluster.root), rows, cols)
        made.append(d)
        return d

    yield start
    for d in made:
        d.close()


def _named(cluster, name):
    from batchd.cli.client import request

    os.environ["BATCHD_SOCKET"] = cluster.sock
    jobs = [j for j in request("GET", "/v1/jobs", query={"all": "1"})["jobs"] if j["name"] == name]
    return jobs[-1]


def test_the_task_has_a_terminal_of_sruns_size_and_its_exit_code(cluster, term):
    t = term("--pty", "-J", "ptyjob", "sh", "-c", "tty; stty size; test -t 0 && echo stdin-is-a-tty; exit 3",
             rows=33, cols=101)
    assert t.wait() == 3
    out = t.text()
    assert "/dev/pts/" in out and "33 101" in out and "stdin-is-a-tty" in out
    assert out.endswith("srun: error: node1: task 0: Exited with exit code 3\r\n")
    job = cluster.wait(_named(cluster, "ptyjob")["id"], ("FAILED",))
    assert job["exit_code"] == "3:0"


def test_an_interactive_shell_resizes_does_job_control_and_ends_the_job(cluster, term):
    t = term("--gres=gpu:1", "-J", "shell", "--pty", *SHELL)
    t.expect(PROMPT)
    t.send("echo gpus=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_ID\n")
    m = t.expect(r"gpus=(\d+) job=(\d+)")
    assert m.group(1) == b"0"
    job_id = int(m.group(2))
    assert cluster.job(job_id)["state"] == "RUNNING"
    t.resize(50, 132)
    time.sleep(0.5)  # srun's SIGWINCH crosses to the task's terminal
    t.send("stty size\n")
    t.expect(r"50 132")
    # Ctrl-C reaches the task's foreground job, not srun: the shell stays
    t.send("sleep 60\n")
    time.sleep(0.5)
    t.send(b"\x03")
    t.expect(PROMPT + r"$", timeout=10)
    t.send("echo still-here\n")
    t.expect("still-here")
    t.send("exit 7\n")
    assert t.wait() == 7
    assert "Exited with exit code 7" in t.text()
    assert cluster.wait(job_id, ("FAILED",))["exit_code"] == "7:0"


def test_without_a_terminal_pty_is_disregarded_as_slurm_does(cluster):
    r = cluster.run("srun", "--pty", "sh", "-c", "tty; exit 2", check=False, input="")
    assert r.returncode == 2
    assert r.stdout == "not a tty\n"
    assert r.stderr.splitlines() == ["srun: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device",
                                     "srun: error: Not using a pseudo-terminal, disregarding --pty option",
                                     "srun: error: node1: task 0: Exited with exit code 2"]


def test_a_batch_jobs_srun_pty_is_disregarded_as_slurm_does(cluster):
    out = cluster.root / "inner.out"
    jid = cluster.submit("-o", str(out), "--wrap", "srun --pty sh -c 'tty; exit 4'; echo rc=$?")
    cluster.wait(jid, ("COMPLETED",))
    lines = out.read_text().splitlines()
    assert lines[:2] == ["srun: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device",
                         "srun: error: Not using a pseudo-terminal, disregarding --pty option"]
    assert "not a tty" in lines and lines[-1] == "rc=4"


def test_the_step_survives_a_daemon_restart(cluster, term):
    t = term("-J", "survivor", "--pty", *SHELL)
    t.expect(PROMPT)
    job_id = _named(cluster, "survivor")["id"]
    cluster.stop(signal.SIGKILL)
    t.send("echo typed-while-down\n")
    t.expect("typed-while-down")
    cluster.start()
    t.send("echo after-restart\n")
    t.expect("after-restart")
    t.send("exit\n")
    assert t.wait() == 0
    assert cluster.wait(job_id, ("COMPLETED",))["state"] == "COMPLETED"


def test_a_lost_terminal_hangs_up_the_task_and_ends_the_job(cluster, term):
    t = term("-J", "orphan", "--pty", *SHELL)
    t.expect(PROMPT)
    job_id = _named(cluster, "orphan")["id"]
    t.kill(signal.SIGKILL)  # srun and its terminal vanish at once
    job = cluster.wait(job_id, ("COMPLETED", "FAILED", "CANCELLED"), timeout=30)
    assert job["state"] != "RUNNING"


def test_the_time_limit_ends_the_session(cluster, term):
    from batchd.cli.client import request

    t = term("-t", "1", "-J", "short", "--pty", *SHELL)
    t.expect(PROMPT)
    job_id = _named(cluster, "short")["id"]
    os.environ["BATCHD_SOCKET"] = cluster.sock  # the wire takes seconds: 3 s from the start
    assert request("POST", "/v1/jobs/update", {"ids": [str(job_id)], "changes": {"time_limit_s": 3}})["errors"] == []
    rc = t.wait(timeout=40)
    assert rc > 128, t.text()  # the shell killed by a signal (an interactive sh outlives SIGTERM)
    assert f"slurmstepd: error: *** JOB {job_id} ON node1 CANCELLED AT " in t.text()
    assert " DUE TO TIME LIMIT ***" in t.text()
    assert cluster.wait(job_id, ("TIMEOUT",))["state"] == "TIMEOUT"


def test_a_stranger_without_the_key_gets_nothing(cluster, term):
    """Whoever finds srun's port and connects is dropped; srun still gets its task."""
    import socket

    from batchd.cli import ptychannel as pc

    t = term("-J", "guarded", "--pty", *SHELL)
    t.expect(PROMPT)
    pid = t.pid
    ports = set()
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if f"pid={pid}," in line:
            ports.add(int(line.split()[3].rsplit(":", 1)[1]))
    for port in ports:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        with pytest.raises(pc.ChannelError):
            pc.connect(s, pc.new_key())
        s.close()
    t.send("echo fine\n")
    t.expect("fine")
    t.send("exit\n")
    assert t.wait() == 0


def test_srun_pty_in_salloc_runs_a_step_on_the_allocation(cluster):
    env = dict(cluster.env, TERM="xterm")
    d = PtyDriver([str(BIN / "salloc"), "--gres=gpu:h200:2", "srun", "--pty", "sh", "-c",
                   "tty; stty size; echo gpus=$CUDA_VISIBLE_DEVICES step=$SLURM_STEP_ID; exit 5"],
                  env, str(cluster.root), 40, 120)
    try:
        assert d.wait() == 5
        out = d.text()
        assert "salloc: Granted job allocation" in out and "/dev/pts/" in out and "40 120" in out
        assert "gpus=0,1 step=0" in out
        assert "srun: error: node1: task 0: Exited with exit code 5" in out
    finally:
        d.close()
