"""Job steps: `srun` inside a job starts tasks on the job's nodes through their agents,
so that torchrun/MPI-style launches work across a multi-node allocation.

The service side checks and records a step; the agent side (`StepRunner`) launches the
tasks of its nodes with the same launcher as batch scripts (a supervisor per task, in
a separate spool area), sets each task's SLURM_PROCID/LOCALID/NODEID and the GPUs of
its node, and kills a step's tasks when the job's run ends.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from batchd import jobenv, launcher
from batchd import messages as m
from batchd.caller import Caller
from batchd.errors import Conflict, InvalidRequest, NotFound
from batchd.hostlist import compress
from batchd.protocol import step_output_path
from batchd.store import Store
from batchd.store import steps as step_store

if TYPE_CHECKING:
    from batchd.service import Service

log = logging.getLogger(__name__)

FINAL = ("COMPLETED", "FAILED", "CANCELLED")
#: At most this many tasks in one step, whatever the allocation (each is a supervisor).
MAX_STEP_TASKS = 4096
#: Step tasks launched at the same time, in the background of the agent's pass.
LAUNCH_WORKERS = 4
STEP_SCRIPT = '#!/bin/sh\nexec "$@"\n'
GPU_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
            "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_CPUS_ON_NODE")


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


#: How far past the job's own time limit a step's supervisor sets its limit: the job's end
#: kills the step first; the step's limit exists only to time `--signal`'s signal.
STEP_LIMIT_PAD_S = 600


def step_signal(spec: dict[str, Any], time_limit_s: int | None, start_time: float | None,
                now: float) -> tuple[int | None, tuple[int, int] | None]:
    """(time limit, signal) for a step task's supervisor so that `--signal=SIG@T` without
    `B:` reaches the step T seconds before the job's time limit, as Slurm sends it to every
    step (and not to the batch shell). The step's own limit is the job's remaining time
    plus STEP_LIMIT_PAD_S, never reached first. (None, None) when there is no such signal
    or no time limit."""
    sig = spec.get("signal")
    if not sig or sig.get("batch_only") or time_limit_s in (None, -1) or not start_time:
        return None, None
    remaining = max(0, int(start_time + int(time_limit_s) - now))
    return remaining + STEP_LIMIT_PAD_S, (int(sig["signal"]), int(sig.get("time_s", 60)) + STEP_LIMIT_PAD_S)


class StepRunner:
    """The agent side: launch, watch and end the step tasks of this agent's nodes."""

    def __init__(self, store: Store, spool: str, nodes: set[str], cluster_name: str, gpu_env: str):
        self.store = store
        self.spool = os.path.join(spool, "steps")
        os.makedirs(self.spool, mode=0o711, exist_ok=True)
        self.nodes = nodes
        self.cluster_name = cluster_name
        self.gpu_env = gpu_env
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: dict[tuple[int, int, int, int], tuple[step_store.Task, Future[None]]] = {}
        self._failed: set[tuple[int, int, int, int]] = set()

    @staticmethod
    def _code(t: step_store.Task) -> int:
        # the launcher keys runs by (job_id, run): encode (job run, step, task) in `run`
        return t.run * 1_000_000 + t.step_id * 1000 + t.procid

    def step(self) -> int:
        """One pass over this agent's step tasks; returns how many are active. Tasks are
        launched in the background (LAUNCH_WORKERS at a time), so a step of many tasks
        never holds the agent's pass; one task whose bookkeeping fails is logged once and
        the others go on."""
        self._collect_launches()
        tasks = step_store.list_tasks(self.store, nodes=sorted(self.nodes),
                                      states=["PENDING", "RUNNING", "CANCELLING"])
        jobs: dict[int, Any] = {}
        for t in tasks:
            try:
                self._step_task(t, jobs)
            except Exception as e:  # isolation: this task's failure, not the pass's
                key = (t.job_id, t.step_id, t.procid, t.run)
                if key not in self._failed:
                    self._failed.add(key)
                    log.exception("step task bookkeeping failed job_id=%s step=%s procid=%s error=%s",
                                  t.job_id, t.step_id, t.procid, e)
        # a task no longer active is no longer failing: keep only the active ones' keys
        self._failed &= {(t.job_id, t.step_id, t.procid, t.run) for t in tasks}
        return len(tasks)

    def _step_task(self, t: step_store.Task, jobs: dict[int, Any]) -> None:
        if t.job_id not in jobs:
            jobs[t.job_id] = self.store.get_job(t.job_id)
        job = jobs[t.job_id]
        alive = job is not None and job.state == "RUNNING" and job.restarts == t.run
        code = self._code(t)
        key = (t.job_id, t.step_id, t.procid, t.run)
        if key in self._inflight:
            return  # being launched: its state is set when the launch returns
        if t.state == "PENDING":
            if not alive:
                step_store.set_task(self.store, t, ("PENDING",), state="CANCELLED", end_time=time.time())
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=LAUNCH_WORKERS, thread_name_prefix="step-launch")
            self._inflight[key] = (t, self._pool.submit(self._launch, t, job))
            return
        try:
            st = launcher.poll(self.spool, t.job_id, code)
        except FileNotFoundError:
            step_store.set_task(self.store, t, ("RUNNING", "CANCELLING"), state="CANCELLED", end_time=time.time())
            return
        if st.state == "RUNNING":
            if not alive or t.state == "CANCELLING":
                launcher.terminate(self.spool, t.job_id, code, "cancel", grace_s=2)
            return
        state = "CANCELLED" if t.state == "CANCELLING" or st.final_state == "CANCELLED" else (
            "COMPLETED" if st.final_state == "COMPLETED" else "FAILED")
        step_store.set_task(self.store, t, ("RUNNING", "CANCELLING"), state=state, exit_code=st.exit_code,
                            exit_signal=st.signal, end_time=st.end_time or time.time())
        launcher.collect(self.spool, t.job_id, code)

    def _collect_launches(self) -> None:
        """Set the state of the tasks whose background launch returned: RUNNING, or
        FAILED (exit 1) when the supervisor could not be started."""
        for key, (t, fut) in list(self._inflight.items()):
            if not fut.done():
                continue
            try:
                exc = fut.exception()
                if exc is None:
                    step_store.set_task(self.store, t, ("PENDING",), state="RUNNING", start_time=time.time())
                else:
                    log.error("step task launch failed job_id=%s step=%s procid=%s error=%s", t.job_id,
                              t.step_id, t.procid, exc)
                    now = time.time()
                    step_store.set_task(self.store, t, ("PENDING",), state="FAILED", exit_code=1, exit_signal=0,
                                        start_time=now, end_time=now)
            except Exception as e:  # the store: the next pass tries again
                log.warning("step task state not stored job_id=%s step=%s error=%s", t.job_id, t.step_id, e)
                continue
            del self._inflight[key]

    def _launch(self, t: step_store.Task, job: Any) -> None:
        alloc = job.allocation or {}
        view = {"id": job.id, "name": job.name, "user": job.user, "uid": job.uid, "gid": job.gid,
                "account": job.account, "partition": job.partition, "qos": job.qos, "restarts": job.restarts,
                "node_list": job.node_list, "gpu_env": self.gpu_env, "array_job_id": job.array_job_id,
                "array_task_id": job.array_task_id}
        if self.gpu_env == "uuid":
            alloc = jobenv.with_gpu_uuids(alloc, {n.name: n.gpus for n in self.store.list_nodes()})
        node_env = jobenv.job_environment(job.spec, view, alloc, t.node, self.cluster_name)
        env = dict(t.env)
        for k in GPU_VARS:
            env.pop(k, None)
            if k in node_env:
                env[k] = node_env[k]
        step_nodes = sorted({x.node for x in step_store.list_tasks(self.store, job_id=t.job_id, step_id=t.step_id)},
                            key=list(alloc).index)
        env.update({
            "SLURM_STEP_ID": str(t.step_id), "SLURM_STEPID": str(t.step_id), "SLURM_PROCID": str(t.procid),
            "SLURM_LOCALID": str(t.localid), "SLURM_NODEID": str(t.nodeid), "SLURMD_NODENAME": t.node,
            "SLURM_STEP_NODELIST": compress(step_nodes), "SLURM_STEP_NUM_NODES": str(len(step_nodes)),
            "SLURM_STEP_NUM_TASKS": str(t.ntasks), "SLURM_NTASKS": str(t.ntasks),
        })
        out = step_output_path(t.cwd, t.job_id, t.step_id, t.procid)
        uid, gid = (job.uid, job.gid) if os.getuid() == 0 else (os.getuid(), os.getgid())
        limit, sig = step_signal(job.spec or {}, job.time_limit_s, job.start_time, time.time())
        req = launcher.LaunchRequest(
            job_id=t.job_id, run=self._code(t), user=job.user, uid=uid, gid=gid, groups=None,
            home=env.get("HOME", "/"), workdir=t.cwd, script=STEP_SCRIPT, argv=list(t.argv), env=env,
            stdout=out, stderr=out, time_limit_s=limit, kill_wait_s=2, signal=sig)
        launcher.launch(req, self.spool)  # raises: the task fails, the step and the job go on
        log.info("step task launched job_id=%s step=%s procid=%s node=%s", t.job_id, t.step_id, t.procid, t.node)
