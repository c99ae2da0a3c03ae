"""Folding a large pending job array for the controller's cycle.

A pending array of 10,000 tasks is 10,000 job rows, but its tasks are alike: same request,
account, QOS, partition, limits and submit time, so the scheduler would order them by job
id and try each the same way. A cycle therefore takes only the first tasks of each group of
alike pending tasks (`cap`); the rest (the *folded* tasks) wait outside it and get, when the
cycle is applied, what their group's last task in the cycle got (its pending reason and
priority; no planned start). This is exact for starts: alike tasks cannot start out of id
order (a task that does not fit means its alike successors do not either), and every task
needs at least one CPU, so no cycle can start more tasks than the cluster has CPUs, which
`cap` never goes below. It is Slurm's `bf_max_job_array_resv` for planned starts: only the
tasks in the cycle (at least `MIN_TASKS`) hold a backfill reservation, so smaller jobs may
backfill beside a long array instead of waiting behind ten thousand reservations.

Only the controller's own cycle folds: snapshots built for sprio, `batchd why` and
`plan --dump` keep every task.
"""

from __future__ import annotations

from typing import Any

from batchd.model import Job

#: The fewest alike tasks of an array a cycle takes (Slurm's bf_max_job_array_resv default).
MIN_TASKS = 20


def cap(nodes: list[Any]) -> int:
    """How many alike pending tasks of one array a cycle takes on a cluster of `nodes`:
    never fewer than the tasks that could run at once (one CPU each)."""
    return max(MIN_TASKS, sum(int(getattr(n, "cpus", 0) or 0) for n in nodes) + 1)


def key(j: Job) -> tuple[Any, ...] | None:
    """What makes pending array tasks alike for the scheduler, or None for a job that is
    not an array task. Tasks of one submission share their decoded request object
    (`Store.snapshot_jobs`), so one changed by `scontrol update` has another request and
    falls into a group of its own."""
    if j.array_job_id is None:
        return None
    return (j.array_job_id, id(j.request), j.account, j.user, j.partition, j.qos, j.nice, j.hold,
            j.reason if j.hold else None, j.begin_time, j.eligible_time, j.submit_time, j.time_limit_s,
            j.action, j.dependency, j.spec.get("nodelist"), j.spec.get("exclude"))


class Folder:
    """Counts alike pending tasks as a snapshot is built (in job id order) and remembers,
    for each folded task, the task of its group the cycle decides for."""

    def __init__(self, limit: int):
        self.limit = limit
        self._seen: dict[tuple[Any, ...], int] = {}
        self._last: dict[tuple[Any, ...], int] = {}
        self.folded: dict[int, int] = {}  # folded task id -> its group's last task in the cycle

    def fold(self, j: Job) -> bool:
        """Whether pending job `j` stays out of the cycle (its group has `limit` in it)."""
        k = key(j)
        if k is None:
            return False
        n = self._seen.get(k, 0)
        if n < self.limit:
            self._seen[k] = n + 1
            self._last[k] = j.id
            return False
        self.folded[j.id] = self._last[k]
        return True
