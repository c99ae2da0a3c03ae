"""What keeps the suite's parallel workers (pytest-xdist, docs/testing.md) out of each
other's way: the harness's cleanup ends only its own test's processes (a supervisor of
another directory, even one whose path starts with the same characters, is another
worker's and must live on); host-wide locks hold across processes; the systemd tier is
one work unit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import xdist_scope
from tests.harness import supervisors_under
from tests.hostlock import host_lock


def _fake_supervisor(jobdir: Path) -> subprocess.Popen:
    """A process whose command line reads as a supervisor's (`... batchd.node.supervisor JOBDIR`)."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "batchd.node.supervisor",
                             str(jobdir)], stdin=subprocess.PIPE)


def test_only_the_supervisors_under_the_root_are_found(tmp_path):
    mine, theirs = tmp_path / "t1", tmp_path / "t10"  # "t1" is a prefix of "t10"'s path
    procs = [_fake_supervisor(mine / "spool" / "job.1.0"), _fake_supervisor(theirs / "spool" / "job.1.0")]
    try:
        assert supervisors_under(mine) == [procs[0].pid]
        assert supervisors_under(f"{mine}/") == [procs[0].pid]
        assert supervisors_under(theirs) == [procs[1].pid]
        assert supervisors_under(tmp_path / "t2") == []
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_host_lock_is_held_across_processes():
    probe = ("import fcntl, os, sys, tempfile; fd = os.open(os.path.join(tempfile.gettempdir(), "
             "'batchd-tests-selftest.lock'), os.O_RDWR | os.O_CREAT)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
             "except BlockingIOError:\n    print('held')")
    with host_lock("selftest"):
        held = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    free = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert (held, free) == ("held\n", "free\n")


def test_the_systemd_tier_is_one_work_unit_and_other_files_their_own():
    assert xdist_scope("tests/systemd/test_under_systemd.py::test_install_as_readme_says") == "tests/systemd"
    assert xdist_scope("tests/systemd/test_view_boot_id.py::test_job_stays") == "tests/systemd"
    assert xdist_scope("tests/store/test_store.py::test_x[sqlite]") == "tests/store/test_store.py"
    assert xdist_scope("tests/systemd_units.py::test_x") == "tests/systemd_units.py"
