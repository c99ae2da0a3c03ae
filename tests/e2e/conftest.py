"""A real daemon on a temporary socket, driven through the real commands.

`cluster` starts `batchd serve --dev --config <2 nodes x 4 h200>` in a fresh directory
(world-readable, so that tests running as root can act as other users too) and gives
helpers to run commands against it, wait for job states, and kill/restart the daemon.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import (
    BIN,
    answers,
    clean_env,
    end_supervisors,
    log_tail,
    serve_argv,
    start_daemon,
    stop_daemon,
)

CONFIG = """
cluster_name = "e2e"
[scheduler]
interval_s = 1
kill_wait_s = 2
grace_time_s = 2
[accounting]
tres_billing_weights = "CPU=1.0,Mem=0.25G,GRES/gpu=2.0"
[[partition]]
name = "gpu"
nodes = "ALL"
default = true
[[node]]
name = "node1"
cpus = 16
memory_mb = 64000
gpus = [{ type = "h200", count = 4 }]
[[node]]
name = "node2"
cpus = 16
memory_mb = 64000
gpus = [{ type = "h200", count = 4 }]
"""


class Cluster:
    def __init__(self, root: Path, config: str):
        self.root = root
        self.cfg = root / "batchd.toml"
        self.cfg.write_text(config)
        self.sock = str(root / ".batchd" / "batchd.sock")
        self.log = root / "daemon.log"
        self.proc: subprocess.Popen | None = None
        # batchd's commands on PATH, as on an installed node (jobs call srun, squeue, ...)
        self.env = clean_env(BATCHD_SOCKET=self.sock, PATH=f"{BIN}:{os.environ.get('PATH', '')}")

    def start(self) -> None:
        self.proc = start_daemon(serve_argv("--dev", "--config", str(self.cfg)), cwd=self.root, env=self.env,
                                 log=self.log, ready=answers(self.env, self.root))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_daemon(self.proc, sig)
        self.proc = None

    def run(self, *args: str, check: bool = True, input: str | None = None, user: tuple[int, int] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        cmd = [str(BIN / args[0]), *args[1:]]
        if user is not None:
            cmd = ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", *cmd]
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, input=input,
                           cwd=cwd or self.root, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"{args} failed rc={r.returncode}\nstdout={r.stdout}\nstderr={r.stderr}\n"
                                 f"daemon log:\n{log_tail(self.log, 2000)}")
        return r

    def submit(self, *args: str, **kw) -> int:
        r = self.run("sbatch", "--parsable", *args, **kw)
        return int(r.stdout.strip().split(";")[0])

    def job(self, job_id: int | str) -> dict:
        from batchd.cli.client import request

        os.environ["BATCHD_SOCKET"] = self.sock
        (j,) = [x for x in request("GET", "/v1/jobs", query={"ids": str(job_id), "all": "1"})["jobs"]
                if str(x["id"]) == str(job_id) or x["display_id"] == str(job_id)]
        return j

    def wait(self, job_id: int, states: tuple[str, ...], timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        while True:
            j = self.job(job_id)
            if j["state"] in states:
                return j
            if time.time() > deadline:
                raise AssertionError(f"job {job_id} is {j['state']} ({j['reason']}), wanted {states}\n"
                                     f"daemon log:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)


def merge_toml(base: str, extra: str) -> str:
    """Add `extra` to `base`: its top-level keys before everything, each `[section]`'s keys
    into the same section where base has it, else as a new section before base's first table."""
    blocks = ("\n" + extra).split("\n[")
    out = blocks[0].strip() + "\n" + base if blocks[0].strip() else base  # top-level keys first
    for block in blocks[1:]:
        header, _, body = block.partition("\n")
        tag = f"[{header}"
        if tag.startswith("[["):  # an array of tables: always a new entry ([[partition]], [[node]])
            out = out.rstrip("\n") + f"\n{tag}\n{body.rstrip()}\n"
        elif f"\n{tag}\n" in out:
            out = out.replace(f"\n{tag}\n", f"\n{tag}\n{body.rstrip()}\n", 1)
        else:
            first = out.index("\n[")
            out = out[:first] + f"\n{tag}\n{body.rstrip()}\n" + out[first:]
    return out


@contextlib.contextmanager
def own_cluster(config: str, prefix: str = "batchd-e2e-", files: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A dev cluster of `config` in a fresh directory (with `files` written there first, such
    as the accounts file the config names), started; at the end the user's jobs are
    cancelled, the daemon stopped, every supervisor ended and the directory removed."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o777)
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    c = Cluster(root, config)
    c.start()
    try:
        yield c
    finally:
        # end the jobs too: tests must not leave processes behind
        try:
            c.run("scancel", "--user", str(os.getuid()), check=False)
        except Exception:
            pass
        c.stop()
        time.sleep(0.2)
        end_supervisors(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cluster(request):
    """The 2-node dev cluster; a test may add config with
    `@pytest.mark.config_extra("...toml...")` (merged into the [priority] section etc.)."""
    mark = request.node.get_closest_marker("config_extra")
    with own_cluster(merge_toml(CONFIG, mark.args[0]) if mark else CONFIG) as c:
        yield c
