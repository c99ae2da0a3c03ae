#!/usr/bin/env python3
"""`batchd simulate` speed and memory (issue 21's goals: the whole Alibaba trace on the
16-GPU example in under 60 s, 100,000 jobs in under 10 minutes, under 1 GB).

    .venv/bin/python bench/bench_simulate.py [--load 1] [--until SECONDS] [--max-duration S]
    .venv/bin/python bench/bench_simulate.py --jobs 100000 [--busy 0.6]
    .venv/bin/python bench/bench_simulate.py --skip 118 --until 3456000   # one stretch

`--skip DAYS` leaves out the trace's first DAYS days (`batchd simulate --skip`, in days);
with `--until` it times one stretch of the trace. The line ends with a digest of every
job's runs and every preemption: a change meant only to be faster must leave it unchanged.

Replays ../shared/data/traces/alibaba_openb_2023_jobs.csv (its GPU pods that started,
teams by a seeded hash weighted by the example's quotas, serving=6,training=6,notebooks=4)
on examples/cluster-16gpu.toml with examples/accounts-16gpu.toml, in this process.
Prints the jobs, the cycles, the wall time, the time per cycle and the peak RSS.

`--jobs N` replays N jobs drawn (seeded, with replacement) from the trace's pods of day 118
on (their GPUs, durations and teams), arriving as a Poisson process whose offered load is
`--busy` of the 16 cards: the 100,000-job goal.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "data" / "traces" / "alibaba_openb_2023_jobs.csv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--until", type=float, default=None)
    ap.add_argument("--max-duration", type=float, default=None)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--busy", type=float, default=0.6)
    ap.add_argument("--skip", type=float, default=0.0, help="days of the trace to leave out")
    args = ap.parse_args()
    from batchd.sim import trace as tr
    from batchd.sim.engine import from_files
    from batchd.sim.measures import measure

    t = tr.transform(tr.read_alibaba(args.trace, "hash:serving=6,training=6,notebooks=4",
                                     max_duration_s=args.max_duration), load=args.load,
                     skip_s=args.skip * 86400)
    if args.jobs:
        t = synthetic(t, args.jobs, args.busy)
    sim = from_files(str(ROOT / "examples" / "cluster-16gpu.toml"), str(ROOT / "examples" / "accounts-16gpu.toml"),
                     t.jobs)
    t0 = time.perf_counter()
    res = sim.run(t.jobs, until=args.until)
    wall = time.perf_counter() - t0
    m = measure(res)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"batchd simulate: {len(t.jobs)} jobs (load {args.load:g}), {res.cycles} cycles, "
          f"{m['cluster']['span_s'] / 86400:.1f} virtual days in {wall:.1f} s "
          f"({1000 * wall / max(res.cycles, 1):.1f} ms a cycle); peak RSS {rss_mb:.0f} MB; "
          f"utilisation {m['cluster']['utilisation']}; digest {digest(res)}")
    sys.stdout.flush()


def digest(res) -> str:
    """A short hash of every job's runs (start, end, GPU share), final state and preemptions,
    and of every preemption (time, victim, for whom, why): equal digests, equal decisions."""
    import hashlib
    import json

    doc = [[j.t.id, j.runs, j.state, j.preemptions] for j in res.jobs] + [res.preemptions]
    return hashlib.sha1(json.dumps(doc, default=str).encode()).hexdigest()[:12]


def synthetic(t, n: int, busy: float, gpus: float = 16.0, seed: int = 1):
    import random
    from dataclasses import replace

    from batchd.sim import trace as tr

    pool = [j for j in t.jobs if j.submit_s >= 118 * 86400]
    rnd = random.Random(seed)
    picks = [rnd.choice(pool) for _ in range(n)]
    mean_work = sum(j.gpus * j.duration_s for j in picks) / n
    rate = busy * gpus / mean_work  # arrivals a second for that offered load
    now, out = 0.0, []
    for j in picks:
        now += rnd.expovariate(rate)
        out.append(replace(j, submit_s=now))
    return tr.Trace(tr.renumber(out), t.source, t.rule + f"; {n} jobs drawn, offered load {busy:g}")


if __name__ == "__main__":
    main()
