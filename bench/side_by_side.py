#!/usr/bin/env python3
"""batchd beside real Slurm on the same machine: the figures of issue 17, in one table.

    .venv/bin/python bench/side_by_side.py [--quick] [--pg URL] [--history 100000]
                                           [--socket PATH] [--no-slurm] [--json-out FILE]

Targets, measured in the same run and interleaved sample by sample (each sample of a figure
takes every target in turn, the order rotating), so that the load of a busy machine falls on
all of them alike; the ratios are what to read, the absolute figures are noisy:
- `slurm`: the real Slurm's commands (/usr/bin) when a slurmctld answers (brought up by
  ../shared/slurm-peer/setup.sh; never started here), else left out;
- `sqlite` (and `pg` with --pg URL): a dev daemon (`batchd serve --dev`, the reference
  cluster of examples/slurm-reference.toml, the same as the Slurm peer's) on a fresh
  database; PostgreSQL gets fresh databases on that server, dropped at the end;
  with --socket PATH: the daemon already there instead (no fresh daemons, no --history);
- `floor`: `python -c pass` with the commands' own interpreter: what any Python command costs;
- `null`: batchd's own `sbatch` (and the load generator) against a daemon that answers at
  once without doing anything (bench/loadgen.py --serve-null): the floor of the client side.

Three phases, each on fresh daemons started from the same template database (empty, or
holding --history N finished jobs, see bench/sbs_history.py); Slurm's bench jobs are
cancelled between phases (by job name, nobody else's):
1. submit: submit -> start of one job on the idle node; one `sbatch --hold --wrap true`;
   sequential and 4/16-parallel `sbatch` processes; bench/loadgen.py with 16 connections;
2. pending: the queue filled to 1,000 held jobs (the load generator; Slurm: 16 sbatch at a
   time); `squeue`; `sacct -a`;
3. arrays: ten `sbatch --hold --array=0-999` in a row; `squeue` and `squeue -r` over the
   10,000 pending tasks; `sacct -a`; `scancel` of the ten arrays and the time until no task is
   left pending (capped); `sbatch --array=0-9999`;
plus daemon start time and RSS (psutil; Slurm: slurmctld) along the way. --quick scales every
count down (about two minutes). The machine's load average is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import sbs_history
import sbs_table as T
from sbs_daemon import BIN, Backend, Daemon, slurmctld_rss_mb

SLURM_BIN = Path("/usr/bin")
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


@dataclass
class Target:
    key: str                       # slurm | sqlite | pg | batchd | floor | null
    bindir: Path
    env: dict[str, str]
    cwd: Path
    socket: str = ""               # batchd daemons and the null daemon
    backend: Backend | None = None
    daemon: Daemon | None = None
    failures: int = 0
    last_error: str = ""
    errors: dict[str, int] = field(default_factory=dict)   # distinct failures and how often

    def failed(self, text: str) -> None:
        self.failures += 1
        self.last_error = text
        self.errors[text] = self.errors.get(text, 0) + 1

    def argv(self, name: str, *args: str) -> list[str]:
        if self.key == "floor":
            return [floor_python(), "-c", "pass"]
        return [str(self.bindir / name), *args]

    def run(self, name: str, *args: str, timeout: float = 900.0) -> tuple[float, str]:
        """Wall seconds of one command (nan when it failed) and its stdout."""
        t0 = time.perf_counter()
        try:
            r = subprocess.run(self.argv(name, *args), env=self.env, cwd=self.cwd, capture_output=True,
                               text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.failed(f"{name} {' '.join(args)}: killed after {timeout:g} s")
            return float("nan"), ""
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            self.failed(f"{name} {' '.join(args)}: rc {r.returncode}: {r.stderr.strip()[-300:]}")
            return float("nan"), r.stdout
        return dt, r.stdout

    def rss_mb(self) -> float:
        if self.key == "slurm":
            return slurmctld_rss_mb()
        if self.daemon is not None:
            return self.daemon.rss_mb()
        if self.socket and self.key == "batchd":
            return external_rss_mb(self.socket)
        return float("nan")


def floor_python() -> str:
    """The interpreter of batchd's commands (the shebang of .venv/bin/sbatch)."""
    first = (BIN / "sbatch").read_text().splitlines()[0]
    return first[2:].strip() if first.startswith("#!") else sys.executable


def external_rss_mb(path: str) -> float:
    """RSS of the process serving `path` (its pid from SO_PEERCRED of a connection)."""
    import socket
    import struct

    import psutil

    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)
            pid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        return psutil.Process(pid).memory_info().rss / 1e6
    except (OSError, psutil.Error):
        return float("nan")


