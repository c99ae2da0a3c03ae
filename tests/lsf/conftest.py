"""A real batchd daemon for the LSF commands' end-to-end tests.

`lsf_cluster` (one per module) starts `batchd serve --dev --config <1 node, 4 h200>` in
a fresh temporary directory, creates the account `training` with the calling user as a
member, and runs the installed commands (bsub, bjobs, bkill, ...) against it through
BATCHD_SOCKET. The daemon and every job it started are ended afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
CONFIG = """
cluster_name = "lsf"
[scheduler]
interval_s = 1
kill_wait_s = 2
grace_time_s = 2
[[partition]]
name = "gpu"
nodes = "ALL"
default = true
[[node]]
name = "node1"
cpus = 8
memory_mb = 32000
gpus = [{ type = "h200", count = 4 }]
"""


class LsfCluster:
    """A running dev daemon in `root`; `run` calls one of batchd's commands there."""

    def __init__(self, root: Path):
        self.root = root
        (root / "batchd.toml").write_text(CONFIG)
        self.sock = str(root / ".batchd" / "batchd.sock")
        self.log = root / "daemon.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "LSF_", "LSB_"))}
        self.env.update(BATCHD_SOCKET=self.sock, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "a") as logf:
            self.proc = subprocess.Popen([str(BIN / "batchd"), "serve", "--dev", "--config", "batchd.toml"],
                                         cwd=self.root, stdout=logf, stderr=logf, env=self.env,
                                         start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited:\n" + self.log.read_text()[-3000:])
            if self.run("sinfo", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("daemon did not come up:\n" + self.log.read_text()[-3000:])

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def run(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        r = subprocess.run([str(BIN / args[0]), *args[1:]], env=self.env, cwd=self.root, input=input,
                           capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"{args} rc={r.returncode}\nstdout={r.stdout}\nstderr={r.stderr}\n"
                                 f"daemon log:\n{self.log.read_text()[-2000:]}")
        return r

    def job(self, job_id: int) -> dict:
        from batchd.cli.client import request

        os.environ["BATCHD_SOCKET"] = self.sock
        jobs = request("GET", "/v1/jobs", query={"ids": str(job_id), "all": "1"})["jobs"]
        return next(j for j in jobs if j["id"] == job_id)

    def wait(self, job_id: int, states: tuple[str, ...], timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        while True:
            j = self.job(job_id)
            if j["state"] in states:
                return j
            if time.time() > deadline:
                raise AssertionError(f"job {job_id} is {j['state']} ({j['reason']}), wanted {states}\n"
                                     f"{self.log.read_text()[-2000:]}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def lsf_cluster():
    root = Path(tempfile.mkdtemp(prefix="batchd-lsf-"))
    c = LsfCluster(root)
    old = os.environ.get("BATCHD_SOCKET")
    c.start()
    try:
        import pwd

        me = pwd.getpwuid(os.getuid()).pw_name
        c.run("batchd", "account", "add", "training")
        c.run("batchd", "user", "add", me, "-A", "training")
        yield c
    finally:
        c.run("scancel", "--user", str(os.getuid()), check=False)
        c.stop()
        if old is None:
            os.environ.pop("BATCHD_SOCKET", None)
        else:
            os.environ["BATCHD_SOCKET"] = old
        shutil.rmtree(root, ignore_errors=True)
