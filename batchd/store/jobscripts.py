"""A job's spec as two parts: the light one in the jobs row, the heavy one (script,
environment, argv) in `job_scripts`, one row per job or per job array.

A submission's environment is kilobytes; in the jobs row it made every row about a page,
so every listing and every scheduling cycle, which read all active rows, read kilobytes
per job (PostgreSQL also parsed each spec to drop those keys). The store splits a spec
when it writes a job and joins the parts when it returns a whole `Job` (`get_job`,
`list_jobs`, ...); the views and the cycle read the light part only. The heavy keys never
change after the submission: a spec written by an update keeps only its light keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Table, select

from batchd.model import Job
from batchd.store.batches import batches
from batchd.store.tables import JobScript

#: the spec keys kept in `job_scripts`
HEAVY_KEYS = ("script", "environment", "argv")

TABLE: Table = JobScript.__table__  # type: ignore[assignment]


def key_of(job: Job) -> int:
    """The `job_scripts` row of `job`: its array's (the tasks share one), else its own."""
    return job.array_job_id if job.array_job_id is not None else job.id


def light(spec: Any) -> Any:
    """`spec` without the heavy keys (a spec that is not an object as it is)."""
    if not isinstance(spec, dict) or not any(k in spec for k in HEAVY_KEYS):
        return spec
    return {k: v for k, v in spec.items() if k not in HEAVY_KEYS}


def heavy(spec: Any) -> dict[str, Any]:
    return {k: spec[k] for k in HEAVY_KEYS if k in spec} if isinstance(spec, dict) else {}


def split(jobs: list[Job], fields: Iterable[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The jobs as `fields` parameter sets for the jobs table, their specs light (an
    array's tasks, which share one spec object, share one light spec: encoded once by
    `batchd.store.submitpath.shared_json`), and the `job_scripts` rows to insert with
    them, one per key."""
    names = tuple(fields)
    lights: dict[int, Any] = {}
    scripts: dict[int, dict[str, Any]] = {}
    rows = []
    for j in jobs:
        spec = j.spec
        lit = lights.get(id(spec))
        if lit is None:
            lit = lights[id(spec)] = light(spec)
        key = key_of(j)
        if key not in scripts:
            h = heavy(spec)
            if h:
                scripts[key] = {"job_id": key, "payload": h}
        row = {k: getattr(j, k) for k in names}
        row["spec"] = lit
        rows.append(row)
    return rows, list(scripts.values())


def payloads(conn: Connection, keys: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The heavy parts stored for `keys`, by key (`batches` of them a query)."""
    order = sorted(set(keys))
    out: dict[int, dict[str, Any]] = {}
    for part in batches(order):
        out.update(conn.execute(select(TABLE.c.job_id, TABLE.c.payload).where(TABLE.c.job_id.in_(part))).all())
    return out


def join(conn: Connection, jobs: list[Job]) -> list[Job]:
    """`jobs` (as the jobs table holds them) with their whole specs, in place."""
    if not jobs:
        return jobs
    found = payloads(conn, {key_of(j) for j in jobs})
    for j in jobs:
        p = found.get(key_of(j))
        if p and isinstance(j.spec, dict):
            j.spec = {**j.spec, **p}
    return jobs