def slurm_up() -> bool:
    if not (SLURM_BIN / "sbatch").exists() or not (SLURM_BIN / "scontrol").exists():
        return False
    try:
        return subprocess.run([str(SLURM_BIN / "scontrol"), "ping"], capture_output=True, text=True,
                              timeout=10).stdout.count("UP") > 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# ---------------------------------------------------------------------- sampling
def interleave(targets: list[Target], samples: int, fn, row: T.Row) -> None:
    """`samples` rounds; each round calls fn(target) for every target, the order rotating."""
    for i in range(samples):
        k = i % len(targets)
        for t in targets[k:] + targets[:k]:
            row.add(t.key, fn(t))


def rate(t: Target, n: int, par: int, args: list[str]) -> float:
    """Submissions per second of `n` sbatch processes, `par` at a time."""
    left = iter(range(n))
    lock = threading.Lock()
    bad = []

    def worker() -> None:
        while True:
            with lock:
                if next(left, None) is None:
                    return
            if math.isnan(t.run("sbatch", *args)[0]):
                bad.append(1)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(par) as ex:
        for f in [ex.submit(worker) for _ in range(par)]:
            f.result()
    return float("nan") if bad else n / (time.perf_counter() - t0)


def run_loadgen(sock: str, name: str, n: int = 16, duration: float | None = None, count: int | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).with_name("loadgen.py")), "--socket", sock, "-n", str(n),
           "--name", name, "--json"]
    cmd += ["--count", str(count)] if count else ["--duration", str(duration)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        say(f"loadgen failed: {r.stderr.strip()[-500:]}")
        return {"rate_per_s": float("nan"), "p50_ms": float("nan"), "p99_ms": float("nan"), "errors": {}}
    return json.loads(r.stdout)


def pending_of(t: Target, name: str) -> int:
    """Pending jobs (array tasks counted one by one) named `name`."""
    if t.daemon is not None:
        return t.daemon.pending(name)
    _, out = t.run("squeue", "-h", "-r", "-t", "PD", "-n", name, "-o", "%i")
    return len(out.split())


def wait_drained(t: Target, name: str, timeout_s: float) -> tuple[float, int]:
    """Seconds until nothing named `name` pends (inf past the timeout) and how many are left."""
    t0 = time.perf_counter()
    while True:
        left = pending_of(t, name)
        dt = time.perf_counter() - t0
        if left == 0:
            return dt, 0
        if dt > timeout_s:
            return float("inf"), left
        time.sleep(0.1 if t.daemon is not None else 0.5)


# ---------------------------------------------------------------------- phases
class Bench:
    def __init__(self, a: argparse.Namespace, targets: list[Target], root: Path):
        self.a = a
        self.targets = targets
        self.root = root
        self.name = f"sbs-{uuid.uuid4().hex[:6]}"
        self.rows: dict[str, T.Row] = {}
        self.remarks: list[str] = []

    def row(self, figure: str, unit: str, goal: str = "", check=None) -> T.Row:
        if figure not in self.rows:
            self.rows[figure] = T.Row(figure, unit, goal=goal, check=check)
        return self.rows[figure]

    def pick(self, *keys: str) -> list[Target]:
        return [t for t in self.targets if t.key in keys or (t.key in T.BATCHD and "batchd" in keys)]

    def begin_phase(self, phase: str) -> None:
        """Fresh daemons from the template (or, for Slurm and --socket, the bench's jobs cancelled)."""
        say(f"phase {phase}")
        start = self.row("daemon start (to its first answer)", "s")
        for t in self.targets:
            if t.backend is not None:
                if t.daemon is not None:
                    t.daemon.stop()
                t.daemon = Daemon(t.backend, phase, t.backend.new_db(phase))
                t.daemon.start()
                t.socket, t.env, t.cwd = t.daemon.socket, t.daemon.env, t.daemon.dir
                start.add(t.key, t.daemon.start_s)
            elif t.key in ("slurm", "batchd"):
                t.run("scancel", "-n", self.name)
                wait_drained(t, self.name, self.a.cancel_timeout)

    def end(self) -> None:
        for t in self.targets:
            if t.daemon is not None:
                t.daemon.stop()
            elif t.key in ("slurm", "batchd"):
                t.run("scancel", "-n", self.name)

    def rss(self, label: str) -> None:
        r = self.row(f"daemon RSS, {label}", "MB", *(("≤ 300 MB", T.at_most(300)) if "10,000" in label else ()))
        for t in self.pick("slurm", "batchd"):
            r.add(t.key, t.rss_mb())

    def phase_submit(self) -> None:
        a, name = self.a, self.name
        self.begin_phase("submit")
        self.rss("idle")
        self.submit_to_start()
        hold = ["--hold", "-J", name, "--wrap", "true"]
        cmd_targets = self.pick("slurm", "batchd", "floor", "null")
        say("one sbatch")
        interleave(cmd_targets, a.samples, lambda t: t.run("sbatch", *hold)[0],
                   self.row("one `sbatch --hold --wrap true`, wall", "s", "≤ 2× floor", T.at_most_floor(2)))
        say(f"sequential sbatch ({a.rounds}×{a.seq})")
        interleave(cmd_targets, a.rounds, lambda t: rate(t, a.seq, 1, hold),
                   self.row(f"sequential submissions ({a.rounds}×{a.seq} in a row)", "/s"))
        for par in (4, 16):
            say(f"{par} parallel sbatch ({a.rounds}×{a.par_count})")
            goal = ("≥ 90 % null, ≥ Slurm/2", T.par16_goal) if par == 16 else ()
            interleave(cmd_targets, a.rounds, lambda t, p=par: rate(t, a.par_count, p, hold),
                       self.row(f"{par} parallel submitters ({a.rounds}×{a.par_count})", "/s", *goal))
        say(f"loadgen 16 connections, {a.loadgen_s:g} s")
        lg = self.row(f"socket load generator, 16 connections ({a.loadgen_s:g} s)", "/s",
                      "≥ 500/s SQLite, ≥ 300/s PG", T.rate_at_least({"sqlite": 500, "pg": 300, "batchd": 500}))
        p50 = self.row("  its latency p50", "s")
        p99 = self.row("  its latency p99", "s")
        for t in self.pick("batchd", "null"):
            r = run_loadgen(t.socket, name, 16, duration=a.loadgen_s)
            lg.add(t.key, r["rate_per_s"])
            p50.add(t.key, r["p50_ms"] / 1000)
            p99.add(t.key, r["p99_ms"] / 1000)
            if r.get("errors"):
                lg.notes[t.key] = f"{r['rate_per_s']:.1f} /s, errors {r['errors']}"
        self.rss("after the submit phase")

    def submit_to_start(self) -> None:
        """Submit one (unheld) job on the idle node; seconds from the submission to its start
        (batchd: the daemon's own submit_time/start_time; Slurm: squeue polled every 20 ms)."""
        row = self.row("submit → start on an idle node", "s", "≤ 0.2 s", T.at_most(0.2))
        for _ in range(self.a.start_samples):
            for t in self.pick("slurm", "batchd"):
                _, out = t.run("sbatch", "--parsable", "-J", self.name + "-run", "--wrap", "true")
                job = out.strip().split(";")[0]
                if not job.isdigit():
                    row.add(t.key, float("nan"))
                    continue
                t0 = time.perf_counter()
                if t.daemon is not None:
                    where = f"id = {job} AND start_time IS NOT NULL"
                    while not t.daemon.backend.count_jobs(t.daemon.db_url, where) and time.perf_counter() - t0 < 30:
                        time.sleep(0.01)
                    row.add(t.key, self.started_after(t, int(job), row))
                else:
                    while time.perf_counter() - t0 < 30:
                        state = t.run("squeue", "-h", "-j", job, "-o", "%T")[1].strip()
                        if state != "PENDING":
                            break
                        time.sleep(0.02)
                    row.add(t.key, time.perf_counter() - t0)

    def started_after(self, t: Target, job_id: int, row: T.Row) -> float:
        """StartTime - SubmitTime as the daemon recorded them; a start recorded before the
        submission (the cycle's clock read before the job was stored) counts as 0 and is noted."""
        from batchd.store import Store

        store = Store(t.daemon.db_url)
        try:
            j = store.get_job(job_id)
        finally:
            store.close()
        if j is None or j.start_time is None:
            return float("nan")
        if j.start_time < j.submit_time:
            self.remarks.append(f"{t.key}: job {job_id} has StartTime {j.submit_time - j.start_time:.3f} s "
                                f"before its SubmitTime (counted as 0)")
        return max(0.0, j.start_time - j.submit_time)

    def phase_pending(self) -> None:
        a, name = self.a, self.name
        self.begin_phase("pending")
        say(f"filling to {a.pending} pending")
        fill = self.row(f"filling 0 → {a.pending} pending (loadgen 16 conn.; Slurm 16 sbatch)", "/s")
        for t in self.pick("slurm", "batchd"):
            if t.key == "slurm":
                fill.add(t.key, rate(t, a.pending, 16, ["--hold", "-J", name, "--wrap", "true"]))
            else:
                fill.add(t.key, run_loadgen(t.socket, name, 16, count=a.pending)["rate_per_s"])
        targets = self.pick("slurm", "batchd", "floor")
        say("squeue, sacct")
        interleave(targets, a.samples, lambda t: t.run("squeue")[0],
                   self.row(f"`squeue` with {a.pending:,} pending", "s", "≤ 3× floor", T.at_most_floor(3)))
        interleave(targets, a.samples, lambda t: t.run("sacct", "-a")[0],
                   self.row(f"`sacct -a` over ~{a.pending:,} jobs", "s"))
        self.rss(f"{a.pending:,} pending")

    def phase_arrays(self) -> None:
        a, name = self.a, self.name
        self.begin_phase("arrays")
        n_tasks = a.arrays * a.array_size
        spec = f"0-{a.array_size - 1}"
        rows = [self.row(f"`sbatch --hold --array={spec}`, the {k} of {a.arrays} in a row", "s")
                for k in ("first", "last")]
        targets = self.pick("slurm", "batchd")
        say(f"{a.arrays} arrays of {a.array_size}")
        for i in range(a.arrays):
            for t in targets[i % len(targets):] + targets[:i % len(targets)]:
                dt = t.run("sbatch", "--hold", f"--array={spec}", "-J", name, "--wrap", "true")[0]
                if i == 0:
                    rows[0].add(t.key, dt)
                elif i == a.arrays - 1:
                    rows[1].add(t.key, dt)
        tasks = f"{n_tasks:,}"
        floor_targets = self.pick("slurm", "batchd", "floor")
        say("squeue / squeue -r / sacct over the arrays")
        interleave(floor_targets, a.big_samples, lambda t: t.run("squeue")[0],
                   self.row(f"`squeue` with {tasks} array tasks pending", "s", "≤ 250 ms", T.at_most(0.25)))
        interleave(floor_targets, a.big_samples, lambda t: t.run("squeue", "-r")[0],
                   self.row(f"`squeue -r` with {tasks} array tasks pending", "s", "≤ 250 ms", T.at_most(0.25)))
        interleave(floor_targets, a.big_samples, lambda t: t.run("sacct", "-a")[0],
                   self.row(f"`sacct -a` over ~{tasks} jobs", "s", "≤ Slurm", T.at_most_slurm))
        self.rss(f"{tasks} tasks pending")
        cmd = self.row(f"`scancel` of the {a.arrays} arrays, the command", "s")
        gone = self.row(f"… until none of the {tasks} tasks pends", "s", "< 2 s", T.at_most(2.0))
        for t in targets:
            say(f"scancel on {t.key}")
            t0 = time.perf_counter()
            dt = t.run("scancel", "-n", name, timeout=a.cancel_timeout)[0]
            cmd.add(t.key, dt)
            if math.isnan(dt):
                cmd.notes[t.key] = "failed: " + t.last_error.rsplit(": ", 1)[-1][:60]
            dt, left = wait_drained(t, name, max(1.0, a.cancel_timeout - (time.perf_counter() - t0)))
            gone.add(t.key, dt if math.isinf(dt) else time.perf_counter() - t0)
            if left:
                gone.notes[t.key] = f"> {a.cancel_timeout:g} s ({left:,} left)"
        time.sleep(2)
        self.rss("after the cancel")
        say("sbatch --array=0-9999")
        big = self.row("`sbatch --hold --array=0-9999`", "s", "< 1 s", T.at_most(1.0))
        for t in targets:
            dt = t.run("sbatch", "--hold", "--array=0-9999", "-J", name, "--wrap", "true")[0]
            big.add(t.key, dt)
            if math.isnan(dt):
                big.notes[t.key] = "refused: " + t.last_error.rsplit(":", 1)[-1].strip()[:60]


# ---------------------------------------------------------------------- main
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="every count scaled down (about two minutes)")
    ap.add_argument("--pg", metavar="URL", help="also a daemon on PostgreSQL (a database on this server to create "
                    "fresh databases from, e.g. postgresql://postgres@127.0.0.1:5432/test)")
    ap.add_argument("--socket", metavar="PATH", help="measure the daemon already serving PATH (no fresh daemons)")
    ap.add_argument("--history", type=int, default=0, metavar="N", help="N finished jobs in every fresh database")
    ap.add_argument("--no-slurm", action="store_true", help="leave real Slurm out even when it answers")
    ap.add_argument("--json-out", metavar="FILE", help="write every sample as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (daemon logs, databases)")
    a = ap.parse_args()
    full = dict(samples=10, start_samples=3, rounds=3, seq=100, par_count=100, loadgen_s=10.0, pending=1000,
                arrays=10, array_size=1000, big_samples=3, cancel_timeout=120.0)
    quick = dict(samples=3, start_samples=1, rounds=1, seq=10, par_count=24, loadgen_s=3.0, pending=200,
                 arrays=2, array_size=1000, big_samples=1, cancel_timeout=15.0)
    for k, v in (quick if a.quick else full).items():
        setattr(a, k, v)
    if a.socket and a.history:
        ap.error("--history needs fresh daemons (not --socket)")
    return a


