"""The job filters of squeue, sacct and scancel: comma-separated lists in a query.

`filter_jobs(jobs, q)` keeps the jobs that match every list given in `q` (`users` (name
or uid), `accounts`, `partitions`, `states`, `names`, `qos`); a missing or empty list
matches every job. The order of `jobs` is kept.
"""

from __future__ import annotations

from typing import Any

from batchd.model import Job


def split_csv(v: str | None) -> list[str] | None:
    if not v:
        return None
    return [x for x in v.split(",") if x]


def filter_jobs(jobs: list[Job], q: dict[str, Any]) -> list[Job]:
    def want(key: str) -> set[str] | None:
        v = q.get(key)
        return set(split_csv(v) or []) or None

    users, accounts, parts = want("users"), want("accounts"), want("partitions")
    states, names, qos = want("states"), want("names"), want("qos")
    out = []
    for j in jobs:
        if users and j.user not in users and str(j.uid) not in users:
            continue
        if accounts and j.account not in accounts:
            continue
        if parts and j.partition not in parts:
            continue
        if states and j.state not in states:
            continue
        if names and j.name not in names:
            continue
        if qos and j.qos not in qos:
            continue
        out.append(j)
    return out
