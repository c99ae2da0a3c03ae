"""sbatch --uid/--gid against a real daemon, with throwaway users.

Run by root, the job runs as the named user (uid, the gid given or the user's primary
group, the user's supplementary groups) and is charged as that user: default account and
membership are the user's. Run by anybody else both options are refused as Slurm 22.05
refuses them; the cases below were recorded from a real Slurm 22.05 (`slurm-peer`):
the message on stderr and the exit code, the command submitting nothing.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import uuid

import pytest

from tests.hostlock import account_tool

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates throwaway "
                                                   "users and runs jobs as them")]


@pytest.fixture
def people():
    """Users a and b (a also in a throwaway group), and that group; removed after."""
    tag = uuid.uuid4().hex[:6]
    a, b, g = f"bdu{tag}a", f"bdu{tag}b", f"bdg{tag}"
    account_tool("groupadd", g)
    account_tool("useradd", "-M", "-N", "-s", "/bin/sh", "-G", g, a)
    account_tool("useradd", "-M", "-N", "-s", "/bin/sh", b)
    try:
        yield a, b, g
    finally:
        for u in (a, b):
            subprocess.run(["pkill", "-KILL", "-u", u], check=False)
            account_tool("userdel", u, check=False)
        account_tool("groupdel", g, check=False)


def _ids(user: str) -> tuple[int, int]:
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def test_root_submits_as_a_user_by_name_or_number(cluster, people):
    a, _b, g = people
    uid, gid = _ids(a)
    out = cluster.root / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    script = "id -u; id -g; id -G"
    by_name = cluster.submit("--uid", a, "-o", f"{out}/%u-%j.txt", "--wrap", script)
    by_number = cluster.submit(f"--uid={uid}", f"--gid={g}", "-o", f"{out}/%u-%j.txt", "--wrap", script)
    g_gid = grp.getgrnam(g).gr_gid
    for jid, want_gid in ((by_name, gid), (by_number, g_gid)):
        j = cluster.wait(jid, ("COMPLETED", "FAILED"))
        assert (j["state"], j["user"], j["uid"], j["gid"]) == ("COMPLETED", a, uid, want_gid), j
        f = out / f"{a}-{jid}.txt"  # %u is the job's user
        st = f.stat()
        assert (st.st_uid, st.st_gid) == (uid, want_gid)
        got_uid, got_gid, groups = f.read_text().splitlines()
        assert (int(got_uid), int(got_gid)) == (uid, want_gid)
        assert {want_gid, g_gid} <= {int(x) for x in groups.split()}  # the user's supplementary groups
        assert 0 not in {int(x) for x in groups.split()}  # none of root's


def test_the_job_is_charged_as_the_user(cluster, people):
    a, b, _g = people
    cluster.run("batchd", "account", "add", "teama")
    cluster.run("batchd", "user", "add", a, "-A", "teama", "--default")
    jid = cluster.submit("--uid", a, "--wrap", "true")
    assert cluster.wait(jid, ("COMPLETED",))["account"] == "teama"  # a's default account, not root's
    r = cluster.run("sbatch", "--uid", b, "-A", "teama", "--wrap", "true", check=False)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "sbatch: error: Batch job submission failed: Invalid "
                                                  "account or account/partition combination specified\n")


def test_export_none_gives_the_users_login_environment_not_roots(cluster, people):
    a, _b, _g = people
    out = cluster.root / "envout"
    out.mkdir()
    os.chmod(out, 0o777)
    jid = cluster.submit("--uid", a, "--export=NONE", "-o", f"{out}/%j.txt", "--wrap", 'echo "$USER $HOME"')
    assert cluster.wait(jid, ("COMPLETED", "FAILED"))["state"] == "COMPLETED"
    pw = pwd.getpwnam(a)
    assert (out / f"{jid}.txt").read_text().split() == [a, pw.pw_dir]


# (who runs sbatch, its options) -> (exit code, stderr): recorded from Slurm 22.05
REFUSED = [
    ("user", ["--uid=root"], 255, "sbatch: error: --uid only permitted by root user\n"),
    ("user", ["--uid=0"], 255, "sbatch: error: --uid only permitted by root user\n"),
    ("user", ["--uid=nosuchuser"], 255, "sbatch: error: --uid only permitted by root user\n"),
    ("user", ["--gid=0"], 255, "sbatch: error: --gid only permitted by root user\n"),
    ("user", ["--gid=nosuchgroup"], 255, "sbatch: error: --gid only permitted by root user\n"),
    ("root", ["--uid=nosuchuser"], 255, "sbatch: error: Invalid --uid specification\n"),
    ("root", ["--uid=999999"], 255, "sbatch: error: Invalid --uid specification\n"),
    ("root", ["--gid=nosuchgroup"], 255, "sbatch: error: Invalid --gid specification\n"),
    ("root", ["--gid=99999"], 255, "sbatch: error: Invalid --gid specification\n"),
]


def test_refused_as_slurm_refuses(cluster, people):
    a, _b, _g = people
    for who, opts, rc, err in REFUSED:
        user = _ids(a) if who == "user" else None
        r = cluster.run("sbatch", *opts, "--wrap", "true", check=False, user=user)
        assert (r.returncode, r.stdout, r.stderr) == (rc, "", err), (who, opts)
    assert cluster.run("squeue", "-h").stdout == ""  # nothing was submitted


def test_the_daemon_refuses_a_non_root_caller_on_the_raw_socket(cluster, people):
    """A user who skips sbatch and writes the spec by hand gets no other identity."""
    a, _b, _g = people
    code = ("import json, sys\n"
            "from batchd.cli.client import request, DaemonError\n"
            "from batchd.cli.sbatch import build\n"
            "spec, _ = build(['--wrap', 'true'], {})\n"
            "spec[sys.argv[1]] = 0\n"
            "try:\n"
            "    print(json.dumps(request('POST', '/v1/jobs', {'spec': spec})))\n"
            "except DaemonError as e:\n"
            "    print(json.dumps({'code': e.code, 'message': e.message}))\n")
    for key in ("uid", "gid"):
        r = cluster.run("python", "-c", code, key, user=_ids(a))
        assert json.loads(r.stdout) == {"code": "AccessDenied", "message": f"--{key} only permitted by root user"}
    assert cluster.run("squeue", "-h").stdout == ""
