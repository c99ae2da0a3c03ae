#!/usr/bin/env python3
"""Soak: submissions under random `kill -9`s of the daemon, then an audit that nothing
was lost, doubled or run twice.

A dev daemon (`batchd serve --dev`, 2 nodes x 16 CPUs, in a fresh temporary directory;
with `--backend postgresql` on a fresh database created on the server of `--pg-base`
and dropped at the end) takes submissions from N parallel submitters, threads each
running the real `sbatch` in a loop, for `--duration` seconds, while a killer thread
`kill -9`s the daemon at random moments (`--kills` times) and restarts it after a
random pause. Every job appends `<job_id> <run> <start>` to a shared log and exits.

Then every job is waited for, the daemon is stopped, and the audit compares what sbatch
acknowledged (the job id it printed, under the submission's unique `--comment`) with
the store and the jobs' log:

  lost           acknowledged, but the store has no such job for that submission
  doubled        one acknowledged submission stored as more than one job (by comment;
                 the jobs' submit tokens are printed)
  ran_twice      a job whose script logged more than one start
  never_ran      acknowledged, COMPLETED in the store, but its script never logged
  usage_mismatch a job without exactly one usage record per run it had
  unfinished     a job not COMPLETED by the end of the drain
  strays         supervisor processes of this soak still alive after the end
  refused        sbatch invocations that printed no job id (told the user it failed
                 or might have; informational: such a job, when stored, is not lost)
  node_fail      runs recorded NODE_FAIL (informational: only the daemon dies here, so
                 each is a run the restart gave up on; the job was requeued)

It prints ONE summary line on stdout, details of any problem on stderr, and exits 1
when anything was lost, doubled, ran twice or never ran, or a usage record, job or
supervisor is wrong (0 otherwise, 2 for a usage error).

    .venv/bin/python bench/soak.py --backend sqlite --duration 120 --kills 12
    .venv/bin/python bench/soak.py --backend postgresql --duration 120 --kills 12
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BIN = Path(sys.executable).parent
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE"}

CONFIG = """
cluster_name = "soak"
{database}
[scheduler]
interval_s = 1
kill_wait_s = 2
[[partition]]
name = "batch"
nodes = "ALL"
default = true
[[node]]
name = "node1"
cpus = 16
memory_mb = 64000
gpus = []
[[node]]
name = "node2"
cpus = 16
memory_mb = 64000
gpus = []
"""


class Daemon:
    """The dev daemon of the soak: start (no wait), kill -9, stop."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root, self.env = root, env
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.starts = 0

    def start(self) -> None:
        with open(self.root / "daemon.log", "a") as logf:
            self.proc = subprocess.Popen([str(BIN / "batchd"), "serve", "--dev", "--config",
                                          str(self.root / "batchd.toml")], cwd=self.root, stdout=logf,
                                         stderr=logf, env=self.env, start_new_session=True)
        self.starts += 1

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def ensure_up(self, timeout_s: float = 30) -> None:
        """Running and answering (restarted if it died by itself)."""
        deadline = time.time() + timeout_s
        while True:
            if self.proc is None or self.proc.poll() is not None:
                self.start()
            r = subprocess.run([str(BIN / "sinfo")], env=self.env, cwd=self.root, capture_output=True)
            if r.returncode == 0:
                return
            if time.time() > deadline:
                raise SystemExit("soak: error: the daemon does not come up; see " + str(self.root / "daemon.log"))
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()


def submitter(n: int, daemon: Daemon, log: Path, until: float, acks: list, refusals: list) -> None:
    """Run sbatch in a loop until `until`; each submission has a unique comment."""
    seq = 0
    job = f'echo "$SLURM_JOB_ID ${{SLURM_RESTART_COUNT:-0}} $(date +%s.%N)" >> {log}'
    while time.time() < until:
        comment = f"soak-{n}-{seq}"
        seq += 1
        r = subprocess.run([str(BIN / "sbatch"), "--parsable", "-c", "1", "--mem=64", "-t", "5", "-o", "/dev/null",
                            f"--comment={comment}", f"--wrap={job}"], env=daemon.env, cwd=daemon.root,
                           capture_output=True, text=True)
        out = r.stdout.strip()
        if r.returncode == 0 and out.isdigit():
            acks.append((comment, int(out), r.stderr.strip()))
        else:
            refusals.append((comment, r.returncode, r.stderr.strip()))


