"""As root: jobs run as their users, and files are opened with the user's rights only.

Creates two throwaway users (and one extra group) with useradd, removed afterwards.
Skipped when not root or when useradd is missing.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from batchd.node import launcher as launcher_module
from tests.hostlock import account_tool

pytestmark = [pytest.mark.root, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd")]


@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path  # a private (0700) directory owned by the user, used as workdir


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[User, User, int]]:
    """Two users; the first is also in an extra group (whose gid is the third item)."""
    tag = f"{os.getpid() % 100000:05d}"
    group, names = f"bdtg{tag}", [f"bdta{tag}", f"bdtb{tag}"]
    base = Path(tempfile.mkdtemp(prefix="batchd-users-", dir="/tmp"))
    os.chmod(base, 0o711)
    created: list[str] = []
    try:
        account_tool("groupadd", group)
        for i, name in enumerate(names):
            extra = ["-G", group] if i == 0 else []
            account_tool("useradd", "-M", "-d", str(base / name), "-s", "/bin/bash", *extra, name)
            created.append(name)
        made = []
        for name in names:
            pw = pwd.getpwnam(name)
            home = base / name
            home.mkdir(mode=0o700)
            os.chown(home, pw.pw_uid, pw.pw_gid)
            made.append(User(name, pw.pw_uid, pw.pw_gid, home))
        yield made[0], made[1], grp.getgrnam(group).gr_gid
    finally:
        for name in created:
            account_tool("userdel", name, check=False)
        account_tool("groupdel", group, check=False)
        shutil.rmtree(base, ignore_errors=True)


def _as(jobs, user: User, script: str, **changes):
    out = str(user.home / "slurm.out")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(user.home), "USER": user.name}
    fields = {"user": user.name, "uid": user.uid, "gid": user.gid, "home": str(user.home),
              "workdir": str(user.home), "env": env, "stdout": out, "stderr": out}
    return jobs.run(script, **{**fields, **changes})


def test_each_job_runs_as_its_user_with_groups(jobs, users):
    a, b, extra_gid = users
    for user in (a, b):
        status, out = _as(jobs, user, '#!/bin/bash\necho "$(id -u) $(id -g)"\nid -G\ntouch made\n')
        assert status.final_state == "COMPLETED", status.error
        ids, groups = out.splitlines()
        assert ids == f"{user.uid} {user.gid}"
        assert set(map(int, groups.split())) == set(os.getgrouplist(user.name, user.gid))
        assert 0 not in set(map(int, groups.split()))  # root's groups are dropped
        for produced in (user.home / "slurm.out", user.home / "made"):
            assert (os.stat(produced).st_uid, os.stat(produced).st_gid) == (user.uid, user.gid)
    _, out = _as(jobs, a, "#!/bin/bash\nid -G\n")
    assert str(extra_gid) in out.split()


def test_explicit_groups_replace_the_lookup(jobs, users):
    a, _b, _extra = users
    status, out = _as(jobs, a, "#!/bin/bash\nid -G\n", groups=[a.gid])
    assert status.final_state == "COMPLETED" and out.split() == [str(a.gid)]


def test_output_in_a_directory_the_user_cannot_write_fails(jobs, users):
    a, _b, _extra = users
    private = Path(tempfile.mkdtemp(dir="/tmp"))  # root-owned, 0700
    try:
        for target in (private / "out.txt", Path("/root/batchd-test-out.txt")):
            status, _ = _as(jobs, a, f"#!/bin/bash\ntouch {a.home}/ran\n", stdout=str(target),
                            stderr=str(target))
            assert status.final_state == "FAILED"
            assert "Permission denied" in status.error
            assert not target.exists()
            assert not (a.home / "ran").exists()
    finally:
        shutil.rmtree(private)


def test_workdir_the_user_cannot_enter_fails(jobs, users):
    a, b, _extra = users
    status, out = _as(jobs, a, "#!/bin/bash\nls\n", workdir=str(b.home))
    assert status.final_state == "FAILED"
    assert f"couldn't chdir to `{b.home}': Permission denied" in out


def test_user_cannot_read_or_clobber_another_users_files(jobs, users):
    a, b, _extra = users
    secret = b.home / "secret"
    secret.write_text("b's secret\n")
    os.chown(secret, b.uid, b.gid)
    os.chmod(secret, 0o600)
    status, out = _as(jobs, a, "#!/bin/bash\ncat\n", stdin=str(secret))
    assert status.final_state == "FAILED" and "b's secret" not in out
    # b's job script, reached through --output: opened as a, so refused
    breq, binfo = jobs.launch("#!/bin/bash\nsleep 1\n", user=b.name, uid=b.uid, gid=b.gid,
                              workdir=str(b.home), stdout=str(b.home / "b.out"), stderr=str(b.home / "b.out"))
    script = Path(binfo.jobdir) / "slurm_script"
    status, _ = _as(jobs, a, "#!/bin/bash\necho clobbered\n", stdout=str(script), stderr=str(script))
    assert status.final_state == "FAILED"
    assert script.read_text() == "#!/bin/bash\nsleep 1\n"
    assert os.stat(script).st_uid == b.uid
    assert jobs.wait(breq).final_state == "COMPLETED"


def test_job_cannot_forge_its_records_or_kill_its_supervisor(jobs, users):
    a, _b, _extra = users
    script = """#!/bin/bash
