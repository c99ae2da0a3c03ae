"""As root: jobs run as their submitter, write output as that user, and one user
cannot cancel another's job or read another's files through --output/--chdir tricks.
Skipped cleanly when not root."""

import os
import pwd
import subprocess
import uuid

import pytest

from tests.hostlock import account_tool

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/sbin/useradd"),
                                                   reason="needs root and useradd")]


@pytest.fixture
def two_users():
    names = [f"bd{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for n in names:
        account_tool("useradd", "--create-home", "--shell", "/bin/bash", n)
    try:
        yield [(n, pwd.getpwnam(n).pw_uid, pwd.getpwnam(n).pw_gid, pwd.getpwnam(n).pw_dir) for n in names]
    finally:
        for n in names:
            subprocess.run(["pkill", "-9", "-u", n], check=False)
            account_tool("userdel", "--remove", n, check=False)


def test_jobs_run_as_their_users_and_stay_apart(cluster, two_users):
    (a, auid, agid, ahome), (b, buid, bgid, bhome) = two_users
    secret = os.path.join(ahome, "secret.txt")
    with open(secret, "w") as f:
        f.write("alice-only\n")
    os.chown(secret, auid, agid)
    os.chmod(secret, 0o600)
    os.chmod(ahome, 0o700)

    ja = cluster.submit("--wrap", "id -u; sleep 30", user=(auid, agid), cwd=ahome)
    jb = cluster.submit("--wrap", "id -u", user=(buid, bgid), cwd=bhome)
    cluster.wait(ja, ("RUNNING",))
    cluster.wait(jb, ("COMPLETED",))
    out_b = os.path.join(bhome, f"slurm-{jb}.out")
    st = os.stat(out_b)
    assert (st.st_uid, open(out_b).read().strip()) == (buid, str(buid))

    # b may not cancel a's job
    r = cluster.run("scancel", str(ja), user=(buid, bgid), check=False, cwd=bhome)
    assert r.returncode != 0 and "denied" in r.stderr.lower(), r.stderr
    assert cluster.job(ja)["state"] == "RUNNING"

    # b cannot make the daemon write into a's home, nor read a's file as its stdin/chdir
    jw = cluster.submit("-o", os.path.join(ahome, "stolen.out"), "--wrap", "echo hi", user=(buid, bgid), cwd=bhome)
    cluster.wait(jw, ("COMPLETED", "FAILED"))
    assert not os.path.exists(os.path.join(ahome, "stolen.out"))
    jr = cluster.submit("-i", secret, "-o", os.path.join(bhome, "read.out"), "--wrap", "cat",
                        user=(buid, bgid), cwd=bhome)
    cluster.wait(jr, ("COMPLETED", "FAILED"))
    got = open(os.path.join(bhome, "read.out")).read() if os.path.exists(os.path.join(bhome, "read.out")) else ""
    assert "alice-only" not in got
    jc = cluster.submit("-D", ahome, "-o", os.path.join(bhome, "cd.out"), "--wrap", "cat secret.txt",
                        user=(buid, bgid), cwd=bhome)
    j = cluster.wait(jc, ("COMPLETED", "FAILED"))
    assert j["state"] == "FAILED"
    got = open(os.path.join(bhome, "cd.out")).read() if os.path.exists(os.path.join(bhome, "cd.out")) else ""
    assert "alice-only" not in got

    # a can cancel its own job
    cluster.run("scancel", str(ja), user=(auid, agid), cwd=ahome)
    assert cluster.wait(ja, ("CANCELLED",))["state"] == "CANCELLED"
