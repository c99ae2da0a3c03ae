#!/usr/bin/env python3
"""Connection handling of the daemon's socket under bursts and idle connections.

    python bench/bench_connections.py [--pings 20,200,1000] [--idle 0,64,2000] [--samples 10]

Starts a dev daemon (`batchd serve --dev`, 2 nodes) in a temporary directory and prints
  1. for each N of --pings: the wall time for N clients (threads, batchd.cli.client) that
     send a ping at the same instant until the last answer, and how many failed;
  2. for each K of --idle: the median and worst wall time of one `squeue` process (--samples
     runs spread over --spread-s seconds) while
     another user holds K idle connections (connections the daemon closes, for the cap or
     the read timeout, are opened again within a second, so the pressure lasts).
As root the idle connections belong to a throwaway user (created and removed); otherwise
to the caller itself, whose squeue then competes with its own cap (said in the output).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BIN = Path(sys.executable).parent
CONFIG = """cluster_name = "bench"
[scheduler]
interval_s = 1
[[node]]
name = "node1"
cpus = 16
memory_mb = 64000
[[node]]
name = "node2"
cpus = 16
memory_mb = 64000
"""

HOLDER = r"""
import resource, selectors, socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 100) if hard != resource.RLIM_INFINITY else n + 100, hard))
sel = selectors.DefaultSelector()
def open_one():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
    except OSError:
        s.close()
        return
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
for _ in range(n):
    open_one()
print("held", flush=True)
sel.register(sys.stdin, selectors.EVENT_READ)
closed, next_reopen = 0, time.monotonic() + 1
while True:
    for key, _ in sel.select(0.2):
        if key.fileobj is sys.stdin:
            sys.exit(0)
        sel.unregister(key.fileobj)
        key.fileobj.close()
        closed += 1
    if time.monotonic() >= next_reopen:
        for _ in range(closed):
            open_one()
        closed, next_reopen = 0, time.monotonic() + 1
"""


def start_daemon(root: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    (root / "batchd.toml").write_text(CONFIG)
    sock = str(root / ".batchd" / "batchd.sock")
    env = dict(os.environ, BATCHD_SOCKET=sock, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    log = open(root / "daemon.log", "a")
    proc = subprocess.Popen([str(BIN / "batchd"), "serve", "--dev", "--config", str(root / "batchd.toml")],
                            cwd=root, stdout=log, stderr=log, env=env, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        if subprocess.run([str(BIN / "sinfo")], env=env, capture_output=True, cwd=root).returncode == 0:
            return proc, env
        time.sleep(0.2)
    proc.kill()
    sys.exit("daemon did not come up:\n" + (root / "daemon.log").read_text()[-2000:])


def burst(n: int) -> tuple[float, int]:
    from batchd.cli import client

    barrier = threading.Barrier(n + 1)

    def one(_: int) -> bool:
        barrier.wait()
        try:
            client.request("GET", "/v1/ping")
            return True
        except Exception:  # noqa: BLE001 - counted
            return False

    with ThreadPoolExecutor(n) as ex:
        futs = [ex.submit(one, i) for i in range(n)]
        barrier.wait()
        t0 = time.perf_counter()
        ok = sum(f.result() for f in futs)
        return time.perf_counter() - t0, n - ok


def squeue_times(env: dict[str, str], root: Path, samples: int, spread_s: float) -> list[float]:
    out = []
    for i in range(samples):
        if i:
            time.sleep(spread_s / samples)  # over the daemon's read timeout and the holder's reconnects
        t0 = time.perf_counter()
        subprocess.run([str(BIN / "squeue")], env=env, cwd=root, capture_output=True, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pings", default="20,200,1000")
    ap.add_argument("--idle", default="0,64,2000")
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--spread-s", type=float, default=7.0, help="seconds the squeue samples are spread over")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="batchd-bench-conn-"))
    os.chmod(root, 0o777)
    user = None
    if os.geteuid() == 0 and shutil.which("useradd"):
        user = f"bdb{uuid.uuid4().hex[:6]}"
        subprocess.run(["useradd", "-M", "-N", "-s", "/bin/sh", user], check=True)
    proc, env = start_daemon(root)
    os.environ["BATCHD_SOCKET"] = env["BATCHD_SOCKET"]
    try:
        for n in (int(x) for x in a.pings.split(",")):
            wall, failed = burst(n)
            print(f"concurrent pings n={n}: {wall * 1000:.0f} ms until the last answer, failed={failed}")
        (root / "holder.py").write_text(HOLDER)
        holder_py = "/usr/bin/python3" if user and os.path.exists("/usr/bin/python3") else sys.executable
        for k in (int(x) for x in a.idle.split(",")):
            holder = None
            if k:
                cmd = [holder_py, str(root / "holder.py"), env["BATCHD_SOCKET"], str(k)]
                if user:
                    pw = pwd.getpwnam(user)
                    cmd = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *cmd]
                holder = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                holder.stdout.readline()
            times = squeue_times(env, root, a.samples, a.spread_s)
            if holder:
                holder.stdin.close()
                holder.wait(30)
            who = f"user {user}" if user else "the same user (no root: squeue shares its cap)"
            print(f"squeue with {k} idle connections of {who}: median {statistics.median(times) * 1000:.0f} ms, "
                  f"worst {max(times) * 1000:.0f} ms over {len(times)} runs in {a.spread_s:g} s")
    finally:
        proc.terminate()
        proc.wait(30)
        if user:
            subprocess.run(["pkill", "-9", "-u", user], check=False)
            subprocess.run(["userdel", user], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
