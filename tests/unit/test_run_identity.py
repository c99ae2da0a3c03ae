"""Run identity: a running job is never taken for lost because the daemon sees another
boot id (systemd-nspawn, `ProtectKernelTunables=`) or another pid namespace than the
job's supervisor. The supervisor's flock on its run directory's lock is the identity both
sides agree on; a dead supervisor is still LOST at once, and each run ends recorded once."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from batchd.config import parse_config
from batchd.model import Job
from batchd.node import launcher, spool
from batchd.node.agent import Agent
from batchd.store import Store
from batchd.store.migrate import upgrade

FOREIGN_NS = "pid:[1]"  # no real pid namespace has inode 1


@pytest.fixture
def spool_dir():
    root = tempfile.mkdtemp(prefix="batchd-ident-", dir="/tmp")
    os.chmod(root, 0o711)
    path = os.path.join(root, "spool")
    yield path
    for job_id, run in launcher.list_runs(path):
        started = launcher.read_json(os.path.join(launcher.jobdir_path(path, job_id, run), launcher.STARTED))
        if started:
            pid = spool.supervisor_here(started)
            if pid:
                os.kill(pid, signal.SIGKILL)
            with_pgid = int(started["pgid"]) if spool.pids_are_local(started) else 0
            if with_pgid:
                try:
                    os.killpg(with_pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    shutil.rmtree(root, ignore_errors=True)


def _request(tmp_path: Path, script: str, job_id: int = 1) -> launcher.LaunchRequest:
    pw = pwd.getpwuid(os.getuid())
    out = str(tmp_path / f"slurm-{job_id}.out")
    return launcher.LaunchRequest(
        job_id=job_id, run=0, user=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid, groups=None, home=pw.pw_dir,
        workdir=str(tmp_path), script=script, argv=[], env={"PATH": "/usr/bin:/bin"}, stdout=out, stderr=out,
        kill_wait_s=1)


def _wait_state(spool_dir: str, job_id: int, want: str, timeout_s: float = 30.0) -> launcher.RunStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        st = launcher.poll(spool_dir, job_id, 0)
        if st.state == want:
            return st
        assert st.state == "RUNNING", st
        assert time.monotonic() < deadline, f"run still {st.state}, never {want}"
        time.sleep(0.02)


def _started(info: launcher.LaunchInfo) -> dict:
    return json.loads((Path(info.jobdir) / launcher.STARTED).read_text())


# ---------------------------------------------------------------- the daemon sees another boot id


def test_other_boot_id_in_the_daemons_view_keeps_the_run_running(spool_dir, tmp_path, monkeypatch):
    req = _request(tmp_path, "#!/bin/bash\nsleep 1\necho done\n")
    info = launcher.launch(req, spool_dir)
    assert _started(info)["boot_id"] == spool.boot_id()  # recorded as the supervisor saw it
    monkeypatch.setattr(spool, "boot_id", lambda: "00000000-0000-0000-0000-000000000000")
    st = launcher.poll(spool_dir, req.job_id, 0)
    assert st.state == "RUNNING" and st.pid == info.pid  # same pid namespace: its pid is usable
    done = _wait_state(spool_dir, req.job_id, "EXITED")
    assert done.final_state == "COMPLETED" and Path(req.stdout).read_text() == "done\n"


def test_dead_supervisor_is_lost_whatever_the_boot_id(spool_dir, tmp_path, monkeypatch):
    req = _request(tmp_path, "#!/bin/bash\nsleep 30\n")
    info = launcher.launch(req, spool_dir)
    monkeypatch.setattr(spool, "boot_id", lambda: "00000000-0000-0000-0000-000000000000")
    os.kill(_started(info)["supervisor_pid"], signal.SIGKILL)
    _wait_state(spool_dir, req.job_id, "LOST", timeout_s=10)
    launcher.terminate(spool_dir, req.job_id, 0, "node_fail", grace_s=0)
    deadline = time.monotonic() + 10
    while psutil.pid_exists(info.pid) and psutil.Process(info.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the lost run's job was not killed"
        time.sleep(0.02)


@pytest.fixture
def agent(tmp_path):
    cfg = parse_config({"state_dir": str(tmp_path), "scheduler": {"kill_wait_s": 1},
                        "node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]})
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    pw = pwd.getpwuid(os.getuid())
    spec = {"script": f"#!/bin/sh\nsleep 1.5\necho ran >> {tmp_path / 'count'}\n", "workdir": str(tmp_path),
            "environment": {"PATH": "/usr/bin:/bin"}, "output": str(tmp_path / "out.txt")}
    store.insert_jobs([Job(id=7, name="j", user=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid, account="default",
                           partition="batch", qos="normal", state="RUNNING", submit_time=time.time(), spec=spec,
                           request={"tasks": 1, "per_task": {"cpu": 1}}, start_time=time.time(),
                           allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100}},
                           node_list="n1", tres_alloc="cpu=1,mem=100M,node=1")])
    yield Agent(cfg, store, ["n1"]), store, tmp_path
    store.close()


def test_agent_with_another_boot_id_records_the_run_once(agent, monkeypatch):
    ag, store, tmp = agent
    monkeypatch.setattr(spool, "boot_id", lambda: "11111111-1111-1111-1111-111111111111")
    deadline = time.time() + 30
    while time.time() < deadline:
        ag.step()
        j = store.get_job(7)
        if j.state != "RUNNING":
            break
        time.sleep(0.05)
    assert (j.state, j.restarts) == ("COMPLETED", 0)
    assert [u.state for u in store.list_usage(job_ids=[7])] == ["COMPLETED"]
    assert (tmp / "count").read_text() == "ran\n"


# ---------------------------------------------------------------- the daemon sees another pid namespace


def test_recorded_pids_of_another_pid_namespace_are_never_signalled(spool_dir, tmp_path):
    # A supervisor in another pid namespace recorded pids that name other processes
    # here: a live stranger with the supervisor's pid must get no SIGUSR1 (it would die).
    req = _request(tmp_path, "#!/bin/bash\nsleep 30\n")
    info = launcher.launch(req, spool_dir)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        started = _started(info)
        started.update(supervisor_pid=stranger.pid, pid_ns=FOREIGN_NS)
        spool.write_json_atomic(os.path.join(info.jobdir, launcher.STARTED), started)
        st = launcher.poll(spool_dir, req.job_id, 0)
        assert st.state == "RUNNING" and st.pid == 0  # alive; its pid is not ours to use
        launcher.terminate(spool_dir, req.job_id, 0, "cancel", grace_s=1)
        done = _wait_state(spool_dir, req.job_id, "EXITED")  # the supervisor found the request itself
        assert done.final_state == "CANCELLED"
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_recorded_pid_missing_here_while_the_lock_is_held_is_running(spool_dir, tmp_path):
    req = _request(tmp_path, "#!/bin/bash\nsleep 0.8\necho done\n")
    info = launcher.launch(req, spool_dir)
    started = _started(info)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that names no process in this view
    started.update(supervisor_pid=gone.pid, pid=gone.pid, pgid=gone.pid, pid_ns=FOREIGN_NS)
    spool.write_json_atomic(os.path.join(info.jobdir, launcher.STARTED), started)
    assert launcher.poll(spool_dir, req.job_id, 0).state == "RUNNING"
    done = _wait_state(spool_dir, req.job_id, "EXITED")
    assert done.final_state == "COMPLETED" and done.pid == info.pid


def test_without_flock_the_recorded_identity_decides(spool_dir, tmp_path, monkeypatch):
    # A file system that cannot tell whether the lock is held: pid + start ticks + boot id.
    req = _request(tmp_path, "#!/bin/bash\nsleep 30\n")
    info = launcher.launch(req, spool_dir)
    monkeypatch.setattr(spool, "lock_state", lambda jobdir: None)
    assert launcher.poll(spool_dir, req.job_id, 0).state == "RUNNING"
    started = _started(info)
    started["supervisor_start_ticks"] = int(started["supervisor_start_ticks"]) + 1  # pid reused
    spool.write_json_atomic(os.path.join(info.jobdir, launcher.STARTED), started)
    assert launcher.poll(spool_dir, req.job_id, 0).state == "LOST"


# ---------------------------------------------------------------- real namespaces (root only)

IN_NAMESPACE = """
import json, os, sys, time
from batchd.node import launcher
req = launcher.LaunchRequest(**json.loads(sys.argv[2]))
info = launcher.launch(req, sys.argv[1])
print(info.pid, os.readlink("/proc/self/ns/pid"), flush=True)
# pid 1 of the namespace: its processes die with it, so stay until the run has ended
while not os.path.exists(os.path.join(info.jobdir, launcher.EXIT)):
    time.sleep(0.05)
