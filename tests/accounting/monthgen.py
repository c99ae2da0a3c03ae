"""A generated month of usage records for tests and bench/bench_report.py, shaped by a
real GPU-cluster trace (Alibaba `openb` 2023; every 20th pod of it is kept in tests/data/traces/,
see tests/data/README.md; `$BATCHD_TRACE` names another file of the same columns, such as the
whole trace for a benchmark): each record takes the duration, GPU count, GPU share, CPUs and
memory of a trace pod, cycling through the pods that started. The trace has no teams: accounts
and users are assigned by a documented rule (CRC32 of the pod name modulo 10 / 40), not real
ones. Start times are spread uniformly over the month with a seeded generator; durations are
capped at 3 days; some runs cross the month's end. A pod asking for part of one GPU
becomes a MIG slice `1g.24gb` (a quarter of a card); the rest use whole cards of type
`rtxpro6000` (even accounts) or `h200` (odd accounts)."""

from __future__ import annotations

import csv
import math
import os
import random
import zlib
from typing import Any

TRACE = os.environ.get("BATCHD_TRACE") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "data", "traces", "alibaba_openb_2023_jobs_every20th.csv")


def _pods() -> list[dict[str, Any]]:
    with open(TRACE, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["duration_s"]]
    return [{"name": r["job_id"], "dur": int(float(r["duration_s"])), "gpus": int(r["gpus"] or 0),
             "milli": int(r["gpu_milli"] or 0), "cpu": max(1, math.ceil(int(r["cpu_milli"] or 0) / 1000)),
             "mem": int(r["memory_mib"] or 0)} for r in rows]


def month_records(n: int, month_start: float, month_s: int, seed: int = 6,
                  gpu_types: tuple[str, str] = ("rtxpro6000", "h200"), accounts: int = 10) -> list[dict[str, Any]]:
    """`n` usage-record rows (dicts for a bulk insert into usage_records); whole GPUs are
    of `gpu_types[0]` for even accounts and `gpu_types[1]` for odd ones."""
    pods = _pods()
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = pods[i % len(pods)]
        acct_no = zlib.crc32(p["name"].encode()) % accounts
        dur = max(60, min(p["dur"], 3 * 86400))
        start = month_start + rng.randrange(0, month_s) + rng.random()
        end = start + dur
        tres: dict[str, float] = {"cpu": p["cpu"], "mem": p["mem"], "node": 1}
        if p["gpus"] == 1 and 0 < p["milli"] < 1000:
            tres.update({"gres/gpu": 0.25, "gres/gpu:1g.24gb": 1})
        elif p["gpus"]:
            gtype = gpu_types[acct_no % 2]
            tres.update({"gres/gpu": p["gpus"], f"gres/gpu:{gtype}": p["gpus"]})
        out.append(dict(job_id=1_000_000 + i, run=0, name=p["name"], account=f"team{acct_no}",
                        user=f"user{zlib.crc32(p['name'].encode()) % 40}", uid=2000, gid=2000,
                        partition="gpu", qos="normal", node_list=f"gpu{1 + i % 4:02d}", tres_alloc="", tres=tres,
                        billing=p["cpu"] * 0.1 + tres.get("gres/gpu", 0) * 2, submit_time=start,
                        start_time=start, end_time=end, elapsed_s=int(dur), state="COMPLETED",
                        exit_code=0, exit_signal=0, gpu_util_pct=float(i % 101) if tres.get("gres/gpu") else None))
    return out
