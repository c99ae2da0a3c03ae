"""The production install, end to end, as README's "Installing on a node" does it.

Build the wheel from this checkout, install it (not editable) into a fresh virtual
environment, lay the directories out exactly as `systemd/batchd.tmpfiles` and the unit's
`StateDirectoryMode`/`RuntimeDirectoryMode` do (under a temporary root), write the config
from `examples/cluster-16gpu.toml`, `batchd migrate`, then `batchd serve` as root in
NON-dev mode from the installed environment; two throwaway non-root users submit with
the installed `sbatch`. Their jobs complete, the output is theirs, neither can read the
other's script in the spool, and the daemon refuses to start with one line once the state
directory is 0700.

Root only (it creates users and runs jobs as them): skipped, saying so, elsewhere.
"""

from __future__ import annotations

import configparser
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.harness import (
    answers,
    build_wheel,
    end_supervisors,
    log_tail,
    serve_argv,
    start_daemon,
    stop_daemon,
    wheel_venv,
)
from tests.hostlock import account_tool

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="the install test runs as root: it creates users and "
                       "starts a production (non-dev) daemon that runs jobs as them"),
    pytest.mark.skipif(shutil.which("systemd-tmpfiles") is None or shutil.which("useradd") is None
                       or shutil.which("setpriv") is None,
                       reason="needs systemd-tmpfiles, useradd and setpriv"),
]


def _sh(*cmd: str, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("timeout", 120)
    r = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd} failed rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def _unit_service() -> configparser.SectionProxy:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment]
    cp.read(ROOT / "systemd" / "batchd.service")
    return cp["Service"]


def _lay_out(root: Path) -> tuple[Path, Path]:
    """systemd-tmpfiles on the shipped file under `root`, then the unit's directory modes
    (systemd applies them at every start, after tmpfiles). Returns (state dir, run dir)."""
    _sh("systemd-tmpfiles", "--create", f"--root={root}", str(ROOT / "systemd" / "batchd.tmpfiles"))
    svc = _unit_service()
    state = root / "var" / "lib" / svc["StateDirectory"]
    run = root / "run" / svc["RuntimeDirectory"]
    os.chmod(state, int(svc["StateDirectoryMode"], 8))
    os.chmod(run, int(svc["RuntimeDirectoryMode"], 8))
    return state, run


