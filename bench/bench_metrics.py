#!/usr/bin/env python3
"""Scrape time of `GET /metrics` and requests per second of the REST API's
`GET /slurm/v0.0.38/jobs` (issue 20) with 10,000 jobs in the queue and 64 cards.

    .venv/bin/python bench/bench_metrics.py [--jobs 10000] [--scrapes 30] [--rest-seconds 20]
                                            [--clients 4] [--distinct] [--pg URL]

A dev daemon (`batchd serve --dev`) on a fresh database (SQLite, or a fresh PostgreSQL
database on the server of --pg), 16 nodes of 4 GPUs; 60 one-GPU jobs running, `--jobs` held
array tasks pending. Prints the median and p90 wall time of a scrape (OpenMetrics, as
Prometheus asks) and its size, from a client on this machine; then `--clients` clients
(threads, each with a token from `scontrol token`) ask `GET /slurm/v0.0.38/jobs` (every job
of the queue, squeue's set) and `GET /slurm/v0.0.38/job/{id}` (one running job) for
`--rest-seconds` each: requests per second and the median latency.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

BIN = Path(sys.executable).parent


def config(url: str, port: int, jobs: int) -> str:
    nodes = "".join(f'[[node]]\nname = "gpu{i:02d}"\ncpus = 64\nmemory_mb = 512000\n'
                    f'gpus = [{{ type = "h200", count = 4 }}]\n' for i in range(1, 17))
    return (f'cluster_name = "bench"\n{url}\n[scheduler]\ninterval_s = 1\n[limits]\nmax_array_size = {jobs + 1}\n'
            f'[http]\nlisten = "127.0.0.1:{port}"\n[[partition]]\nname = "gpu"\nnodes = "ALL"\ndefault = true\n'
            + nodes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rest_load(url: str, token: str, clients: int, seconds: float) -> tuple[int, list[float], int, int]:
    """`clients` threads asking `url` for `seconds`: (requests answered, their latencies,
    jobs in the last reply, its size)."""
    import json
    import threading

    me = __import__("pwd").getpwuid(os.getuid()).pw_name
    headers = {"X-SLURM-USER-NAME": me, "X-SLURM-USER-TOKEN": token}
    lat: list[float] = []
    last: list[bytes] = [b""]
    end = time.time() + seconds
    lock = threading.Lock()

    def client() -> None:
        while time.time() < end:
            t0 = time.perf_counter()
            body = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120).read()
            with lock:
                lat.append(time.perf_counter() - t0)
                last[0] = body

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reply = json.loads(last[0])
    return len(lat), lat, len(reply["jobs"]), len(last[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--scrapes", type=int, default=30)
    ap.add_argument("--rest-seconds", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--distinct", action="store_true",
                    help="--jobs separate held jobs (bench/loadgen.py) instead of one held array")
    ap.add_argument("--pg", help="a PostgreSQL server URL (a fresh database is made on it)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="batchd-bench-metrics-"))
    db_line, dbname = "", None
    if args.pg:
        import psycopg

        dbname = f"batchd_bench_metrics_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{dbname}"')
        db_line = f'database_url = "{args.pg.rpartition("/")[0]}/{dbname}"'
    port = free_port()
    (root / "batchd.toml").write_text(config(db_line, port, args.jobs))
    env = dict(os.environ, BATCHD_SOCKET=str(root / ".batchd" / "batchd.sock"), BATCHD_HINTS="0")
    log = open(root / "daemon.log", "w")
    proc = subprocess.Popen([str(BIN / "batchd"), "serve", "--dev", "--log-level", "WARNING", "--config",
                             str(root / "batchd.toml")], cwd=root, env=env, stdout=log, stderr=log,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    sys.exit("the daemon did not come up:\n" + (root / "daemon.log").read_text()[-2000:])
                time.sleep(0.2)
        for _ in range(60):
            subprocess.run([str(BIN / "sbatch"), "-Q", "--gres=gpu:1", "--wrap", "sleep 600"], env=env, cwd=root,
                           check=True)
        if args.distinct:
            # one job each, not one array: the REST list (and squeue) shows a pending array as one record
            sys.path.insert(0, str(Path(__file__).parent))
            from loadgen import run as load

            got = load(env["BATCHD_SOCKET"], n=8, duration_s=None, count=args.jobs, name="restbench")
            print(f"{got['submitted']} held jobs submitted at {got['rate_per_s']}/s", file=sys.stderr)
        else:
            subprocess.run([str(BIN / "sbatch"), "-Q", "--hold", f"--array=0-{args.jobs - 1}", "--wrap", "true"],
                           env=env, cwd=root, check=True)
        time.sleep(3)  # a cycle or two over the full queue
        times, size = [], 0
        for _ in range(args.scrapes):
            req = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
            t0 = time.perf_counter()
            body = urllib.request.urlopen(req, timeout=30).read()
            times.append(time.perf_counter() - t0)
            size = len(body)
            time.sleep(0.1)
        text = body.decode()
        pending = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                      if line.startswith("batchd_jobs{") and 'state="PENDING"' in line)
        cards = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("batchd_gpus{"))
        times.sort()
        print(f"/metrics on {'PostgreSQL' if args.pg else 'SQLite'}: {int(pending)} pending jobs, {int(cards)} cards, "
              f"{size} bytes; scrape median {statistics.median(times) * 1000:.1f} ms, "
              f"p90 {times[int(0.9 * (len(times) - 1))] * 1000:.1f} ms ({args.scrapes} scrapes)")
        if args.rest_seconds > 0:
            token = subprocess.run([str(BIN / "scontrol"), "token"], env=env, cwd=root, check=True,
                                   capture_output=True, text=True).stdout.strip().partition("=")[2]
            base = f"http://127.0.0.1:{port}/slurm/v0.0.38"
            one = subprocess.run([str(BIN / "squeue"), "-h", "-t", "R", "-o", "%i"], env=env, cwd=root,
                                 check=True, capture_output=True, text=True).stdout.split()[0]
            jid = one.split("_")[0]
            for path in ("/jobs", f"/job/{jid}"):
                n, lat, items, size = rest_load(base + path, token, args.clients, args.rest_seconds)
                print(f"GET /slurm/v0.0.38{path} on {'PostgreSQL' if args.pg else 'SQLite'}: {items} jobs, "
                      f"{size} bytes a reply; {n / args.rest_seconds:.2f} requests/s with {args.clients} clients, "
                      f"median {statistics.median(lat) * 1000:.0f} ms ({n} requests)")
    finally:
        import pwd

        me = pwd.getpwuid(os.getuid()).pw_name  # the bench's jobs end with it, not left running
        subprocess.run([str(BIN / "scancel"), "-u", me], env=env, cwd=root, check=False)
        time.sleep(3)
        os.killpg(proc.pid, 15)
        proc.wait(60)
        if dbname:
            import psycopg

            with psycopg.connect(args.pg, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    main()
