"""CPU seconds of one controller cycle with a large throttled job array.

    .venv/bin/python bench/bench_cycle_array.py [--tasks 3000] [--max-running 4] [--repeat 5] [--no-task-ids]

Builds a fresh SQLite store in a temporary directory: one node (64 CPUs) and one job
array of --tasks tasks with `%--max-running` (`array_max_running`), of which
--max-running tasks run and the others are pending, so that every pending task is
checked against the array's running count (reason JobArrayTaskLimit). Runs one warm-up
cycle (it stores the reasons), then prints the median and minimum CPU seconds
(`time.process_time`, this process only: the SQLite store runs in-process) of
`Controller.snapshot` alone and of `Controller.cycle`, over --repeat runs each.
Each task's stored request holds the array's whole `array_task_ids` list, as
`batchd.server.submission` stores it; --no-task-ids leaves the list out, to show what decoding
it (tasks x tasks integers per cycle, in `Store.list_jobs`) costs.
Numbers only: nothing is asserted here (tests/unit/test_cycle_book.py checks that the
work per pending task does not grow with the array).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchd.config import parse_config  # noqa: E402
from batchd.control.controller import Controller  # noqa: E402
from batchd.model import Job, Node  # noqa: E402
from batchd.store import Store  # noqa: E402
from batchd.store.migrate import upgrade  # noqa: E402

NOW = 1_700_000_000.0


def build(tmp: Path, tasks: int, max_running: int, task_ids: bool = True) -> tuple[Controller, Store]:
    """A controller over a fresh store holding the array (ids 1..tasks, array id 1)."""
    cfg = parse_config({"state_dir": str(tmp), "node": [{"name": "n1", "cpus": 64, "memory_mb": 64_000}]})
    store = Store(f"sqlite:///{tmp / 'db.sqlite'}")
    upgrade(store.engine)
    store.ensure_default_account()
    store.upsert_node(Node(name="n1", state="IDLE", cpus=64, memory_mb=64_000, gpus=[], heartbeat=NOW))
    request = {"tasks": 1, "per_task": {"cpu": 1, "mem": 100}, "array_task_ids": list(range(tasks)),
               "array_max_running": max_running}
    if not task_ids:
        del request["array_task_ids"]
    jobs = []
    for i in range(tasks):
        running = i < max_running
        jobs.append(Job(
            id=i + 1, name="arr", user="root", uid=0, gid=0, account="default", partition="batch",
            qos="normal", state="RUNNING" if running else "PENDING", submit_time=NOW - 60,
            spec={"script": "true", "workdir": "/"}, request=request, array_job_id=1, array_task_id=i,
            start_time=NOW - 30 if running else None,
            allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100}} if running else None,
            node_list="n1" if running else "", tres_alloc="cpu=1,mem=100M,node=1" if running else ""))
    store.insert_jobs(jobs)
    return Controller(cfg, store), store


def cpu_seconds(fn, repeat: int) -> list[float]:
    out = []
    for k in range(repeat):
        t0 = time.process_time()
        fn(NOW + 1 + k)
        out.append(time.process_time() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=3000)
    ap.add_argument("--max-running", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-task-ids", action="store_true", help="leave array_task_ids out of the stored requests")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        ctl, store = build(Path(d), args.tasks, args.max_running, not args.no_task_ids)
        try:
            dec = ctl.cycle(NOW)  # warm-up: stores each pending task's reason
            limited = sum(1 for p in dec.get("pending", []) if p.get("reason") == "JobArrayTaskLimit")
            snap = cpu_seconds(ctl.snapshot, args.repeat)
            cyc = cpu_seconds(ctl.cycle, args.repeat)
        finally:
            store.close()
    pending = args.tasks - args.max_running
    print(f"array of {args.tasks} tasks, %{args.max_running}: {pending} pending, "
          f"{limited} reported JobArrayTaskLimit by the scheduler"
          + ("; array_task_ids left out of the requests" if args.no_task_ids else ""))
    print(f"snapshot  CPU s: median {statistics.median(snap):.3f}  min {min(snap):.3f}  (n={args.repeat})")
    print(f"cycle     CPU s: median {statistics.median(cyc):.3f}  min {min(cyc):.3f}  (n={args.repeat})")


if __name__ == "__main__":
    main()
