"""Job steps, the request half: `srun` inside a job starts tasks on the job's nodes through
their agents, so that torchrun/MPI-style launches work across a multi-node allocation.

This side checks and records a step (its tasks, one per node slot), answers its status and
cancels it; the agents' side (`batchd.node.steprunner.StepRunner`) launches the tasks.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from batchd.errors import Conflict, InvalidRequest, NotFound
from batchd.server import messages as m
from batchd.server.caller import Caller
from batchd.slurm.hostlist import compress
from batchd.store import Store
from batchd.store import steps as step_store

if TYPE_CHECKING:
    from batchd.server.service import Service

log = logging.getLogger(__name__)

FINAL = ("COMPLETED", "FAILED", "CANCELLED")
#: At most this many tasks in one step, whatever the allocation (each is a supervisor).
MAX_STEP_TASKS = 4096


def create(service: Service, caller: Caller, body: m.StepRequest) -> m.StepReply:
    """srun inside a job: a step of `body["argv"]` on the job's nodes (only its owner or an
    administrator); the tasks are launched by the agents of those nodes."""
    store: Store = service.store
    try:
        job_id = int(body["job_id"])
        argv = [str(a) for a in body["argv"]]
    except (KeyError, TypeError, ValueError):
        raise InvalidRequest("a step needs job_id and argv") from None
    if not argv:
        raise InvalidRequest("no command to run")
    job = store.get_job(job_id)
    if job is None:
        raise NotFound(f"Invalid job id specified: {job_id}")
    service.require_owner(caller, job)
    if job.state != "RUNNING" or not job.allocation:
        raise Conflict(f"Job {job_id} is not running")
    nodes = list(job.allocation)
    try:
        want_nodes = int(body.get("nodes") or len(nodes))
        ntasks_req = int(body.get("ntasks") or 0)
    except (TypeError, ValueError):
        raise InvalidRequest("ntasks and nodes must be whole numbers") from None
    if want_nodes < 1 or ntasks_req < 0:
        raise InvalidRequest("ntasks and nodes must be positive")
    if want_nodes > len(nodes):
        raise InvalidRequest(f"Requested node configuration is not available (the job has {len(nodes)} nodes)")
    if ntasks_req and not body.get("nodes"):
        # srun: "can't run N processes on M nodes, setting nnodes to N"
        want_nodes = min(want_nodes, ntasks_req)
    nodes = nodes[:want_nodes]
    per_node = [int(job.allocation[n].get("tasks") or 1) for n in nodes]
    ntasks = ntasks_req or sum(per_node)
    if ntasks < len(nodes):
        raise InvalidRequest(f"Invalid number of tasks: {ntasks} tasks on {len(nodes)} nodes")
    # one CPU per task (no --overcommit), as slurmctld counts a step against the job's
    # allocation; Slurm 22.05 refuses a step over it with exactly this line
    cpus = [job.allocation[n].get("cpus") for n in nodes]
    allocated = sum(int(c) for c in cpus) if all(cpus) else MAX_STEP_TASKS  # old records lack cpus
    if ntasks > min(allocated, MAX_STEP_TASKS):
        raise InvalidRequest(f"Unable to create step for job {job_id}: More processors requested than permitted")
    # block distribution, as srun's default: fill node 0's share, then node 1's, ...
    base, extra = divmod(ntasks, len(nodes))
    counts = [base + (1 if i < extra else 0) for i in range(len(nodes))]
    cwd = str(body.get("cwd") or job.spec.get("workdir") or "/")
    env = {str(k): str(v) for k, v in (body.get("env") or {}).items()}
    tasks: list[dict[str, Any]] = []
    procid = 0
    for nodeid, (node, count) in enumerate(zip(nodes, counts, strict=True)):
        for localid in range(count):
            tasks.append({"procid": procid, "localid": localid, "nodeid": nodeid, "node": node, "ntasks": ntasks,
                          "argv": argv, "env": env, "cwd": cwd, "stdout": ""})
            procid += 1
    step_id = step_store.create_step(store, job_id, job.restarts, tasks)
    log.info("step created job_id=%s step=%s tasks=%d nodes=%s", job_id, step_id, ntasks, ",".join(nodes))
    service.wake()
    return {"job_id": job_id, "step_id": step_id, "tasks": [{"procid": t["procid"], "node": t["node"]}
                                                             for t in tasks]}


def status(service: Service, query: m.Query) -> m.StepTasksReply | m.ActiveStepsReply:
    """One step's tasks (`job_id` and `step_id`), or without them every step that is
    still pending or running (squeue -s): {"steps": [{job_id, step_id, name, node_list,
    start_time, ntasks, state}]}."""
    if "job_id" not in query:
        return {"steps": active_steps(service.store)}
    tasks = step_store.list_tasks(service.store, job_id=int(query["job_id"]), step_id=int(query["step_id"]))
    return {"tasks": [{"procid": t.procid, "node": t.node, "state": t.state, "exit_code": t.exit_code,
                       "exit_signal": t.exit_signal} for t in tasks]}


def active_steps(store: Store) -> list[m.ActiveStep]:
    """The srun steps with a task still pending or running, one entry per step."""
    by_step: dict[tuple[int, int], list[step_store.Task]] = {}
    for t in step_store.list_tasks(store, states=["PENDING", "RUNNING", "CANCELLING"]):
        by_step.setdefault((t.job_id, t.step_id), []).append(t)
    out: list[m.ActiveStep] = []
    for (job_id, step_id), tasks in sorted(by_step.items()):
        starts = [t.start_time for t in tasks if t.start_time]
        out.append({"job_id": job_id, "step_id": step_id,
                    "name": os.path.basename(tasks[0].argv[0]) if tasks[0].argv else "",
                    "node_list": compress(sorted({t.node for t in tasks})), "ntasks": tasks[0].ntasks,
                    "start_time": min(starts) if starts else None,
                    "state": "RUNNING" if any(t.state == "RUNNING" for t in tasks) else tasks[0].state})
    return out


def cancel(service: Service, caller: Caller, body: m.StepCancelRequest) -> m.StepCancelReply:
    """Cancel a step's tasks that still pend or run (only the job's owner or an administrator)."""
    job = service.store.get_job(int(body["job_id"]))
    if job is None:
        raise NotFound("Invalid job id specified")
    service.require_owner(caller, job)
    n = 0
    for t in step_store.list_tasks(service.store, job_id=job.id, step_id=int(body["step_id"]),
                                   states=["PENDING", "RUNNING"]):
        n += step_store.set_task(service.store, t, ("PENDING", "RUNNING"), state="CANCELLING")
    service.wake()
    return {"cancelled": n}
