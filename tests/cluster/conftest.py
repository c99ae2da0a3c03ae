"""A test cluster on one machine: several `batchd serve` daemons (distinct node names,
state dirs and sockets) sharing one fresh PostgreSQL database."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.harness import BIN, clean_env, end_supervisors, serve_argv, start_daemon, stop_daemon

NODES = ("node1", "node2", "node3")


def _config(root: Path, node: str, url: str) -> str:
    nodes = "\n".join(f'[[node]]\nname = "{n}"\ncpus = 8\nmemory_mb = 32000\n'
                      f'gpus = [{{ type = "h200", count = 4 }}]\n' for n in NODES)
    return f"""
cluster_name = "pgtest"
database_url = "{url}"
state_dir = "{root / node / 'state'}"
socket = "{root / node / 'batchd.sock'}"
[scheduler]
interval_s = 1
kill_wait_s = 2
node_timeout_s = 4
[[partition]]
name = "gpu"
nodes = "ALL"
default = true
{nodes}
"""


class PgCluster:
    def __init__(self, root: Path, url: str):
        self.root = root
        self.url = url
        self.procs: dict[str, subprocess.Popen] = {}
        self.bin = BIN
        for n in NODES:
            (root / n).mkdir()
            (root / n / "batchd.toml").write_text(_config(root, n, url))
        env = dict(os.environ)
        subprocess.run([str(BIN / "batchd"), "migrate", "--config", str(root / "node1" / "batchd.toml")],
                       check=True, capture_output=True, env=env)

    def env(self, node: str) -> dict[str, str]:
        return clean_env(BATCHD_SOCKET=str(self.root / node / "batchd.sock"))

    def start(self, node: str) -> None:
        try:
            self.procs[node] = start_daemon(
                serve_argv("--config", str(self.root / node / "batchd.toml"), "--node", node), cwd=self.root,
                env=self.env(node), log=self.root / node / "daemon.log",
                ready=lambda: self.run(node, "sinfo", check=False).returncode == 0)
        except RuntimeError as e:
            raise RuntimeError(f"{node}: {e}\n{self.logs()}") from None

    def kill(self, node: str, sig: int = signal.SIGKILL) -> None:
        stop_daemon(self.procs.pop(node), sig)

    def run(self, node: str, *args: str, check: bool = True, input: str | None = None):
        r = subprocess.run([str(BIN / args[0]), *args[1:]], env=self.env(node), capture_output=True, text=True,
                           input=input, cwd=self.root, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"{node} {args}: rc={r.returncode} {r.stderr}\n{self.logs()}")
        return r

    def submit(self, node: str, *args: str) -> int:
        """sbatch through `node`'s daemon; returns the job id."""
        return int(self.run(node, "sbatch", "--parsable", *args).stdout.strip())

    def jobs(self, node: str) -> dict[int, dict]:
        from batchd.cli import client

        os.environ["BATCHD_SOCKET"] = str(self.root / node / "batchd.sock")
        return {j["id"]: j for j in client.request("GET", "/v1/jobs", query={"all": "1"})["jobs"]}

    def wait(self, node: str, pred, what: str, timeout: float = 40):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = pred()
            if v:
                return v
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for n in NODES:
            p = self.root / n / "daemon.log"
            if p.exists():
                out.append(f"--- {n}\n" + p.read_text()[-2500:])
        return "\n".join(out)

    def controller(self, node: str) -> dict:
        from batchd.cli import client

        os.environ["BATCHD_SOCKET"] = str(self.root / node / "batchd.sock")
        return client.request("GET", "/v1/controller")


@pytest.fixture
def pgcluster(pg_base_url):
    base = pg_base_url
    if base is None:
        pytest.skip("no PostgreSQL server (set BATCHD_TEST_PG)")
    import psycopg

    name = f"batchd_c_{uuid.uuid4().hex[:10]}"
    conninfo = base.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    root = Path(tempfile.mkdtemp(prefix="batchd-pg-"))
    os.chmod(root, 0o755)
    c_ = PgCluster(root, base.rpartition("/")[0] + "/" + name)
    try:
        yield c_
    finally:
        for n in list(c_.procs):
            c_.kill(n, signal.SIGTERM)
        end_supervisors(root)
        shutil.rmtree(root, ignore_errors=True)
        with psycopg.connect(conninfo, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