class Node:
    """The installed daemon under a temporary root."""

    def __init__(self, bin_dir: Path, root: Path, state: Path, run: Path):
        self.bin = bin_dir
        self.root = root
        self.cfg = root / "etc" / "batchd" / "batchd.toml"
        self.sock = run / "batchd.sock"
        text = (ROOT / "examples" / "cluster-16gpu.toml").read_text()
        self.cfg.write_text(f'state_dir = "{state}"\nsocket = "{self.sock}"\n' + text)
        self.log = root / "daemon.log"
        self.env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "BATCHD_SOCKET": str(self.sock),
                    "LANG": "C.UTF-8"}
        self.proc: subprocess.Popen | None = None

    def cmd(self, *args: str, user: str | None = None, cwd: Path | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(self.bin / args[0]), *args[1:]]
        if user is not None:
            pw = pwd.getpwnam(user)
            argv = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", *argv]
        r = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=cwd or "/", timeout=60)
        if check:
            assert r.returncode == 0, f"{args} as {user}: rc={r.returncode}\n{r.stdout}\n{r.stderr}\n{self.tail()}"
        return r

    def serve(self) -> subprocess.Popen:
        return start_daemon(serve_argv("--config", str(self.cfg), bin_dir=self.bin), cwd="/", env=self.env,
                            log=self.log)

    def start(self) -> None:
        self.proc = start_daemon(serve_argv("--config", str(self.cfg), bin_dir=self.bin), cwd="/", env=self.env,
                                 log=self.log, ready=answers(self.env, "/", self.bin))

    def stop(self) -> None:
        stop_daemon(self.proc)
        self.proc = None

    def tail(self) -> str:
        return log_tail(self.log)

    def state(self, job_id: int) -> str:
        out = self.cmd("scontrol", "show", "job", str(job_id)).stdout
        return out.split("JobState=", 1)[1].split()[0]

    def wait(self, job_id: int, states: tuple[str, ...], timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            s = self.state(job_id)
            if s in states or time.monotonic() > deadline:
                assert s in states, f"job {job_id} is {s}, wanted {states}\n{self.tail()}"
                return s
            time.sleep(0.1)


@pytest.fixture
def users():
    """Two throwaway non-root users, each with a private work directory; removed after."""
    tag = uuid.uuid4().hex[:6]
    names = [f"bdi{tag}a", f"bdi{tag}b"]
    for n in names:
        account_tool("useradd", "-M", "-N", "-s", "/bin/sh", n)
    try:
        yield names
    finally:
        for n in names:
            subprocess.run(["pkill", "-KILL", "-u", n], check=False)
            account_tool("userdel", n, check=False)


def test_installed_wheel_runs_jobs_of_two_users_in_the_production_layout(users):
    work = Path(tempfile.mkdtemp(prefix="batchd-install-"))
    os.chmod(work, 0o755)  # job users must reach their work directories below it
    node = None
    try:
        bin_dir = wheel_venv(work, build_wheel(work))
        root = work / "root"
        root.mkdir(mode=0o755)
        state, run = _lay_out(root)
        assert (state.stat().st_mode & 0o777, (state / "spool").stat().st_mode & 0o777) == (0o711, 0o711)
        node = Node(bin_dir, root, state, run)
        node.cmd("batchd", "migrate", "--config", str(node.cfg))
        assert (state / "batchd.db").stat().st_mode & 0o777 == 0o600
        node.start()
        assert node.sock.stat().st_mode & 0o777 == 0o666

        homes = {}
        for u in users:
            pw = pwd.getpwnam(u)
            homes[u] = work / u
            homes[u].mkdir(mode=0o700)
            os.chown(homes[u], pw.pw_uid, pw.pw_gid)
        a, b = users
        # b's job waits for a file, so that its run directory is there while a looks at it;
        # it says it has begun with a file of its own (squeue's RUNNING comes as soon as the
        # scheduler allocates, a moment before the node has laid out the run's directory)
        ids = {}
        for u in users:
            wait = "touch begun; while [ ! -e go ]; do sleep 0.05; done; " if u == b else ""
            out = node.cmd("sbatch", "--parsable", "--wrap", f"{wait}id -un; echo job-$SLURM_JOB_ID",
                           user=u, cwd=homes[u]).stdout
            ids[u] = int(out.strip())
        node.wait(ids[b], ("RUNNING",))
        deadline = time.monotonic() + 30
        while not (homes[b] / "begun").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (homes[b] / "begun").exists(), node.tail()
        script_b = state / "spool" / f"job.{ids[b]}.0" / "slurm_script"
        peek = f"open({str(script_b)!r}).read()"
        assert node.cmd("python", "-c", peek, user=b, check=False).returncode == 0, "b cannot read its own script"
        denied = node.cmd("python", "-c", peek, user=a, check=False)
        assert denied.returncode != 0 and "PermissionError" in denied.stderr, denied
        listing = node.cmd("python", "-c", f"import os; os.listdir({str(state / 'spool')!r})", user=a, check=False)
        assert "PermissionError" in listing.stderr, "the spool is listable by users"
        (homes[b] / "go").touch()
        for u in users:
            assert node.wait(ids[u], ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL")) == "COMPLETED", node.tail()
            out = homes[u] / f"slurm-{ids[u]}.out"
            st = out.stat()
            assert (st.st_uid, st.st_gid) == (pwd.getpwnam(u).pw_uid, pwd.getpwnam(u).pw_gid)
            assert out.read_text() == f"{u}\njob-{ids[u]}\n"
        node.stop()

        # the layout README's fix would have caught: a 0700 state directory locks every
        # job user out, and the daemon says so instead of starting and failing every job
        os.chmod(state, 0o700)
        proc = node.serve()
        rc = proc.wait(timeout=30)
        lines = node.log.read_text().splitlines()
        errors = [ln for ln in lines if ln.startswith("batchd: error:")]
        assert rc == 1 and "Traceback" not in node.log.read_text(), node.tail()
        assert errors == [lines[-1]] == [
            f"batchd: error: the spool {state}/spool is not reachable by job users (mode 0700 on {state}): "
            f"run `chmod o+x {state}` (see systemd/batchd.tmpfiles)"], node.tail()
    finally:
        if node is not None:
            node.stop()
            end_supervisors(work)
        shutil.rmtree(work, ignore_errors=True)
