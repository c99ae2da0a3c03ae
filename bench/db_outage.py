#!/usr/bin/env python3
"""What happens when the database is unreachable for 30 s (issue 8): two daemons on a
private PostgreSQL instance (its own data dir and port, so nothing else is touched), a
job running across the outage, a job ending during it, submissions and queries during
it. Prints a timeline; run as root on a machine with PostgreSQL's binaries.

    .venv/bin/python bench/db_outage.py [--outage 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BIN = Path(sys.executable).parent
PGBIN = Path("/usr/lib/postgresql") / sorted(os.listdir("/usr/lib/postgresql"))[-1] / "bin"
PORT = 5439


def pg(cmd: list[str], **kw):
    return subprocess.run(["runuser", "-u", "postgres", "--", *cmd], capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--outage", type=int, default=30)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="batchd-outage-"))
    os.chmod(root, 0o755)
    data = root / "pgdata"
    data.mkdir()
    shutil.chown(data, "postgres", "postgres")
    t0 = time.time()

    def say(msg):
        print(f"[{time.time() - t0:6.1f}s] {msg}", flush=True)

    pg([str(PGBIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"], check=True)

    def pg_start():
        pg([str(PGBIN / "pg_ctl"), "-D", str(data), "-o", f"-p {PORT} -k {data}", "-l", str(data / "pg.log"),
            "-w", "start"], check=True)

    def pg_stop():
        pg([str(PGBIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], check=True)

    pg_start()
    url = f"postgresql://postgres@127.0.0.1:{PORT}/postgres"
    nodes = ("node1", "node2")
    procs = {}
    try:
        for n in nodes:
            (root / n).mkdir()
            nodecfg = "".join(f'[[node]]\nname = "{m}"\ncpus = 8\nmemory_mb = 32000\ngpus = [{{ type = "h200", count = 4 }}]\n'
                              for m in nodes)
            (root / n / "c.toml").write_text(
                f'cluster_name = "outage"\ndatabase_url = "{url}"\nstate_dir = "{root / n}"\n'
                f'socket = "{root / n / "s.sock"}"\n[scheduler]\ninterval_s = 2\nnode_timeout_s = 30\n'
                f'[[partition]]\nname = "gpu"\nnodes = "ALL"\ndefault = true\n{nodecfg}')
        subprocess.run([str(BIN / "batchd"), "migrate", "--config", str(root / "node1" / "c.toml")], check=True,
                       capture_output=True)
        for n in nodes:
            log = open(root / n / "log", "a")
            procs[n] = subprocess.Popen([str(BIN / "batchd"), "serve", "--config", str(root / n / "c.toml"),
                                         "--node", n], stdout=log, stderr=log, start_new_session=True)
        env = dict(os.environ, BATCHD_SOCKET=str(root / "node2" / "s.sock"))

        def cmd(*args):
            r = subprocess.run([str(BIN / args[0]), *args[1:]], env=env, capture_output=True, text=True, cwd=root)
            return r.returncode, (r.stdout + r.stderr).strip()

        while cmd("sinfo")[0]:
            time.sleep(0.2)
        long_job = cmd("sbatch", "--parsable", "--gres=gpu:2", "-o", str(root / "long.out"), "--wrap",
                       "for i in $(seq 1 60); do echo tick $i; sleep 1; done")[1]
        short_job = cmd("sbatch", "--parsable", "--gres=gpu:1", "--wrap", "sleep 10; echo done")[1]
        time.sleep(3)
        say(f"before: squeue ->\n{cmd('squeue')[1]}")
        say(f"database DOWN for {a.outage} s (pg_ctl stop -m fast)")
        pg_stop()
        down_at = time.time()
        time.sleep(2)
        say(f"during: sbatch -> rc={cmd('sbatch', '--wrap', 'true')}")
        say(f"during: squeue -> rc={cmd('squeue')}")
        time.sleep(max(0, a.outage - (time.time() - down_at)))
        ticks_during = (root / "long.out").read_text().count("tick")
        say(f"long job printed {ticks_during} ticks so far (it kept running); daemons alive: "
            f"{[n for n, p in procs.items() if p.poll() is None]}")
        pg_start()
        say("database UP again")
        time.sleep(8)
        say(f"after: squeue ->\n{cmd('squeue')[1]}")
        say(f"after: sacct ->\n{cmd('sacct', '-X', '-j', f'{long_job},{short_job}', '--format=JobID,State,Elapsed')[1]}")
        say(f"after: sinfo ->\n{cmd('sinfo')[1]}")
        say(f"after: controller -> {cmd('batchd', 'controller', 'status')[1]}")
        new = cmd("sbatch", "--parsable", "--wrap", "true")[1]
        time.sleep(3)
        say(f"after: a new job {new}: {cmd('sacct', '-X', '-n', '-j', new, '--format=State')[1]}")
        # wait for the long job and count its usage records
        from batchd.cli.client import request

        os.environ["BATCHD_SOCKET"] = env["BATCHD_SOCKET"]
        while request("GET", "/v1/jobs", query={"ids": long_job, "all": "1"})["jobs"][0]["state"] == "RUNNING":
            time.sleep(1)
        recs = [r for r in request("GET", "/v1/accounting", query={"duplicates": "1", "all_users": "1"})["records"]
                if r["step"] is None]
        say("usage records (job, state, elapsed): "
            + ", ".join(f"{r['job_id']}:{r['state']}:{r['elapsed_s']}s" for r in recs))
        say(f"long job output: {(root / 'long.out').read_text().count('tick')} ticks (60 expected)")
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
            p.wait()
        pg_stop()
        subprocess.run(["pkill", "-f", f"batchd.node.supervisor {root}"], check=False)


if __name__ == "__main__":
    main()
