#!/usr/bin/env python3
"""Interactive latency (issue 19): batchd's `srun` beside the real Slurm's on the same machine.

    .venv/bin/python bench/bench_interactive.py [--samples 10] [--no-slurm]

Two figures, each sample taking every target in turn (order rotating), on an idle cluster:
- `srun --gres=gpu:1 true`: wall time of the whole command (submit, schedule, start, run,
  end, exit code);
- `srun --gres=gpu:1 --pty sh -i`: from the command's start to the shell's first prompt on
  srun's terminal (a real pseudo-terminal), then `exit` and the time until srun has ended.

Targets: `batchd`, a dev daemon (`batchd serve --dev`) on a fresh SQLite database with the
reference cluster of examples/slurm-reference.toml (the Slurm peer's, scheduler interval
1 s); `slurm`, the real Slurm's /usr/bin/srun when a slurmctld answers
(../shared/slurm-peer/setup.sh; never started here). Prints a table of medians and p90s.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sbs_daemon import BIN, Backend, Daemon  # noqa: E402
from side_by_side import SLURM_BIN, slurm_up  # noqa: E402

PROMPT = b"BENCH-PROMPT> "


def run_plain(srun: str, env: dict[str, str], cwd: str) -> float:
    import subprocess

    t0 = time.perf_counter()
    r = subprocess.run([srun, "--gres=gpu:1", "true"], env=env, cwd=cwd, capture_output=True, timeout=120)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{srun} failed: {r.stderr.decode(errors='replace')}")
    return dt


def run_pty(srun: str, env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(seconds to the first prompt, seconds from `exit` to srun's end)."""
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.execve(srun, [srun, "--gres=gpu:1", "--pty", "sh", "-i"], dict(env, PS1=PROMPT.decode()))
    seen = b""
    first = end = float("nan")
    try:
        deadline = t0 + 120
        while PROMPT not in seen and time.perf_counter() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:
                    break
        first = time.perf_counter() - t0
        if PROMPT not in seen:
            raise SystemExit(f"{srun} --pty gave no prompt: {seen.decode(errors='replace')!r}")
        t1 = time.perf_counter()
        os.write(fd, b"exit\n")
        while time.perf_counter() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if select.select([fd], [], [], 0.05)[0]:
                try:
                    os.read(fd, 65536)
                except OSError:
                    pass
        end = time.perf_counter() - t1
    finally:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        os.close(fd)
    return first, end


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--no-slurm", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="batchd-bench-interactive-"))
    backend = Backend("sqlite", root)
    daemon = Daemon(backend, "interactive", backend.new_db("interactive", template=False))
    daemon.start()
    targets = {"batchd": (str(BIN / "srun"), dict(daemon.env, PATH=f"{BIN}:{os.environ.get('PATH', '')}"))}
    if not args.no_slurm and slurm_up():
        targets["slurm"] = (str(SLURM_BIN / "srun"), dict(os.environ))
    else:
        print("no Slurm answers (../shared/slurm-peer/setup.sh): batchd only", file=sys.stderr)
    figures: dict[str, dict[str, list[float]]] = {k: {"plain": [], "prompt": [], "exit": []} for k in targets}
    try:
        names = list(targets)
        run_plain(*targets[names[0]], cwd=str(daemon.dir))  # a warm-up: imports, first cycle
        for i in range(args.samples):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                srun, env = targets[name]
                figures[name]["plain"].append(run_plain(srun, env, str(daemon.dir)))
                first, end = run_pty(srun, env, str(daemon.dir))
                figures[name]["prompt"].append(first)
                figures[name]["exit"].append(end)
    finally:
        daemon.stop()
    print(f"\ninteractive latency, {args.samples} samples each, idle cluster "
          f"(load average {os.getloadavg()[0]:.2f}); seconds, median / p90")
    print(f"{'figure':<44}" + "".join(f"{n:>18}" for n in targets))
    rows = (("srun --gres=gpu:1 true (wall)", "plain"), ("srun --gres=gpu:1 --pty sh -i: first prompt", "prompt"),
            ("  then exit: srun ended", "exit"))
    for label, key in rows:
        cells = "".join(f"{statistics.median(figures[n][key]):>9.2f} /{pct(figures[n][key], 0.9):>6.2f}"
                        for n in targets)
        print(f"{label:<44}{cells}")


if __name__ == "__main__":
    main()
