"""Median wall time of one `decide()` on large synthetic snapshots.

    .venv/bin/python bench/bench_decide.py [--repeat N] [--sizes 10000,100000]

Cluster: 4 nodes x 8 GPUs (256 CPUs, 2 TiB each), 10 accounts (quota 3 GPUs, over-quota
weight 1, every other one limited to 8), 500 running jobs (all 32 GPUs busy, plus CPU-only
jobs), and N pending jobs: 1-4 GPU jobs, 2-node gangs, CPU-only jobs, mixed QOS priorities,
time limits known for most (so backfill reservations are computed). All passes run.
Goals: N=10,000 under 200 ms; N=100,000 under 2 s. Each size is timed twice: the scheduler alone
(multifactor priorities all 0) and with `batchd.priority.job_priorities` (written elsewhere).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import batchd.scheduler.cycle as decide_mod  # noqa: E402
from batchd.scheduler import decide, load_snapshot  # noqa: E402

NOW = 1_700_000_000


def build(n_pending: int, n_running: int = 500, seed: int = 1) -> dict:
    rnd = random.Random(seed)
    nodes = [{"name": f"gpu{i}", "cpus": 256, "memory_mb": 2_097_152, "state": "MIXED",
              "gpus": [{"type": "rtxpro6000", "count": 8}]} for i in range(4)]
    accounts = [{"name": f"team{i}", "parent": None, "priority": 100, "shares": 1,
                 "resources": {"gres/gpu": {"quota": 3, "limit": 8 if i % 2 else -1, "over_quota_weight": 1}}}
                for i in range(10)]
    jobs = []
    jid = 1
    gpu_slots = [(n["name"], g) for n in nodes for g in range(8)]
    for k in range(n_running):
        acct = f"team{k % 10}"
        job = {"id": jid, "account": acct, "user": f"u{k % 37}", "state": "RUNNING", "priority": 50,
               "preemptible": True, "submit_time": NOW - 7200 + k, "start_time": NOW - 3600 + k,
               "time_limit_s": rnd.choice([3600 * 2, 3600 * 4, 3600 * 8, None]), "tasks": 1}
        if k < len(gpu_slots):
            nname, g = gpu_slots[k]
            job["per_task"] = {"gres/gpu": 1, "cpu": 4, "mem": 16384}
            job["allocation"] = {nname: {"tasks": 1, "gpus": [g], "cpus": 4, "memory_mb": 16384}}
        else:
            nname = nodes[k % 4]["name"]
            job["per_task"] = {"cpu": 1, "mem": 1024}
            job["allocation"] = {nname: {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 1024}}
        jobs.append(job)
        jid += 1
    for k in range(n_pending):
        kind = rnd.random()
        job = {"id": jid, "account": f"team{rnd.randrange(10)}", "user": f"u{rnd.randrange(37)}",
               "state": "PENDING", "priority": rnd.choice([50, 50, 50, 75, 100]), "submit_time": NOW - n_pending + k,
               "time_limit_s": rnd.choice([600, 1800, 3600, 7200, None])}
        job["preemptible"] = job["priority"] < 100
        if kind < 0.75:
            job.update(tasks=1, per_task={"gres/gpu": rnd.choice([1, 1, 2, 4]), "cpu": 4, "mem": 16384})
        elif kind < 0.85:
            job.update(tasks=2, nodes=2, per_task={"gres/gpu": rnd.choice([4, 8]), "cpu": 16, "mem": 65536})
        else:
            job.update(tasks=1, per_task={"cpu": 2, "mem": 4096})
        jobs.append(job)
        jid += 1
    return {"version": 1, "now": NOW, "nodes": nodes, "accounts": accounts, "jobs": jobs}


def median_time(snap_dict: dict, repeat: int) -> tuple[float, float, dict]:
    """Median seconds of decide() alone, and of load_snapshot() (validation) alone."""
    times = []
    loads = []
    dec = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        snap = load_snapshot(snap_dict)
        t1 = time.perf_counter()
        dec = decide(snap)
        times.append(time.perf_counter() - t1)
        loads.append(t1 - t0)
    assert dec is not None
    return statistics.median(times), statistics.median(loads), dec.to_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="10000,100000")
    args = ap.parse_args()
    goals = {10_000: 0.2, 100_000: 2.0}
    hook = decide_mod._priorities
    alone: dict[int, float] = {}
    for n in (int(x) for x in args.sizes.split(",")):
        snap = build(n)
        rep = args.repeat if n <= 20_000 else max(1, args.repeat // 2 + 1)
        for label, fn in (("scheduler only", _no_hook), ("with batchd.priority hook", hook)):
            decide_mod._priorities = fn
            med, load, dec = median_time(snap, rep)
            if fn is _no_hook:
                alone[n] = med
            goal = goals.get(n)
            verdict = "" if goal is None else f" (goal < {goal * 1000:.0f} ms: {'met' if med < goal else 'MISSED'})"
            print(f"decide() [{label}]: {n} pending, 500 running, 4x8 GPUs, 10 accounts: median {med * 1000:.1f} ms "
                  f"over {rep} runs{verdict}; load_snapshot() {load * 1000:.1f} ms; started {len(dec['start'])}, "
                  f"preempted {len(dec['preempt'])}, planned starts {len(dec['planned_start'])}")
        decide_mod._priorities = hook
    sizes = sorted(alone)
    if len(sizes) >= 2:
        a, b = sizes[0], sizes[-1]
        nlogn = (b * math.log(b)) / (a * math.log(a))
        print(f"scaling {a} -> {b} pending (scheduler only): x{alone[b] / alone[a]:.1f} "
              f"(n log n would be x{nlogn:.1f})")


def _no_hook(raw: dict, policy: dict) -> dict:
    return {}


if __name__ == "__main__":
    main()
