"""The bookkeeping of one controller cycle: what building a snapshot learns about the
stored jobs, which the cycle's apply step then writes back (`CycleBook`), and a pending
job's eligibility (`CycleBook.eligibility`).

A book belongs to the one call that built it (`Controller._build`) and is passed along
explicitly; it is never stored on the controller, so a snapshot built on an API thread
(sprio, sshare, `batchd why`, `plan --dump`) and the controller's own cycle never see or
disturb each other's. Reads only its arguments: no SQL, no clock, no logging.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from batchd.control.jobdeps import dependency_status
from batchd.model import Job

#: The reason of a job held by `scontrol requeuehold`, as Slurm words it.
REQUEUE_HELD = "job requeued in held state"
HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", REQUEUE_HELD)


@dataclass
class CycleBook:
    """One snapshot's bookkeeping, keyed by job id. Built by `read` from the jobs a
    snapshot loaded; filled while the snapshot's entries are built (`eligibility`,
    `refuse`, `leave_out`) and, in a cycle, by `Controller._decide` (`refuse`)."""

    jobs: list[Job]  # every job the snapshot read, in the store's order (by id)
    by_id: dict[int, Job]
    stored_reason: dict[int, str]  # pending job -> its reason as stored
    stored_priority: dict[int, int]  # pending or running job -> its priority as stored
    stored_estimate: dict[int, float | None]  # pending job -> its start estimate as stored
    running_by_array: dict[int, int]  # array job id -> its tasks in state RUNNING
    dep_text: dict[int, str | None] = field(default_factory=dict)  # new `Dependency=` text
    eligible: dict[int, float] = field(default_factory=dict)  # new EligibleTime, unix seconds
    left_out: dict[int, str] = field(default_factory=dict)  # pending jobs out of this cycle -> why
    # refused pending jobs -> signature of the request refused: the controller's memory
    # of refused jobs once a cycle on this book is over (those still refused, and new ones)
    refused: dict[int, str] = field(default_factory=dict)
    new_refusals: list[tuple[Job, BaseException]] = field(default_factory=list)  # not yet logged
    # pending array tasks left out of a cycle as alike to others (batchd.control.arrayfold) ->
    # the task of their group the cycle decides for
    folded: dict[int, int] = field(default_factory=dict)
    _dep_index: tuple[set[int], dict[tuple[str, str], list[Job]]] | None = None

    @classmethod
    def read(cls, jobs: list[Job]) -> CycleBook:
        """A book over `jobs` (every state, as the snapshot loaded them); O(len(jobs))."""
        return cls(
            jobs=jobs, by_id={j.id: j for j in jobs},
            stored_reason={j.id: j.reason for j in jobs if j.state == "PENDING"},
            stored_priority={j.id: j.priority for j in jobs if j.state in ("PENDING", "RUNNING")},
            stored_estimate={j.id: j.start_estimate for j in jobs if j.state == "PENDING"},
            # once per snapshot: each pending task of a throttled array looks its count up
            running_by_array=dict(Counter(j.array_job_id for j in jobs
                                          if j.array_job_id is not None and j.state == "RUNNING")))

    def leave_out(self, j: Job, refused: dict[int, str]) -> bool:
        """Whether pending job `j` stays out as refused before: `refused` (a job id ->
        signature map the caller does not change while this runs) holds its current
        request's signature. Such a job is noted in `left_out` and kept in `refused`."""
        sig = refused.get(j.id)
        if sig is None or sig != signature(j):
            return False
        self.left_out[j.id] = "known"
        self.refused[j.id] = sig
        return True

    def refuse(self, j: Job, e: BaseException) -> None:
        """Note pending job `j` as refused for `e`: out of this cycle and, once the cycle
        is over, of the next ones until its request changes; to be logged by the cycle."""
        self.refused[j.id] = signature(j)
        self.left_out[j.id] = str(e)
        self.new_refusals.append((j, e))

    def eligibility(self, j: Job, now: float) -> str | None:
        """The reason pending job `j` may not be considered at all, or None. Notes, as a
        side effect on this book, the job's new `Dependency=` text (`dep_text`) when it
        changed and, when the job is eligible, its EligibleTime (`eligible`). Constant work
        per job beside its dependency's: the array's running count is looked up."""
        dep = j.request.get("dependency")
        verdict = "satisfied"
        if dep:
            arrays, names = self._dependency_index()
            verdict, text = dependency_status(dep, j, self.jobs, self.by_id, now, arrays,
                                              names.get((j.name, j.user), []))
            shown = None if verdict == "satisfied" else text
            if shown != j.dependency:
                self.dep_text[j.id] = shown
        if j.hold:
            if j.reason in HELD_REASONS:
                return j.reason
            return REQUEUE_HELD if j.request.get("requeue_hold") else "JobHeldUser"
        if j.begin_time and j.begin_time > now:
            return "BeginTime"
        if verdict == "never":
            return "DependencyNeverSatisfied"
        if verdict != "satisfied":
            return "Dependency"
        limit = j.request.get("array_max_running")
        if j.array_job_id is not None and limit:
            if self.running_by_array.get(j.array_job_id, 0) >= int(limit):
                return "JobArrayTaskLimit"
        # eligible from now on (or from its begin time): Slurm's EligibleTime
        target = now if j.eligible_time is None else j.eligible_time
        if j.begin_time and target < j.begin_time:
            target = j.begin_time
        if target != j.eligible_time:
            self.eligible[j.id] = target
        return None

    def _dependency_index(self) -> tuple[set[int], dict[tuple[str, str], list[Job]]]:
        """(the array job ids, the jobs by (name, user)), built on first use."""
        if self._dep_index is None:
            names: dict[tuple[str, str], list[Job]] = {}
            for o in self.jobs:
                names.setdefault((o.name, o.user), []).append(o)
            self._dep_index = ({o.array_job_id for o in self.jobs if o.array_job_id is not None}, names)
        return self._dep_index


def signature(j: Job) -> str:
    """What a refused job's verdict depends on: a change (scontrol update) re-evaluates it."""
    try:
        return json.dumps([j.request, j.spec.get("nodelist"), j.spec.get("exclude"), j.partition, j.qos,
                           j.account, j.time_limit_s, j.hold], sort_keys=True, default=str)
    except Exception:
        return repr((j.request, j.partition, j.qos, j.account, j.time_limit_s, j.hold))
