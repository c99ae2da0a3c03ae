"""As root, with two throwaway users: a job's output and error files are never opened
through a symlink that another user planted in a sticky world-writable directory (as the
kernel's fs.protected_symlinks would refuse, even on a host where it is 0), the user's
own links are followed; an unreadable --input leaves a line in the job's error file.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from batchd.node.jobexec import OUTPUT_OPEN_FAILED_SIG
from tests.hostlock import account_tool, host_lock

pytestmark = [pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd")]

SYSCTL = Path("/proc/sys/fs/protected_symlinks")


@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[User, User]]:
    tag = f"{os.getpid() % 100000:05d}"
    base = Path(tempfile.mkdtemp(prefix="batchd-outfiles-", dir="/tmp"))
    os.chmod(base, 0o711)
    made: list[User] = []
    try:
        for name in (f"bdoa{tag}", f"bdob{tag}"):
            account_tool("useradd", "-M", "-N", "-d", str(base / name), "-s", "/bin/sh", name)
            pw = pwd.getpwnam(name)
            home = base / name
            home.mkdir(mode=0o700)
            os.chown(home, pw.pw_uid, pw.pw_gid)
            made.append(User(name, pw.pw_uid, pw.pw_gid, home))
        yield made[0], made[1]
    finally:
        for u in made:
            account_tool("userdel", u.name, check=False)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def unprotected() -> Iterator[None]:
    """fs.protected_symlinks=0 for the test where the host lets us (restored after), so
    that batchd's own rule is what refuses; where it cannot be set the kernel's is. The
    setting is the host's: the lock keeps another worker (or run) from saving our 0 as the
    value to restore, or restoring its value in the middle of this test."""
    with host_lock("protected_symlinks"):
        try:
            old = SYSCTL.read_text().strip()
            SYSCTL.write_text("0")
        except OSError:
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                SYSCTL.write_text(old)


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A /tmp-like directory: root's, sticky, world-writable."""
    d = Path(tempfile.mkdtemp(prefix="batchd-sticky-", dir="/tmp"))
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_user(u: User, *cmd: str) -> None:
    subprocess.run(["setpriv", f"--reuid={u.uid}", f"--regid={u.gid}", "--clear-groups", *cmd], check=True)


def _run(jobs, u: User, script: str, **changes):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(u.home), "USER": u.name}
    fields = {"user": u.name, "uid": u.uid, "gid": u.gid, "home": str(u.home), "workdir": str(u.home),
              "env": env, "stdout": str(u.home / "slurm.out"), "stderr": str(u.home / "slurm.out")}
    return jobs.run(script, **{**fields, **changes})


def test_a_planted_symlink_in_tmp_is_not_followed(jobs, users, sticky, unprotected):
    a, b = users
    precious = a.home / "precious"
    precious.write_text("keep me\n")
    os.chown(precious, a.uid, a.gid)
    _as_user(b, "ln", "-s", str(precious), str(sticky / "out.log"))  # b plants it, a's job writes there
    status, _ = _run(jobs, a, "#!/bin/sh\necho overwritten\n", stdout=str(sticky / "out.log"),
                     stderr=str(sticky / "out.log"))
    assert precious.read_text() == "keep me\n"
    assert (status.final_state, status.exit_code, status.signal) == ("FAILED", 0, OUTPUT_OPEN_FAILED_SIG)
    assert "refusing to follow a symlink owned by uid" in (status.error or "")


def test_the_refusal_is_told_in_the_other_stream(jobs, users, sticky, unprotected):
    a, b = users
    target = a.home / "errors"
    target.write_text("")
    os.chown(target, a.uid, a.gid)
    _as_user(b, "ln", "-s", str(target), str(sticky / "err.log"))
    status, out = _run(jobs, a, "#!/bin/sh\necho hi\n", stdout=str(a.home / "ok.out"),
                       stderr=str(sticky / "err.log"))
    assert status.final_state == "FAILED" and target.read_text() == ""
    assert out.startswith(f"slurmstepd: error: couldn't open output file {sticky}/err.log: refusing to follow")


def test_the_users_own_links_are_followed(jobs, users, sticky, unprotected):
    a, _b = users
    mine = a.home / "mine.txt"
    _as_user(a, "ln", "-s", str(mine), str(sticky / "mine.log"))  # a's own link in /tmp
    other = a.home / "via-root-link.txt"
    os.symlink(other, a.home / "root-link.log")  # a link of root's in a's (not sticky) home
    for link, target in ((sticky / "mine.log", mine), (a.home / "root-link.log", other)):
        status, _ = _run(jobs, a, "#!/bin/sh\necho followed\n", stdout=str(link), stderr=str(link))
        assert status.final_state == "COMPLETED", status.error
        assert target.read_text() == "followed\n" and target.stat().st_uid == a.uid


def test_an_unreadable_input_is_told_in_the_error_file(jobs, users):
    a, _b = users
    secret = Path(tempfile.mkdtemp(prefix="batchd-secret-", dir="/tmp")) / "input"
    try:
        os.chmod(secret.parent, 0o755)
        secret.write_text("root only\n")
        os.chmod(secret, 0o600)
        status, out = _run(jobs, a, "#!/bin/sh\ncat\n", stdin=str(secret))
        assert status.final_state == "FAILED"
        assert out == f"slurmstepd: error: Could not open stdin file {secret}: Permission denied\n"
        missing = a.home / "nope"
        status, out = _run(jobs, a, "#!/bin/sh\ncat\n", stdin="nope")  # relative: to the workdir
        assert status.final_state == "FAILED"
        assert out == f"slurmstepd: error: Could not open stdin file {missing}: No such file or directory\n"
    finally:
        shutil.rmtree(secret.parent, ignore_errors=True)


def test_the_daemons_notes_do_not_follow_a_planted_symlink(users, sticky, unprotected):
    # jobexec.append_as_user writes why a job could not be launched into its error file
    from batchd.node.jobexec import append_as_user

    a, b = users
    precious = a.home / "precious-note"
    precious.write_text("keep me\n")
    os.chown(precious, a.uid, a.gid)
    _as_user(b, "ln", "-s", str(precious), str(sticky / "note.err"))
    append_as_user(a.name, a.uid, a.gid, str(sticky / "note.err"), "batchd: the job could not start\n")
    assert precious.read_text() == "keep me\n"
    own = a.home / "own.err"
    append_as_user(a.name, a.uid, a.gid, str(own), "written\n")  # a plain path is written, as the user
    assert own.read_text() == "written\n" and own.stat().st_uid == a.uid
