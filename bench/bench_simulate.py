#!/usr/bin/env python3
"""`batchd simulate` speed and memory (issue 21's goals: the whole Alibaba trace on the
16-GPU example in under 60 s, 100,000 jobs in under 10 minutes, under 1 GB).

    .venv/bin/python bench/bench_simulate.py [--load 1] [--until SECONDS] [--max-duration S]

Replays ../shared/data/traces/alibaba_openb_2023_jobs.csv (its GPU pods that started,
teams by a seeded hash weighted by the example's quotas, serving=6,training=6,notebooks=4)
on examples/cluster-16gpu.toml with examples/accounts-16gpu.toml, in this process.
Prints the jobs, the cycles, the wall time, the time per cycle and the peak RSS.
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
    args = ap.parse_args()
    from batchd.sim import trace as tr
    from batchd.sim.engine import from_files
    from batchd.sim.measures import measure

    t = tr.transform(tr.read_alibaba(args.trace, "hash:serving=6,training=6,notebooks=4",
                                     max_duration_s=args.max_duration), load=args.load)
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
          f"utilisation {m['cluster']['utilisation']}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
