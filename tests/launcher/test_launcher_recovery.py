"""A job is never started twice, survives its daemon, and a dead supervisor is LOST."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import psutil
import pytest

from batchd.node import launcher

COUNTING = "#!/bin/bash\necho run >> {counter}\nsleep {secs}\n"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_launch_twice_never_starts_a_second_copy(jobs):
    counter = jobs.workdir / "count"
    req = jobs.request(COUNTING.format(counter=counter, secs=0.5))
    first = launcher.launch(req, jobs.spool)
    again = launcher.launch(req, jobs.spool)
    assert again == first
    jobs.wait(req)
    assert launcher.launch(req, jobs.spool) == first  # after the end too
    assert counter.read_text() == "run\n"


def test_concurrent_launches_start_one_copy(jobs):
    counter = jobs.workdir / "count"
    req = jobs.request(COUNTING.format(counter=counter, secs=0.3))
    infos: list[launcher.LaunchInfo] = []
    threads = [threading.Thread(target=lambda: infos.append(launcher.launch(req, jobs.spool)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(infos) == 4 and len(set(infos)) == 1
    assert jobs.wait(req).final_state == "COMPLETED"
    assert counter.read_text() == "run\n"


def test_each_run_has_its_own_directory(jobs):
    counter = jobs.workdir / "count"
    first = jobs.request(COUNTING.format(counter=counter, secs=0), job_id=5, run=0)
    second = jobs.request(COUNTING.format(counter=counter, secs=0), job_id=5, run=1)
    a, b = launcher.launch(first, jobs.spool), launcher.launch(second, jobs.spool)
    jobs.wait(first), jobs.wait(second)
    assert a.jobdir != b.jobdir and a.pid != b.pid
    assert counter.read_text() == "run\nrun\n"


def test_directory_left_by_a_crash_before_spawn_is_started_once(jobs):
    # The daemon died after creating the run's directory but before starting the
    # supervisor: the job never ran, so launch starts it (once).
    counter = jobs.workdir / "count"
    req = jobs.request(COUNTING.format(counter=counter, secs=0))
    os.makedirs(jobs.spool, exist_ok=True)
    os.rename(launcher._write_staging(req, jobs.spool), launcher.jobdir_path(jobs.spool, req.job_id, 0))
    assert launcher.poll(jobs.spool, req.job_id, 0).state == "LOST"
    info = launcher.launch(req, jobs.spool)
    assert info.pid > 0
    assert jobs.wait(req).final_state == "COMPLETED"
    assert launcher.launch(req, jobs.spool) == info
    assert counter.read_text() == "run\n"


def test_started_record_exists_before_the_job_runs(jobs):
    status, out = jobs.run('#!/bin/bash\ntest -s "$(dirname "$0")/started.json" && echo recorded\n')
    assert status.final_state == "COMPLETED" and out == "recorded\n"


def test_killed_supervisor_makes_the_run_lost_and_terminate_kills_the_orphan(jobs):
    req, info = jobs.launch("#!/bin/bash\nsleep 30\n")
    started = json.loads((Path(info.jobdir) / "started.json").read_text())
    os.kill(started["supervisor_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while launcher.poll(jobs.spool, req.job_id, 0).state != "LOST":
        assert time.monotonic() < deadline, "run never became LOST"
        time.sleep(0.02)
    lost = launcher.poll(jobs.spool, req.job_id, 0)
    assert lost.pid == info.pid and lost.final_state is None
    assert _alive(info.pid)  # the job itself is an orphan now
    launcher.terminate(jobs.spool, req.job_id, 0, "node_fail")
    deadline = time.monotonic() + 5
    while _alive(info.pid):
        assert time.monotonic() < deadline, "orphaned job was not killed"
        time.sleep(0.02)


_DIE_AFTER_RECORDING = """\
import os, signal
import batchd.node.spool as spool
_write = spool.write_json_atomic
def _write_then_die(path, data):
    _write(path, data)
    if os.path.basename(path) == "started.json":
        os.kill(os.getpid(), signal.SIGKILL)
