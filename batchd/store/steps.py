"""SQL for job steps started with `srun` (table `step_tasks`). Each function is one
transaction on a `Store`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, exists, func, select, update

from batchd.store import Store
from batchd.store.tables import JobRow, StepTask

#: the states a task ends in
ENDED = ("COMPLETED", "FAILED", "CANCELLED")


@dataclass
class Task:
    job_id: int
    run: int
    step_id: int
    procid: int
    localid: int
    nodeid: int
    node: str
    ntasks: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    stdout: str
    state: str
    exit_code: int = 0
    exit_signal: int = 0
    start_time: float | None = None
    end_time: float | None = None


def _task(r: StepTask) -> Task:
    return Task(**{k: getattr(r, k) for k in Task.__dataclass_fields__})


def create_step(store: Store, job_id: int, run: int, tasks: list[dict[str, Any]]) -> int:
    """Insert the tasks of a new step of (job_id, run); returns its step id (0, 1, ...)."""
    with store.tx() as s:
        cur = s.scalar(select(func.max(StepTask.step_id)).where(StepTask.job_id == job_id, StepTask.run == run))
        step_id = 0 if cur is None else cur + 1
        for t in tasks:
            s.add(StepTask(job_id=job_id, run=run, step_id=step_id, state="PENDING", **t))
        return step_id


def list_tasks(store: Store, *, job_id: int | None = None, step_id: int | None = None,
               nodes: list[str] | None = None, states: list[str] | None = None) -> list[Task]:
    q = select(StepTask).order_by(StepTask.job_id, StepTask.step_id, StepTask.procid)
    if job_id is not None:
        q = q.where(StepTask.job_id == job_id)
    if step_id is not None:
        q = q.where(StepTask.step_id == step_id)
    if nodes is not None:
        q = q.where(StepTask.node.in_(nodes))
    if states is not None:
        q = q.where(StepTask.state.in_(states))
    with store.read() as s:
        return [_task(r) for r in s.scalars(q)]


def set_task(store: Store, t: Task, expect: tuple[str, ...], **changes: Any) -> bool:
    with store.tx() as s:
        res = s.execute(update(StepTask).where(
            StepTask.job_id == t.job_id, StepTask.run == t.run, StepTask.step_id == t.step_id,
            StepTask.procid == t.procid, StepTask.state.in_(expect)).values(**changes))
        return bool(res.rowcount)  # type: ignore[attr-defined]


def purge_ended(store: Store, nodes: list[str], ended_before: float) -> int:
    """Delete the tasks of `nodes` that ended before `ended_before` (unix seconds) and whose
    job run is over: the table keeps each task's argv and environment, which nothing reads
    once its step is done (srun waits on its own tasks only), so it must not grow with
    every step ever run. A run still going keeps all its tasks: its next step id counts on
    them. Returns how many rows were deleted."""
    run_going = exists().where(and_(JobRow.id == StepTask.job_id, JobRow.state == "RUNNING",
                                    JobRow.restarts == StepTask.run))
    with store.tx() as s:
        res = s.execute(delete(StepTask).where(StepTask.node.in_(nodes), StepTask.state.in_(ENDED),
                                               StepTask.end_time < ended_before, ~run_going))
        return int(res.rowcount or 0)  # type: ignore[attr-defined]
