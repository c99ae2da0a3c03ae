"""Fixtures for the launcher tests: real supervisors, real job processes.

`jobs` builds LaunchRequests with defaults (the current user, a temporary working
directory, output to `<workdir>/slurm-<id>.out`), launches them and waits for their end.
Every run still alive at teardown is killed, so a failing test leaves no processes.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from batchd.node import launcher
from batchd.node.launcher import LaunchInfo, LaunchRequest, RunStatus


class Jobs:
    """Launch helper bound to one spool directory."""

    def __init__(self, spool: str, workdir: Path) -> None:
        self.spool = spool
        self.workdir = workdir
        self._ids = itertools.count(1)

    def request(self, script: str, **changes: object) -> LaunchRequest:
        """A request for `script` as the current user; `changes` override fields."""
        job_id = int(changes.pop("job_id", next(self._ids)))  # type: ignore[call-overload]
        pw = pwd.getpwuid(os.getuid())
        out = str(self.workdir / f"slurm-{job_id}.out")
        req = LaunchRequest(
            job_id=job_id, run=0, user=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid, groups=None,
            home=pw.pw_dir, workdir=str(self.workdir), script=script, argv=[],
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": pw.pw_dir, "SLURM_JOB_ID": str(job_id)},
            stdout=out, stderr=out, kill_wait_s=1)
        return replace(req, **changes)  # type: ignore[arg-type]

    def launch(self, script: str, **changes: object) -> tuple[LaunchRequest, LaunchInfo]:
        req = self.request(script, **changes)
        return req, launcher.launch(req, self.spool)

    def wait(self, req: LaunchRequest, timeout_s: float = 30.0) -> RunStatus:
        """Poll until the run is no longer RUNNING (fails the test after `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = launcher.poll(self.spool, req.job_id, req.run)
            if status.state != "RUNNING":
                return status
            if time.monotonic() > deadline:
                pytest.fail(f"job {req.job_id} still running after {timeout_s}s")
            time.sleep(0.02)

    def run(self, script: str, timeout_s: float = 30.0, **changes: object) -> tuple[RunStatus, str]:
        """Launch, wait, and return the final status with the stdout file's text."""
        req, _info = self.launch(script, **changes)
        status = self.wait(req, timeout_s)
        try:
            text = Path(req.stdout).read_text()
        except FileNotFoundError:
            text = ""
        return status, text

    def kill_all(self) -> None:
        """Tear-down: SIGKILL every supervisor and job process still alive."""
        for job_id, run in launcher.list_runs(self.spool):
            started = launcher.read_json(os.path.join(launcher.jobdir_path(self.spool, job_id, run),
                                                      launcher.STARTED))
            if not started:
                continue
            for pid, ticks in ((started["supervisor_pid"], started["supervisor_start_ticks"]),):
                if launcher.process_matches(pid, ticks):
                    os.kill(pid, signal.SIGKILL)
            try:
                os.killpg(started["pgid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def searchable_tmpdir(prefix: str) -> str:
    """A fresh directory under /tmp that other users may traverse (0711)."""
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(path, 0o711)
    return path


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Jobs]:
    spool = searchable_tmpdir("batchd-spool-")
    workdir = tmp_path / "work"
    workdir.mkdir()
    helper = Jobs(os.path.join(spool, "spool"), workdir)
    yield helper
    helper.kill_all()
    shutil.rmtree(spool, ignore_errors=True)
