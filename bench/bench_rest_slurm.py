#!/usr/bin/env python3
"""Real Slurm's slurmrestd beside batchd's REST API: `GET /slurm/v0.0.38/jobs` with the
same number of held jobs in the queue, the same clients, the same seconds.

    ../shared/slurm-peer/setup.sh                       # a real Slurm 22.05 (as root)
    .venv/bin/python bench/bench_rest_slurm.py [--jobs 1000] [--clients 4] [--seconds 15]

Slurm's side: N separate `sbatch --hold` jobs (slurmctld keeps a pending array as one
record), Debian's slurmrestd
run as an unprivileged user with `rest_auth/local` on a Unix socket (it refuses to run as
root). batchd's side: bench/bench_metrics.py's daemon with the same count of separate held
jobs (`--distinct`),
`--rest-seconds` of the same length. Prints requests per second and the median latency
of each, and each reply's size.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BIN = Path(sys.executable).parent
REST_USER = "nobody"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=120)
        self.path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.path)
        self.sock = s


def _load(sock: str, clients: int, seconds: float) -> tuple[int, list[float], int, int]:
    lat: list[float] = []
    last = [b""]
    errors = [0]
    end = time.time() + seconds
    lock = threading.Lock()

    def client() -> None:
        while time.time() < end:
            c = _UnixConnection(sock)
            t0 = time.perf_counter()
            try:
                c.request("GET", "/slurm/v0.0.38/jobs")
                body = c.getresponse().read()
            except OSError:
                errors[0] += 1
                continue
            finally:
                c.close()
            with lock:
                lat.append(time.perf_counter() - t0)
                last[0] = body

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors[0]:
        print(f"slurmrestd: {errors[0]} requests failed (connection reset)", file=sys.stderr)
    return len(lat), lat, len(json.loads(last[0])["jobs"]), len(last[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=15.0)
    args = ap.parse_args()
    if not shutil.which("slurmrestd", path="/usr/sbin:/usr/bin") or subprocess.run(
            ["/usr/bin/scontrol", "ping"], capture_output=True).returncode != 0:
        sys.exit("needs the Slurm peer (../shared/slurm-peer/setup.sh) and Debian's slurmrestd")
    # separate jobs: slurmctld keeps a pending array as one record, and so would the reply
    name = f"restbench{os.getpid()}"
    procs = [subprocess.Popen(["/usr/bin/sbatch", "-Q", "--hold", "-J", name, "--wrap", "true"], cwd="/tmp")
             for _ in range(args.jobs)]
    for p in procs:
        p.wait()
    ids = ["--name", name]
    d = tempfile.mkdtemp(prefix="bench-slurmrestd-")
    os.chmod(d, 0o777)
    sock = os.path.join(d, "rest.sock")
    pw = pwd.getpwnam(REST_USER)
    rest = subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                             shutil.which("slurmrestd", path="/usr/sbin:/usr/bin") or "slurmrestd",
                             "-a", "rest_auth/local", f"unix:{sock}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        n, lat, items, size = _load(sock, args.clients, args.seconds)
        print(f"Slurm 22.05.8 slurmrestd GET /slurm/v0.0.38/jobs: {items} jobs, {size} bytes a reply; "
              f"{n / args.seconds:.2f} requests/s with {args.clients} clients, "
              f"median {statistics.median(lat) * 1000:.0f} ms ({n} requests)")
    finally:
        rest.terminate()
        rest.wait(10)
        subprocess.run(["/usr/bin/scancel", *ids], check=False)
        shutil.rmtree(d, ignore_errors=True)
    subprocess.run([sys.executable, str(Path(__file__).parent / "bench_metrics.py"), "--jobs", str(args.jobs),
                    "--scrapes", "3", "--rest-seconds", str(args.seconds), "--clients", str(args.clients),
                    "--distinct"],
                   check=True)


if __name__ == "__main__":
    main()
