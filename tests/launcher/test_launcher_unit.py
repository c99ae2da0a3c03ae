"""Isolation "systemd": the launcher starts each run's supervisor in a transient unit.

There is no systemd on the test machines, so `systemd-run` is a recording stand-in
(tests/launcher/fakebin/systemd-run) that starts the command detached, as a unit would,
without enforcing the properties. What is tested for real: the command line (unit name,
slice, every property), the lock hand-over to the supervisor in the unit (`--unit`), the
job running to its recorded end, a refused unit (second start of the same job), a failing
systemd-run; and, in plain mode, CPU pinning with sched_setaffinity."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchd.node import launcher
from batchd.node.launcher import LaunchError

FAKEBIN = Path(__file__).resolve().parent / "fakebin"


@pytest.fixture
def fake_systemd(tmp_path, monkeypatch):
    d = tmp_path / "systemd"
    d.mkdir()
    monkeypatch.setenv("FAKE_SYSTEMD_DIR", str(d))
    monkeypatch.setenv("PATH", f"{FAKEBIN}:{os.environ['PATH']}")
    return d


def _calls(d: Path) -> list[list[str]]:
    path = d / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _props(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]


def test_run_in_unit_with_limits(jobs, fake_systemd):
    status, out = jobs.run("#!/bin/bash\necho in-unit $SLURM_JOB_ID\n", job_id=41, isolation="systemd",
                           mem_limit_mb=512, cpu_ids=[0, 1, 2, 5],
                           devices=["/dev/nvidia2", "/dev/nvidiactl", "char-nvidia-caps"])
    assert (status.state, status.final_state, status.exit_code_str) == ("EXITED", "COMPLETED", "0:0")
    assert out == "in-unit 41\n"
    [argv] = _calls(fake_systemd)
    assert "--unit=batchd-job-41.service" in argv and "--slice=batchd.slice" in argv
    assert "--collect" in argv and "--service-type=exec" in argv
    props = _props(argv)
    assert "MemoryMax=576M" in props and "MemorySwapMax=0" in props   # 512 + the supervisor's 64
    assert "AllowedCPUs=0-2,5" in props
    assert "DevicePolicy=closed" in props and "OOMPolicy=continue" in props
    assert ["DeviceAllow=/dev/nvidia2 rw", "DeviceAllow=/dev/nvidiactl rw",
            "DeviceAllow=char-nvidia-caps r"] == [p for p in props if p.startswith("DeviceAllow=")]
    cmd = argv[argv.index("--") + 1:]
    jobdir = launcher.jobdir_path(jobs.spool, 41, 0)
    assert cmd == [sys.executable, "-m", "batchd.node.supervisor", "--unit", jobdir]
    # the supervisor in the unit wrote its log where the unit's output goes
    assert "job started job_id=41" in Path(jobdir, launcher.LOG).read_text()


def test_unit_without_limits_has_no_memory_or_cpu_properties(jobs, fake_systemd):
    status, _ = jobs.run("#!/bin/bash\nexit 3\n", isolation="systemd")
    assert (status.final_state, status.exit_code_str) == ("FAILED", "3:0")
    props = _props(_calls(fake_systemd)[0])
    assert not [p for p in props if p.startswith(("MemoryMax", "AllowedCPUs", "DeviceAllow"))]
    assert "DevicePolicy=closed" in props


def test_unit_run_is_cancelled_through_its_supervisor(jobs, fake_systemd):
    req, info = jobs.launch("#!/bin/bash\nsleep 30\n", isolation="systemd")
    assert info.pid > 0
    launcher.terminate(jobs.spool, req.job_id, 0, "cancel", grace_s=1)
    status = jobs.wait(req)
    assert status.final_state == "CANCELLED"


def test_failing_systemd_run_is_a_launch_error(jobs, fake_systemd, monkeypatch):
    monkeypatch.setenv("FAKE_SYSTEMD_FAIL", "Failed to connect to bus: No such file or directory")
    with pytest.raises(LaunchError, match="systemd-run failed rc=1: Failed to connect to bus"):
        jobs.launch("#!/bin/bash\ntrue\n", isolation="systemd")


def test_second_unit_of_a_job_is_refused_and_the_first_run_kept(jobs, fake_systemd):
    """A restarted daemon that finds the run's directory without started.json, while the
    unit it started before dying still waits for the lock, must not start the job twice:
    systemd refuses the unit name, and the launcher waits for the run that is there."""
    req = jobs.request("#!/bin/bash\necho once >> %s\n" % (jobs.workdir / "count"), isolation="systemd")
    os.makedirs(jobs.spool, exist_ok=True)
    staging = launcher._write_staging(req, jobs.spool)
    jobdir = launcher.jobdir_path(jobs.spool, req.job_id, 0)
    os.rename(staging, jobdir)
    held = os.open(os.path.join(jobdir, launcher.LOCK), os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # the launcher that died held it
    first = subprocess.Popen([sys.executable, "-m", "batchd.node.supervisor", "--unit", jobdir],
                             start_new_session=True)
    (fake_systemd / launcher_unit(req.job_id)).write_text(str(first.pid))
    time.sleep(0.3)
    assert not os.path.exists(os.path.join(jobdir, launcher.STARTED))  # it waits for the lock
    info = launcher._spawn_supervisor(jobdir, held)
    os.close(held)
    assert info.pid > 0
    status = jobs.wait(req)
    first.wait(timeout=10)
    assert status.final_state == "COMPLETED"
    assert (jobs.workdir / "count").read_text() == "once\n"
    assert len(_calls(fake_systemd)) == 1  # one attempt, refused


def launcher_unit(job_id: int) -> str:
    from batchd.node.isolation import unit_name

    return unit_name(job_id)


def _allowed(text: str) -> set[int]:
    from batchd.slurm.hostlist import expand

    return {int(x) for x in expand(f"[{text}]")}


def test_plain_mode_pins_the_job_to_its_cpus(jobs):
    mine = sorted(os.sched_getaffinity(0))
    status, out = jobs.run("#!/bin/bash\ngrep Cpus_allowed_list /proc/self/status\n", cpu_ids=[mine[-1]])
    assert status.final_state == "COMPLETED"
    assert out.split()[-1] == str(mine[-1])


def test_plain_mode_ignores_cpus_this_machine_lacks(jobs):
    mine = os.sched_getaffinity(0)
    status, out = jobs.run("#!/bin/bash\ngrep Cpus_allowed_list /proc/self/status\n",
                           cpu_ids=[max(mine) + 1000])
    assert status.final_state == "COMPLETED"
    assert _allowed(out.split()[-1]) == mine


def _systemctl_calls(d: Path) -> list[list[str]]:
    path = d / "systemctl.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_lost_unit_run_is_killed_through_systemd_only_while_the_unit_is_its_own(jobs, fake_systemd):
    # The run's unit and its invocation are recorded: a lost run's processes are reached
    # through systemd (from any pid namespace), never those of a later start of the unit.
    req, info = jobs.launch("#!/bin/bash\nsleep 30\n", job_id=43, isolation="systemd")
    started = json.loads(Path(info.jobdir, launcher.STARTED).read_text())
    unit = "batchd-job-43.service"
    assert started["unit"] == unit
    assert started["invocation_id"] == (fake_systemd / f"{unit}.invocation").read_text()
    os.kill(started["supervisor_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while launcher.poll(jobs.spool, req.job_id, 0).state != "LOST":
        assert time.monotonic() < deadline, "run never became LOST"
        time.sleep(0.02)
    (fake_systemd / f"{unit}.invocation").write_text("a-later-start")
    launcher.terminate(jobs.spool, req.job_id, 0, "node_fail", grace_s=0)
    assert not [c for c in _systemctl_calls(fake_systemd) if c[0] == "kill"]
    (fake_systemd / f"{unit}.invocation").write_text(started["invocation_id"])
    launcher.terminate(jobs.spool, req.job_id, 0, "node_fail", grace_s=0)
    assert ["kill", "--signal=9", "--kill-who=all", unit] in _systemctl_calls(fake_systemd)