spool.write_json_atomic = _write_then_die
"""


def test_supervisor_killed_between_recording_the_start_and_the_go_leaves_no_run_holding_the_lock(
        jobs, tmp_path, monkeypatch):
    # The supervisor dies (SIGKILL) right after started.json is written, before it lets
    # the job exec: the forked child must not wait for ever with the run's lock (it holds
    # it from the fork), or the run would stay RUNNING with no job and no supervisor.
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_DIE_AFTER_RECORDING)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]))
    marker = jobs.workdir / "ran"
    req, info = jobs.launch(f"#!/bin/bash\ntouch {marker}\nsleep 30\n")
    started = json.loads((Path(info.jobdir) / "started.json").read_text())
    deadline = time.monotonic() + 10
    while launcher.poll(jobs.spool, req.job_id, 0).state != "LOST":
        assert time.monotonic() < deadline, "run never became LOST: its lock is still held"
        time.sleep(0.02)
    deadline = time.monotonic() + 5
    while _alive(started["pid"]):
        assert time.monotonic() < deadline, "the child waits for a go that cannot come"
        time.sleep(0.02)
    assert not marker.exists()  # the job never ran


def test_the_recorded_process_group_is_the_jobs_from_the_start(jobs):
    # started.json names the job's pid as its process group: the child is in its own
    # session before that is written, so a signal to the group reaches it at once.
    req, info = jobs.launch("#!/bin/bash\nsleep 30\n")
    started = json.loads((Path(info.jobdir) / "started.json").read_text())
    assert os.getpgid(started["pid"]) == started["pgid"] == started["pid"]
    os.killpg(started["pgid"], signal.SIGKILL)
    assert jobs.wait(req).final_state == "FAILED"


def test_supervisor_ignores_terminal_and_term_signals(jobs):
    req, info = jobs.launch("#!/bin/bash\nsleep 0.8\necho done\n")
    sup = json.loads((Path(info.jobdir) / "started.json").read_text())["supervisor_pid"]
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        os.kill(sup, sig)
    status = jobs.wait(req)
    assert status.final_state == "COMPLETED" and Path(req.stdout).read_text() == "done\n"


DAEMON = """
import sys, time
from batchd.node import launcher
req = launcher.LaunchRequest(**__import__("json").loads(sys.argv[2]))
info = launcher.launch(req, sys.argv[1])
print(info.pid, flush=True)
time.sleep(300)
"""


def test_job_survives_kill_9_of_the_daemon_and_its_process_group(jobs):
    req = jobs.request("#!/bin/bash\nsleep 1.5\necho finished\n")
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, jobs.spool, json.dumps(asdict(req))],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pid = int(daemon.stdout.readline())
        # Ctrl-C in the daemon's terminal, then kill -9 of its whole process group.
        os.killpg(daemon.pid, signal.SIGINT)
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=10)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert launcher.poll(jobs.spool, req.job_id, 0).state == "RUNNING"
    status = jobs.wait(req)
    assert status.state == "EXITED" and status.final_state == "COMPLETED" and status.pid == pid
    assert 1.4 <= status.end_time - status.start_time < 10
    assert Path(req.stdout).read_text() == "finished\n"


def test_list_runs_collect_and_purge(jobs):
    assert launcher.list_runs(jobs.spool) == []
    reqs = [jobs.request("#!/bin/bash\ntrue\n", job_id=i, run=r) for i, r in ((3, 0), (2, 1), (2, 0))]
    for req in reqs:
        launcher.launch(req, jobs.spool)
        jobs.wait(req)
    assert launcher.list_runs(jobs.spool) == [(2, 0), (2, 1), (3, 0)]
    launcher.collect(jobs.spool, 2, 1)
    launcher.collect(jobs.spool, 2, 1)  # twice is harmless
    assert launcher.list_runs(jobs.spool) == [(2, 0), (3, 0)]
    assert launcher.poll(jobs.spool, 2, 1).final_state == "COMPLETED"  # files kept
    counter = launcher.launch(reqs[1], jobs.spool)
    assert counter.pid == launcher.poll(jobs.spool, 2, 1).pid  # collected runs never restart
    assert launcher.purge_collected(jobs.spool, older_than_s=3600) == 0
    assert launcher.purge_collected(jobs.spool, older_than_s=-1) == 1
    assert not os.path.exists(launcher.jobdir_path(jobs.spool, 2, 1))
    assert launcher.list_runs(jobs.spool) == [(2, 0), (3, 0)]


def test_poll_of_unknown_run_raises(jobs):
    with pytest.raises(FileNotFoundError):
        launcher.poll(jobs.spool, 12345, 0)


def test_supervisor_that_cannot_start_raises_and_a_later_launch_runs_the_job(jobs, monkeypatch):
    counter = jobs.workdir / "count"
    req = jobs.request(COUNTING.format(counter=counter, secs=0))
    real = sys.executable
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(launcher.LaunchError):
        launcher.launch(req, jobs.spool)
    assert launcher.poll(jobs.spool, req.job_id, 0).state == "LOST"
    assert not counter.exists()
    monkeypatch.setattr(sys, "executable", real)
    info = launcher.launch(req, jobs.spool)
    assert info.pid > 0 and jobs.wait(req).final_state == "COMPLETED"
    assert counter.read_text() == "run\n"


def test_unreadable_request_fails_before_start(jobs):
    req = jobs.request("#!/bin/bash\ntrue\n")
    os.makedirs(jobs.spool, exist_ok=True)
    staging = launcher._write_staging(req, jobs.spool)
    Path(staging, "request.json").write_text("{not json")
    os.rename(staging, launcher.jobdir_path(jobs.spool, req.job_id, 0))
    info = launcher.launch(req, jobs.spool)
    status = launcher.poll(jobs.spool, req.job_id, 0)
    assert info.pid == 0
    assert status.state == "EXITED" and status.final_state == "FAILED"
    assert "unreadable launch request" in status.error