"""

POLL_FROM_VIEW = """
import sys
from batchd.node import launcher
st = launcher.poll(sys.argv[1], int(sys.argv[2]), 0)
print(st.state, st.pid, open("/proc/sys/kernel/random/boot_id").read().strip(), flush=True)
"""


def _unshare(*args: str) -> list[str]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to make namespaces")
    probe = subprocess.run(["unshare", *args, "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot make namespaces here: unshare {' '.join(args)}: {probe.stderr.strip()}")
    return ["unshare", *args]


@pytest.mark.root
def test_supervisor_in_another_pid_namespace_is_running_and_ends_once(spool_dir, tmp_path):
    cmd = _unshare("--pid", "--fork", "--mount-proc")
    req = _request(tmp_path, f"#!/bin/bash\nsleep 1.5\necho done >> {tmp_path}/count\n")
    ns = subprocess.Popen([*cmd, sys.executable, "-c", IN_NAMESPACE, spool_dir, json.dumps(req.to_json())],
                          stdout=subprocess.PIPE, text=True)
    try:
        line = ns.stdout.readline().split()
        assert line, "launch inside the namespace failed"
        inner_pid, inner_ns = int(line[0]), line[1]
        started = json.loads((Path(launcher.jobdir_path(spool_dir, req.job_id, 0)) / launcher.STARTED).read_text())
        assert started["pid_ns"] == inner_ns != spool.pid_namespace() and started["pid"] == inner_pid
        st = launcher.poll(spool_dir, req.job_id, 0)
        assert st.state == "RUNNING" and st.pid == 0
        done = _wait_state(spool_dir, req.job_id, "EXITED")
        assert done.final_state == "COMPLETED" and done.pid == inner_pid
        assert (tmp_path / "count").read_text() == "done\n"
        assert ns.wait(timeout=30) == 0
    finally:
        if ns.poll() is None:
            ns.kill()
            ns.wait()


@pytest.mark.root
def test_cancel_reaches_a_supervisor_in_another_pid_namespace(spool_dir, tmp_path):
    cmd = _unshare("--pid", "--fork", "--mount-proc")
    req = _request(tmp_path, "#!/bin/bash\nsleep 60\n", job_id=2)
    ns = subprocess.Popen([*cmd, sys.executable, "-c", IN_NAMESPACE, spool_dir, json.dumps(req.to_json())],
                          stdout=subprocess.PIPE, text=True)
    try:
        assert ns.stdout.readline().split(), "launch inside the namespace failed"
        launcher.terminate(spool_dir, req.job_id, 0, "cancel", grace_s=1)
        done = _wait_state(spool_dir, req.job_id, "EXITED", timeout_s=15)
        assert done.final_state == "CANCELLED"
        assert ns.wait(timeout=30) == 0
    finally:
        if ns.poll() is None:
            ns.kill()
            ns.wait()


@pytest.mark.root
@pytest.mark.parametrize("daemon_view", ["boot_id", "pid_ns"])
def test_daemon_in_another_view_sees_a_host_run_running(spool_dir, tmp_path, daemon_view):
    # The nspawn case for real: the daemon's mount namespace has another boot id bind-mounted
    # over /proc/sys/kernel/random/boot_id (or the daemon is in a pid namespace of its own).
    if daemon_view == "boot_id":
        fake = tmp_path / "boot_id"
        fake.write_text("22222222-2222-2222-2222-222222222222\n")
        cmd = [*_unshare("--mount"), "sh", "-c",
               f'mount --bind {fake} /proc/sys/kernel/random/boot_id && exec "$0" "$@"']
    else:
        cmd = _unshare("--pid", "--fork", "--mount-proc")
    req = _request(tmp_path, "#!/bin/bash\nsleep 1.5\necho done\n", job_id=3)
    info = launcher.launch(req, spool_dir)
    p = subprocess.run([*cmd, sys.executable, "-c", POLL_FROM_VIEW, spool_dir, str(req.job_id)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    state, pid, seen_boot = p.stdout.split()
    assert state == "RUNNING"
    if daemon_view == "boot_id":
        assert seen_boot != spool.boot_id() and int(pid) == info.pid
    else:
        assert int(pid) == 0
    done = _wait_state(spool_dir, req.job_id, "EXITED")
    assert done.final_state == "COMPLETED" and Path(req.stdout).read_text() == "done\n"
