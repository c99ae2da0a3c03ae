#!/usr/bin/env python3
"""Several daemons on one PostgreSQL database, on this machine: measures

1. failover time: from `kill -9` of the controller daemon to the next scheduling
   decision by another daemon (a job submitted before the kill starts), median of N;
2. submit-to-start latency on an idle cluster, submitting through a daemon that is
   not the controller (median of N).

Usage: bench/bench_failover.py [--pg URL] [--rounds 10]
The URL names an existing database to create a scratch database from
(default postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BIN = Path(sys.executable).parent
NODES = ("node1", "node2", "node3")


def config(root: Path, node: str, url: str) -> str:
    nodes = "".join(f'[[node]]\nname = "{n}"\ncpus = 8\nmemory_mb = 32000\ngpus = [{{ type = "h200", count = 4 }}]\n'
                    for n in NODES)
    return (f'cluster_name = "bench"\ndatabase_url = "{url}"\nstate_dir = "{root / node}"\n'
            f'socket = "{root / node / "s.sock"}"\n[scheduler]\ninterval_s = 5\nnode_timeout_s = 30\n'
            f'[[partition]]\nname = "gpu"\nnodes = "ALL"\ndefault = true\n{nodes}')


class Cluster:
    def __init__(self, root: Path, url: str):
        self.root, self.url, self.procs = root, url, {}
        for n in NODES:
            (root / n).mkdir(parents=True, exist_ok=True)
            (root / n / "c.toml").write_text(config(root, n, url))
        subprocess.run([str(BIN / "batchd"), "migrate", "--config", str(root / "node1" / "c.toml")], check=True,
                       capture_output=True)

    def env(self, n):
        return dict(os.environ, BATCHD_SOCKET=str(self.root / n / "s.sock"))

    def start(self, n):
        log = open(self.root / n / "log", "a")
        self.procs[n] = subprocess.Popen([str(BIN / "batchd"), "serve", "--config", str(self.root / n / "c.toml"),
                                          "--node", n], stdout=log, stderr=log, start_new_session=True)
        while subprocess.run([str(BIN / "sinfo")], env=self.env(n), capture_output=True).returncode:
            time.sleep(0.05)

    def kill(self, n, sig=signal.SIGKILL):
        p = self.procs.pop(n)
        p.send_signal(sig)
        p.wait()

    def req(self, n, method, path, **kw):
        from batchd.cli import client

        os.environ["BATCHD_SOCKET"] = str(self.root / n / "s.sock")
        return client.request(method, path, **kw)

    def submit(self, n, *args):
        r = subprocess.run([str(BIN / "sbatch"), "--parsable", *args], env=self.env(n), capture_output=True,
                           text=True, check=True)
        return int(r.stdout.strip())

    def state(self, n, jid):
        return self.req(n, "GET", "/v1/jobs", query={"ids": str(jid), "all": "1"})["jobs"][0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pg", default=os.environ.get("BATCHD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    import psycopg

    name = f"batchd_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(a.pg, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    root = Path(tempfile.mkdtemp(prefix="batchd-bench-"))
    cl = Cluster(root, a.pg.rpartition("/")[0] + "/" + name)
    try:
        for n in NODES:
            cl.start(n)
        # submit-to-start through a non-controller node, idle cluster
        lat = []
        for _ in range(a.rounds):
            ctl = cl.req("node1", "GET", "/v1/controller")["node"]
            via = next(n for n in NODES if n != ctl)
            t0 = time.time()
            jid = cl.submit(via, "--gres=gpu:1", "--wrap", "true")
            while cl.state(via, jid)["state"] == "PENDING":
                time.sleep(0.005)
            lat.append(time.time() - t0)
        fail = []
        for _ in range(a.rounds):
            ctl = cl.req("node1", "GET", "/v1/controller")["node"]
            other = next(n for n in NODES if n != ctl)
            # a held job: released right after the kill, so only a new controller can start it
            jid = cl.submit(other, "--hold", "--gres=gpu:1", "--wrap", "true")
            t0 = time.time()
            cl.kill(ctl)
            cl.req(other, "POST", "/v1/jobs/release", body={"ids": [str(jid)]})
            while cl.state(other, jid)["state"] == "PENDING":
                time.sleep(0.01)
            fail.append(time.time() - t0)
            cl.start(ctl)
        print(f"submit-to-start via a non-controller node (idle cluster), median of {a.rounds}: "
              f"{statistics.median(lat) * 1000:.0f} ms (min {min(lat) * 1000:.0f}, max {max(lat) * 1000:.0f})")
        print(f"failover (kill -9 of the controller -> next scheduling decision), median of {a.rounds}: "
              f"{statistics.median(fail):.2f} s (min {min(fail):.2f}, max {max(fail):.2f})")
    finally:
        for n in list(cl.procs):
            cl.kill(n, signal.SIGTERM)
        with psycopg.connect(a.pg, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
