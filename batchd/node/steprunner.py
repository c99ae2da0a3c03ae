"""Job steps, the node half: `StepRunner` launches the step tasks of its agent's nodes
(recorded by `batchd.server.steps`) with the same launcher as batch scripts (a supervisor per
task, in a separate spool area), sets each task's SLURM_PROCID/LOCALID/NODEID and the
GPUs of its node, and kills a step's tasks when the job's run ends.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from batchd.node import jobenv, launcher
from batchd.protocol import step_output_path
from batchd.slurm.hostlist import compress
from batchd.store import Store
from batchd.store import steps as step_store

log = logging.getLogger(__name__)

#: Step tasks launched at the same time, in the background of the agent's pass.
LAUNCH_WORKERS = 4
STEP_SCRIPT = '#!/bin/sh\nexec "$@"\n'
GPU_VARS = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
            "SLURM_STEP_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_CPUS_ON_NODE")


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
