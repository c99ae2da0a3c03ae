"""`Dependency=` verdicts and text of stored jobs: `batchd.slurm.dependency.status` (pure,
on callbacks) applied to a list of `Job` records, as the controller's cycle (eligibility)
and the submit service (a new job's dependency, `scontrol show job`) need them.

Reads only its arguments; a job missing from the list counts as purged (satisfied,
as in Slurm).
"""

from __future__ import annotations

from typing import Any

from batchd.model import Job
from batchd.slurm import dependency as deps


def dependency_status(dep: dict[str, Any], j: Job, jobs: list[Job], by_id: dict[int, Job] | None = None,
                      now: float | None = None, arrays: set[int] | None = None,
                      namesakes: list[Job] | None = None) -> tuple[str, str]:
    """(verdict, `Dependency=` text) of job `j`'s parsed dependency `dep` against `jobs`
    (the jobs it may name, plus the others of its name and user for `singleton`), as
    `batchd.slurm.dependency.status` computes them; a job missing from `jobs` counts as purged.
    `by_id`, `arrays` (the array job ids among `jobs`) and `namesakes` (the jobs of `j`'s
    name and user) may be given precomputed; they are derived from `jobs` otherwise."""
    index = by_id if by_id is not None else {o.id: o for o in jobs}

    def lookup_state(job_id: int, task_id: int | None) -> Any:
        return lookup_job(index, jobs, job_id, task_id, "state")

    def lookup_start(job_id: int, task_id: int | None) -> Any:
        return lookup_job(index, jobs, job_id, task_id, "start_time")

    if namesakes is None:
        namesakes = [o for o in jobs if o.name == j.name and o.user == j.user]
    same = [(o.id, o.state) for o in namesakes if o.id != j.id]
    verdict, _text = deps.status(dep, lookup_state, job_id=j.id, task_id=j.array_task_id, singleton_jobs=same,
                                 lookup_start=lookup_start, now=now)
    if verdict == "satisfied":
        return verdict, "(null)"
    results = deps.item_results(dep, lookup_state, job_id=j.id, task_id=j.array_task_id, singleton_jobs=same,
                                lookup_start=lookup_start, now=now)
    if arrays is None:
        arrays = {o.array_job_id for o in jobs if o.array_job_id is not None}
    parts = [_dependency_item(it, it["job_id"] in arrays) + ("(failed)" if r == "never" else "(unfulfilled)")
             for it, r in zip(dep["items"], results, strict=True) if r != "satisfied"]
    return verdict, ("?" if dep["op"] == "or" else ",").join(parts)


def _dependency_item(it: dict[str, Any], names_array: bool) -> str:
    """One `--dependency` item as slurmctld writes it: `afterok:63`, `afterany:7_3`,
    `after:12+5`, `singleton`, and `afterok:24_*` for a whole job array (an item that
    names an array's job id without a task)."""
    if it["type"] == "singleton":
        return "singleton"
    ref = str(it["job_id"])
    if it["task_id"] is not None:
        ref += f"_{it['task_id']}"
    elif names_array:
        ref += "_*"
    if it["delay_s"]:
        ref += f"+{it['delay_s'] // 60}"
    return f"{it['type']}:{ref}"


def lookup_job(by_id: dict[int, Job], jobs: list[Job], job_id: int, task_id: int | None, attr: str) -> Any:
    """A job's state (or start time) for dependency checks; for an array master without
    a task id, the list over all its tasks; None when the job is unknown."""
    if task_id is not None:
        for o in jobs:
            if o.array_job_id == job_id and o.array_task_id == task_id:
                return getattr(o, attr)
        return None
    tasks = [getattr(o, attr) for o in jobs if o.array_job_id == job_id]
    if tasks:
        return tasks if attr == "state" else max((t for t in tasks if t), default=None)
    j = by_id.get(job_id)
    return None if j is None else getattr(j, attr)