def fresh_bytecode() -> None:
    """Compile the commands' and the daemon's modules where their cached bytecode is stale
    (an edited checkout under PYTHONDONTWRITEBYTECODE recompiles them at every start, 5 to
    10 ms a command): an installed wheel has its bytecode from the install."""
    import batchd
    import batchd.cli

    for pkg in (batchd, batchd.cli):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(pkg.__file__).parent)],
                       stdout=subprocess.DEVNULL, check=False)


def main() -> None:
    a = parse_args()
    fresh_bytecode()
    root = Path(tempfile.mkdtemp(prefix="batchd-sbs-"))
    os.chmod(root, 0o755)
    base_env = {k: v for k, v in os.environ.items() if k != "BATCHD_SOCKET"}
    targets: list[Target] = []
    if not a.no_slurm and slurm_up():
        (root / "slurm").mkdir()
        targets.append(Target("slurm", SLURM_BIN, base_env, root / "slurm"))
    backends: list[Backend] = []
    if a.socket:
        env = dict(base_env, BATCHD_SOCKET=a.socket)
        (root / "batchd").mkdir()  # the submit -> start job writes its slurm-N.out there
        targets.append(Target("batchd", BIN, env, root / "batchd", socket=a.socket))
    else:
        backends.append(Backend("sqlite", root))
        if a.pg:
            backends.append(Backend("pg", root, a.pg))
        targets += [Target(b.kind, BIN, base_env, root, backend=b) for b in backends]
    null_sock = str(root / "null.sock")
    null = subprocess.Popen([sys.executable, str(Path(__file__).with_name("loadgen.py")), "--serve-null", null_sock],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    null.stdout.readline()
    (root / "null").mkdir()
    targets.append(Target("null", BIN, dict(base_env, BATCHD_SOCKET=null_sock), root / "null", socket=null_sock))
    targets.append(Target("floor", BIN, base_env, root))
    say("targets: " + ", ".join(t.key for t in targets) + (" (no Slurm answers)" if "slurm" not in
                                                            [t.key for t in targets] else ""))
    bench = Bench(a, targets, root)
    try:
        for b in backends:  # migrate the template (and load the history) once per backend
            d = Daemon(b, "base", b.template)
            d.start()
            if a.history:
                ids = sbs_history.run_templates(d, bench.name + "-tmpl")
                d.stop()
                say(f"{b.kind}: inserting {a.history:,} finished jobs")
                secs = sbs_history.load(b.template, ids, a.history)
                say(f"{b.kind}: {a.history:,} finished jobs in {secs:.1f} s ({a.history / secs:,.0f} /s)")
            d.stop()
        bench.phase_submit()
        bench.phase_pending()
        bench.phase_arrays()
    finally:
        bench.end()
        os.killpg(null.pid, 15)
        null.wait()
        for b in backends:
            b.cleanup()
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    keys = [t.key for t in targets]
    load = os.getloadavg()
    hist = f", {a.history:,} finished jobs of history in batchd's database" if a.history else ""
    print(f"\nbatchd side by side ({'quick' if a.quick else 'full'}{hist}); {os.cpu_count()} CPUs, "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; ratios are batchd's cost over the other's\n")
    print(T.render(list(bench.rows.values()), keys))
    for line in bench.remarks:
        print(f"\n{line}")
    for t in targets:
        for text, n in t.errors.items():
            print(f"\n{t.key}: failed {n}×: {text}")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({r.figure: {"unit": r.unit, "values": r.values, "notes": r.notes}
                                                for r in bench.rows.values()}, indent=1))
    if not a.keep:
        return
    print(f"\nwork directory kept: {root}")


if __name__ == "__main__":
    main()
