#!/usr/bin/env python3
"""Submit-path latency of batchd's `sbatch`.

    python bench/bench_submit.py [--samples 50] [--count 1000] [--sbatch PATH] [--fake]

Prints
  1. the median (and p90) wall time of one `sbatch --wrap true` process, end to end
     (interpreter start, imports, parse, socket round trip, exit), over --samples runs;
  2. the submissions per second of --count sequential `sbatch --wrap true` processes.

The daemon is the one at $BATCHD_SOCKET (a running `batchd serve`). With --fake a tiny
in-process server that accepts every submission stands in for it, which measures the
command's own cost (the budget is < 40 ms; real Slurm's sbatch takes about 10 ms).
Jobs submitted to a real daemon are cancelled at the end (`scancel` by name).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def fake_server(path: str) -> threading.Thread:
    """Accept-all stand-in for the daemon: every POST /v1/jobs gets the next job id."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    counter = [1]

    def serve() -> None:
        while True:
            conn, _ = srv.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                while len(body) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                reply = json.dumps({"job_id": counter[0], "array_task_ids": None}).encode()
                counter[0] += 1
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(reply) + reply)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def run_once(cmd: list[str], env: dict[str, str], cwd: str) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"sbatch failed (rc {p.returncode}): {p.stderr.decode().strip()}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=50, help="runs for the median (default 50)")
    ap.add_argument("--count", type=int, default=1000, help="sequential submissions (default 1000)")
    ap.add_argument("--sbatch", help="the sbatch executable (default: the one beside this Python)")
    ap.add_argument("--fake", action="store_true", help="use an in-process accept-all server")
    args = ap.parse_args()
    sbatch = args.sbatch or os.path.join(os.path.dirname(sys.executable), "sbatch")
    if not os.path.exists(sbatch):
        sbatch = shutil.which("sbatch") or sbatch
    env = dict(os.environ)
    work = tempfile.mkdtemp(prefix="bench-submit-")
    if args.fake:
        env["BATCHD_SOCKET"] = os.path.join(work, "fake.sock")
        fake_server(env["BATCHD_SOCKET"])
    elif not env.get("BATCHD_SOCKET"):
        print("BATCHD_SOCKET is not set (start `batchd serve --dev` or use --fake)", file=sys.stderr)
        return 2
    name = f"bench{os.getpid()}"
    cmd = [sbatch, "-J", name, "-o", "/dev/null", "--wrap", "true"]
    run_once(cmd, env, work)  # warm the page cache and .pyc files
    times = [run_once(cmd, env, work) for _ in range(args.samples)]
    times.sort()
    p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
    print(f"sbatch --wrap true: median {statistics.median(times) * 1000:.1f} ms, "
          f"p90 {p90 * 1000:.1f} ms over {len(times)} runs ({'fake server' if args.fake else env['BATCHD_SOCKET']})")
    t0 = time.perf_counter()
    for _ in range(args.count):
        run_once(cmd, env, work)
    dt = time.perf_counter() - t0
    print(f"{args.count} sequential submissions: {args.count / dt:.1f} submissions/s ({dt:.1f} s)")
    if not args.fake:
        scancel = os.path.join(os.path.dirname(sbatch), "scancel")
        if os.path.exists(scancel):
            subprocess.run([scancel, "-n", name], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
