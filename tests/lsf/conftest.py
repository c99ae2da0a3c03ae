"""A real batchd daemon for the LSF commands' end-to-end tests.

`lsf_cluster` (one per module) starts `batchd serve --dev --config <1 node, 4 h200>` in
a fresh temporary directory, creates the account `training` with the calling user as a
member, and runs the installed commands (bsub, bjobs, bkill, ...) against it through
BATCHD_SOCKET. The daemon and every job it started are ended afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.harness import BIN, answers, clean_env, log_tail, serve_argv, start_daemon, stop_daemon

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
        self.env = clean_env("LSF_", "LSB_", BATCHD_SOCKET=self.sock, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = start_daemon(serve_argv("--dev", "--config", "batchd.toml"), cwd=self.root, env=self.env,
                                 log=self.log, ready=answers(self.env, self.root))

    def stop(self) -> None:
        stop_daemon(self.proc)

    def run(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        r = subprocess.run([str(BIN / args[0]), *args[1:]], env=self.env, cwd=self.root, input=input,
                           capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"{args} rc={r.returncode}\nstdout={r.stdout}\nstderr={r.stderr}\n"
                                 f"daemon log:\n{log_tail(self.log, 2000)}")
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
                                     f"{log_tail(self.log, 2000)}")
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