def killer(daemon: Daemon, until: float, kills: int, max_down_s: float, rng: random.Random, count: list) -> None:
    """`kills` SIGKILLs at moments drawn uniformly before `until` (one may hit a daemon
    still starting: that is part of the test), each followed by a restart after a random
    pause of up to `max_down_s`."""
    now = time.time()
    for at in sorted(rng.uniform(now + 1, until - 1) for _ in range(kills)):
        time.sleep(max(0.0, at - time.time()))
        daemon.kill9()
        count.append(time.time())
        time.sleep(rng.uniform(0, max_down_s))
        daemon.start()


def wait_all_final(daemon: Daemon, timeout_s: float) -> None:
    """Until every job in the store is final (through the API), or the timeout."""
    from batchd.cli.client import Unreachable, request

    os.environ["BATCHD_SOCKET"] = daemon.env["BATCHD_SOCKET"]
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            jobs = request("GET", "/v1/jobs", query={"all": "1"})["jobs"]
        except Unreachable:
            daemon.ensure_up()
            continue
        if all(j["state"] in FINAL for j in jobs):
            return
        time.sleep(1)


def strays(root: Path) -> list[int]:
    """Processes (supervisors, jobs) still running that belong to this soak."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(root) in cmd and "batchd serve" not in cmd:
            out.append(p.info["pid"])
    return out


def audit(url: str, acks: list, log: Path) -> dict[str, list[str]]:
    """Every problem found, by kind (the summary's counters), as readable lines."""
    from batchd.store import Store

    store = Store(url)
    try:
        jobs = store.list_jobs()
        usage = store.list_usage()
    finally:
        store.close()
    by_comment: dict[str, list] = {}
    for j in jobs:
        by_comment.setdefault(j.comment or "", []).append(j)
    starts: dict[int, list[str]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit():
            starts.setdefault(int(parts[0]), []).append(line)
    runs: dict[int, list[int]] = {}
    for u in usage:
        runs.setdefault(u.job_id, []).append(u.run)
    p: dict[str, list[str]] = {k: [] for k in ("lost", "doubled", "ran_twice", "never_ran", "usage_mismatch",
                                               "unfinished")}
    p["node_fail"] = [f"job {u.job_id} run {u.run}: NODE_FAIL" for u in usage if u.state == "NODE_FAIL"]
    for comment, jid, _err in acks:
        mine = by_comment.get(comment, [])
        if not any(j.id == jid for j in mine):
            p["lost"].append(f"{comment}: sbatch printed {jid}, the store has {[j.id for j in mine]}")
        if len(mine) > 1:
            p["doubled"].append(f"{comment}: jobs {[j.id for j in mine]} tokens {[j.submit_token for j in mine]}")
    acked = {jid for _c, jid, _e in acks}
    for j in jobs:
        logged = starts.get(j.id, [])
        if len(logged) > 1:
            p["ran_twice"].append(f"job {j.id} ({j.state}, restarts={j.restarts}): {logged}")
        if j.state != "COMPLETED":
            p["unfinished"].append(f"job {j.id}: {j.state} reason={j.reason}")
        elif not logged and j.id in acked:
            p["never_ran"].append(f"job {j.id}: COMPLETED but its script never logged")
        want = list(range(j.restarts + 1)) if j.state in FINAL else list(range(j.restarts))
        if sorted(runs.get(j.id, [])) != want:
            p["usage_mismatch"].append(f"job {j.id} ({j.state}): usage runs {sorted(runs.get(j.id, []))}, want {want}")
    return p


def pg_create(base: str) -> str:
    import psycopg

    name = f"batchd_soak_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return base.rpartition("/")[0] + "/" + name


def pg_drop(base: str, url: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{url.rpartition("/")[2]}" WITH (FORCE)')


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="soak.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="The audit, the summary line and the exit status are described in "
                                        "this file's docstring.")
    ap.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--pg-base", default="postgresql://postgres@127.0.0.1:5432/test", metavar="URL",
                    help="an existing PostgreSQL database to create the soak's fresh database from")
    ap.add_argument("--submitters", type=int, default=4, metavar="N", help="parallel sbatch loops (default 4)")
    ap.add_argument("--duration", type=float, default=120, metavar="S", help="seconds of submitting (default 120)")
    ap.add_argument("--kills", type=int, default=12, metavar="K", help="how many kill -9s (default 12)")
    ap.add_argument("--max-down", type=float, default=1.5, metavar="S",
                    help="longest pause before a restart (default 1.5)")
    ap.add_argument("--drain", type=float, default=300, metavar="S",
                    help="how long to wait for the jobs to end after submitting (default 300)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (and database)")
    a = ap.parse_args(argv)
    if a.submitters < 1 or a.duration <= 3 or a.kills < 0 or a.max_down < 0:
        ap.error("--submitters must be >= 1, --duration > 3, --kills and --max-down >= 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    seed = a.seed if a.seed is not None else int(time.time())
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="batchd-soak-"))
    os.chmod(root, 0o755)
    log = root / "runs.log"
    url = pg_create(a.pg_base) if a.backend == "postgresql" else f"sqlite:///{root / '.batchd' / 'batchd.db'}"
    database = f'database_url = "{url}"' if a.backend == "postgresql" else ""
    (root / "batchd.toml").write_text(CONFIG.format(database=database))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
    env.update(BATCHD_SOCKET=str(root / ".batchd" / "batchd.sock"), PATH=f"{BIN}:{env.get('PATH', '')}")
    daemon = Daemon(root, env)
    t0 = time.time()
    acks: list = []
    refusals: list = []
    kills: list = []
    try:
        daemon.ensure_up()
        until = time.time() + a.duration
        threads = [threading.Thread(target=submitter, args=(i, daemon, log, until, acks, refusals), daemon=True)
                   for i in range(a.submitters)]
        threads.append(threading.Thread(target=killer, args=(daemon, until, a.kills, a.max_down, rng, kills),
                                        daemon=True))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        daemon.ensure_up()
        wait_all_final(daemon, a.drain)
        daemon.stop()
        time.sleep(0.5)
        problems = audit(url, acks, log)
        stray = strays(root)
        if stray:
            problems["strays"] = [f"pids {stray}"]
            for pid in stray:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        else:
            problems["strays"] = []
    finally:
        daemon.stop()
        if not a.keep:
            if a.backend == "postgresql":
                pg_drop(a.pg_base, url)
            shutil.rmtree(root, ignore_errors=True)
    info = {"node_fail": problems.pop("node_fail")}
    for kind, lines in [*problems.items(), *info.items()]:
        for line in lines[:10]:
            sys.stderr.write(f"soak: {kind}: {line}\n")
    for comment, rc, err in refusals[:5]:
        sys.stderr.write(f"soak: refused (not counted as a problem): {comment} rc={rc}: {err[-300:]}\n")
    if a.keep:
        sys.stderr.write(f"soak: kept {root}" + (f" and {url}" if a.backend == "postgresql" else "") + "\n")
    sys.stderr.flush()
    repeated = sum("reply was lost" in err for _c, _j, err in acks)
    sys.stdout.write(
        f"soak: backend={a.backend} acked={len(acks)} kills={len(kills)} lost={len(problems['lost'])} "
        f"doubled={len(problems['doubled'])} ran_twice={len(problems['ran_twice'])} "
        f"usage_mismatch={len(problems['usage_mismatch'])} strays={len(problems['strays'])} "
        f"never_ran={len(problems['never_ran'])} unfinished={len(problems['unfinished'])} "
        f"refused={len(refusals)} node_fail={len(info['node_fail'])} lost_replies_recovered={repeated} "
        f"submitters={a.submitters} seed={seed} duration={time.time() - t0:.0f}s\n")
    sys.stdout.flush()
    return 1 if any(problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