dir="$(dirname "$0")"
echo '{"final_state": "COMPLETED"}' > "$dir/exit.json" 2>/dev/null && echo forged
rm -f "$dir/started.json" 2>/dev/null && echo removed
kill -9 $PPID 2>/dev/null && echo killed
exit 4
"""
    status, out = _as(jobs, a, script)
    assert not {"forged", "removed", "killed"} & set(out.split())
    assert "exit.json: Permission denied" in out
    assert (status.final_state, status.exit_code_str) == ("FAILED", "4:0")


NON_ROOT_DAEMON = """
import json, sys, time
from batchd.node import launcher
req = launcher.LaunchRequest(**json.loads(sys.argv[2]))
launcher.launch(req, sys.argv[1])
while (st := launcher.poll(sys.argv[1], req.job_id, req.run)).state == "RUNNING":
    time.sleep(0.02)
print(json.dumps([st.final_state, oct(__import__("os").stat(launcher.jobdir_path(sys.argv[1], req.job_id, 0)).st_mode & 0o777)]))
"""


def _python_for(user: User) -> tuple[str, dict[str, str]]:
    """An interpreter (and environment) that `user` can run batchd with: this one, or the
    system's of the same version with this environment's packages on PYTHONPATH."""
    root = str(Path(launcher_module.__file__).resolve().parents[1])
    site = next(p for p in sys.path if p.endswith("site-packages"))
    candidates = [(sys.executable, {**os.environ, "HOME": str(user.home)}),
                  ("/usr/bin/python3", {"PATH": "/usr/bin:/bin", "HOME": str(user.home),
                                        "PYTHONPATH": f"{site}:{root}"})]
    for exe, env in candidates:
        try:
            subprocess.run([exe, "-c", "import batchd.node.launcher"], user=user.uid, group=user.gid,
                           extra_groups=[], cwd=str(user.home), env=env, check=True, capture_output=True,
                           timeout=30)
            return exe, env
        except (OSError, subprocess.SubprocessError):
            continue
    pytest.skip("no Python installation here is usable by other users")


def test_daemon_not_root_runs_jobs_as_itself(jobs, users):
    # A daemon running as a (dev mode) cannot switch users: b's job runs as a.
    a, b, _extra = users
    req = jobs.request("#!/bin/bash\nid -u\n", user=b.name, uid=b.uid, gid=b.gid, workdir=str(a.home),
                       stdout=str(a.home / "nr.out"), stderr=str(a.home / "nr.out"))
    spool = str(a.home / "spool")
    exe, env = _python_for(a)
    done = subprocess.run([exe, "-c", NON_ROOT_DAEMON, spool, json.dumps(asdict(req))],
                          user=a.uid, group=a.gid, extra_groups=[], cwd=str(a.home), capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["COMPLETED", "0o700"]
    assert (a.home / "nr.out").read_text() == f"{a.uid}\n"


def test_private_spool_is_made_searchable_for_users_jobs(jobs, users):
    a, _b, _extra = users
    os.makedirs(jobs.spool, mode=0o700)  # as a daemon might create it
    os.chmod(jobs.spool, 0o700)
    status, out = _as(jobs, a, "#!/bin/bash\necho ran\n")
    assert status.final_state == "COMPLETED", status.error
    assert out == "ran\n"
    assert os.stat(jobs.spool).st_mode & 0o777 == 0o711
