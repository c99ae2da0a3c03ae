"""Finished-job history for bench/side_by_side.py: N jobs that ended over the past year,
inserted in bulk into a (stopped) daemon's database.

How, and why it is honest:
1. a live dev daemon runs four real jobs to the end (`--wrap true` plain, with
   `--gres=gpu:1`, with `--gres=gpu:4`, and `--wrap false`, which FAILS): their rows and usage
   records, written by the daemon itself, are the templates (the spec carries this process's
   whole environment, as every sbatch does);
2. with the daemon stopped, job ids are reserved through the store (`Store.next_job_ids`) and
   the clones are inserted with one multi-row INSERT per table per batch of 5,000, the jobs
   through the store's own insert (`submitpath.insert_jobs`: the spec's script and
   environment in job_scripts), the usage records on `UsageRecord`, one transaction per batch:
   the same columns the daemon writes, only the ids, the account, and the times changed
   (end uniformly over the past 365 days, run 1 min to 6 h, 0 to 10 min pending);
3. the usage records are rolled up by the daemon's own `run_rollup`, as a daemon running for a
   year would have done, so the next daemon starts with no backlog; PostgreSQL then analyzes
   the database, as its autovacuum would have long before.
Not modelled: the finished runs' spool directories (one per run, never purged on main).
"""

from __future__ import annotations

import random
import subprocess
import time
from typing import Any

from sbs_daemon import BIN, Daemon

TEMPLATES = (["--wrap", "true"], ["--gres=gpu:1", "--wrap", "true"], ["--gres=gpu:4", "--wrap", "true"],
             ["--wrap", "false"])
MIX = (0, 0, 0, 0, 1, 1, 1, 2, 2, 3)      # template per job id mod 10
ACCOUNTS = ("training", "training", "serving", "notebooks")
BATCH = 5000
YEAR_S = 365 * 86400


def run_templates(daemon: Daemon, name: str) -> list[int]:
    """Submit the template jobs to the running daemon and wait until each has ended."""
    ids = []
    for args in TEMPLATES:
        out = subprocess.run([str(BIN / "sbatch"), "--parsable", "-J", name, *args], env=daemon.env,
                             cwd=daemon.dir, capture_output=True, text=True, check=True).stdout
        ids.append(int(out.strip()))
    deadline = time.time() + 120
    while daemon.backend.count_jobs(daemon.db_url, f"name = '{name}' AND end_time IS NOT NULL") < len(ids):
        if time.time() > deadline:
            raise SystemExit("the history template jobs did not finish in 120 s")
        time.sleep(0.2)
    time.sleep(1.0)  # their usage records are written with the final state; let the agent settle
    return ids


def load(db_url: str, template_ids: list[int], n: int, seed: int = 17) -> float:
    """Insert `n` finished jobs (with a usage record each) cloned from `template_ids`, then
    roll the usage up; returns the seconds it took. The daemon must be stopped."""
    from sqlalchemy import insert

    from batchd.accounting.rollup import run_rollup
    from batchd.model import Job
    from batchd.store import Store, submitpath
    from batchd.store.tables import JobRow, UsageRecord

    t0 = time.perf_counter()
    store = Store(db_url)
    try:
        jobs = [store.get_job(i) for i in template_ids]
        usages = [store.list_usage(job_ids=[i]) for i in template_ids]
        if any(j is None for j in jobs) or not all(usages):
            raise SystemExit(f"history templates incomplete: jobs {template_ids}")
        job_cols = [c.key for c in JobRow.__table__.columns]
        use_cols = [c.key for c in UsageRecord.__table__.columns if c.key != "id"]
        tjobs = [{k: getattr(j, k) for k in job_cols if hasattr(j, k)} for j in jobs]
        tuses = [{k: getattr(u[0], k) for k in use_cols if hasattr(u[0], k)} for u in usages]
        first = store.next_job_ids(n)
        rng = random.Random(seed)
        now = time.time()
        for lo in range(0, n, BATCH):
            jrows: list[dict[str, Any]] = []
            urows: list[dict[str, Any]] = []
            for k in range(lo, min(n, lo + BATCH)):
                job_id = first + k
                t = MIX[k % len(MIX)]
                end = now - 600 - rng.random() * YEAR_S
                start = end - rng.uniform(60, 6 * 3600)
                submit = start - rng.uniform(0, 600)
                acct = ACCOUNTS[k % len(ACCOUNTS)]
                j = dict(tjobs[t], id=job_id, name="hist", account=acct, submit_time=submit, eligible_time=submit,
                         start_time=start, end_time=end, submit_token=None)
                u = dict(tuses[t], job_id=job_id, name="hist", account=acct, submit_time=submit,
                         start_time=start, end_time=end, elapsed_s=int(end - start))
                jrows.append(j)
                urows.append(u)
            with store.core_tx() as conn:
                # the store's own job insert: the spec's script and environment go to
                # job_scripts, one row per job, as a submission writes them
                submitpath.insert_jobs(conn, [Job(**j) for j in jrows])
                conn.execute(insert(UsageRecord), urows)
        run_rollup(store)
        if store.engine.dialect.name == "postgresql":
            # a year-old database has statistics (autovacuum analyzes a table once a tenth of
            # it changed, within a minute); this one was filled seconds ago and is copied at
            # once, and without them the planner takes 100,000 rows for a few thousand
            # (sacct's usage query: 4 ms analyzed, 230 ms not)
            with store.engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE")
                conn.commit()
    finally:
        store.close()
    return time.perf_counter() - t0
