"""Fair-share over a simulated week on the 16-GPU example, and what it costs.

    .venv/bin/python bench/bench_fairshare.py [--days 7] [--pending 1000] [--seed 1]

Builds the snapshot of examples/cluster-16gpu.toml + examples/accounts-16gpu.toml
(4 nodes x 4 RTX PRO 6000; serving 6, training 6, notebooks 4 guaranteed GPUs), runs a
synthetic workload through 5-minute usage cycles (``advance_snapshot_usage``), then
prints ``sshare -a -l`` of the result, the priorities of a few pending jobs, and
timings: one usage cycle, ``job_priorities`` over N pending jobs, and sshare's rows.
Numbers only: nothing is asserted here.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tomllib
from pathlib import Path

from batchd.cli.sshare_table import default_fields, render, resolve_fields, tres_run_mins
from batchd.priority import job_priorities, merge_policy, share_rows
from batchd.priority.accrual import advance_snapshot_usage

ROOT = Path(__file__).resolve().parent.parent
CYCLE_S = 300


def build_snapshot() -> dict:
    cluster = tomllib.loads((ROOT / "examples/cluster-16gpu.toml").read_text())
    accts = tomllib.loads((ROOT / "examples/accounts-16gpu.toml").read_text())
    policy = dict(cluster.get("priority", {}))
    policy["tres_billing_weights"] = cluster["accounting"]["tres_billing_weights"]
    policy["weight_tres"] = "GRES/gpu=1000"
    accounts, users = [], []
    for a in accts["account"]:
        quota = a.get("resources", {}).get("gres/gpu", {}).get("quota", 1)
        accounts.append({"name": a["name"], "parent": None, "shares": quota, "resources": a.get("resources", {})})
        users += [{"name": u, "account": a["name"], "shares": 1} for u in a.get("users", [])]
    return {"version": 1, "now": 0.0, "cluster": cluster.get("cluster_name", "dev16"), "policy": policy,
            "nodes": [{"name": n["name"], "cpus": n["cpus"], "memory_mb": n["memory_mb"], "gpus": n["gpus"],
                       "state": "IDLE"} for n in cluster["node"]],
            "partitions": [{"name": p["name"], "default": p.get("default", False), "priority_job_factor": 1}
                           for p in cluster["partition"]],
            "qos": [{"name": q["name"], "priority": q.get("priority", 0), "usage_factor": q.get("usage_factor", 1.0)}
                    for q in cluster["qos"]],
            "accounts": accounts, "users": users, "jobs": [], "usage": {"users": {}}}


# (account, user, typical GPUs, typical hours, share of submissions)
WORKLOAD = [("training", "bob", 4, 12.0, 0.35), ("training", "root", 2, 3.0, 0.10),
            ("serving", "alice", 1, 24.0, 0.15), ("notebooks", "carol", 1, 2.0, 0.30),
            ("notebooks", "root", 2, 1.0, 0.10)]


def simulate(snap: dict, days: float, rng: random.Random) -> None:
    """Greedy FIFO fill of 16 GPUs with the synthetic workload, cycle by cycle."""
    free = {n["name"]: list(range(4)) for n in snap["nodes"]}
    running: list[dict] = []
    jid = 0
    t = 0.0
    end = days * 86400
    while t < end:
        now = t + CYCLE_S
        for j in list(running):
            if j["_end"] <= now:
                j["state"], j["end_time"] = "COMPLETED", j["_end"]
        for _ in range(4):  # a few submissions per cycle, started if they fit on one node
            acct, user, gpus, hours, _w = rng.choices(WORKLOAD, weights=[w[4] for w in WORKLOAD])[0]
            node = next((n for n, g in free.items() if len(g) >= gpus), None)
            if node is None:
                continue
            jid += 1
            devs = [free[node].pop(0) for _ in range(gpus)]
            start = t + rng.uniform(0, CYCLE_S)
            running.append({"id": jid, "account": acct, "user": user, "state": "RUNNING", "start_time": start,
                             "time_limit_s": int(min(3 * hours * 3600, 7 * 86400)), "tasks": 1, "per_task": {"cpu": 8 * gpus, "mem": 65536 * gpus, "gres/gpu": gpus},
                             "allocation": {node: {"tasks": 1, "gpus": devs, "cpus": 8 * gpus,
                                                   "memory_mb": 65536 * gpus}},
                             "_node": node, "_end": start + rng.expovariate(1 / (hours * 3600))})
        snap["now"], snap["jobs"] = now, running
        snap["usage"]["users"] = advance_snapshot_usage(snap, t)
        for j in [j for j in running if j["state"] != "RUNNING"]:
            free[j["_node"]].extend(j["allocation"][j["_node"]]["gpus"])
            running.remove(j)
        t = now
    snap["jobs"] = [{k: v for k, v in j.items() if not k.startswith("_")} for j in running]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    snap = build_snapshot()
    t0 = time.perf_counter()
    simulate(snap, args.days, rng)
    cycles = int(args.days * 86400 / CYCLE_S)
    sim_s = time.perf_counter() - t0
    policy = merge_policy(None, snap)
    rows = share_rows(snap)
    run_mins, order = tres_run_mins(snap, policy)
    print(f"$ sshare -a -l   (after {args.days:g} simulated days, {cycles} cycles of {CYCLE_S} s)")
    sys.stdout.write(render(rows, resolve_fields(default_fields("fair_tree", True)), run_mins=run_mins,
                            tres_order=order))
    users = [(a, u) for a, u, *_ in WORKLOAD]
    pend = [{"id": 100000 + i, "account": a, "user": u, "state": "PENDING", "submit_time": snap["now"] - 600 * i,
             "tasks": 1, "per_task": {"cpu": 8, "mem": 65536, "gres/gpu": 1 + i % 4}, "qos": "normal"}
            for i, (a, u) in enumerate(rng.choices(users, k=args.pending))]
    snap["jobs"] = snap["jobs"] + pend
    t0 = time.perf_counter()
    prio = job_priorities(snap)
    prio_s = time.perf_counter() - t0
    print("\nfirst pending jobs: " + ", ".join(f"{j['id']} {j['account']}/{j['user']}={prio[str(j['id'])]}"
                                               for j in pend[:5]))
    t0 = time.perf_counter()
    for _ in range(20):
        share_rows(snap)
    rows_ms = (time.perf_counter() - t0) / 20 * 1000
    print(f"\nusage cycles: {cycles} in {sim_s:.2f} s ({sim_s / cycles * 1000:.2f} ms per cycle incl. simulation)")
    print(f"job_priorities: {len(snap['jobs'])} jobs in {prio_s * 1000:.1f} ms")
    print(f"share_rows: {rows_ms:.2f} ms per call ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
