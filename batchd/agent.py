"""The node agent: launches the jobs the controller placed on its nodes, forwards
cancel/preempt/signal requests to their supervisors, and records each run's end.

Every step is idempotent and driven by the store plus the spool, so a restarted
daemon (even after `kill -9`) re-adopts live runs, collects finished ones and never
starts a run twice: a run is launched only when its spool directory does not exist,
and its usage record is keyed by (job_id, run).
"""

from __future__ import annotations

import logging
import os
import pwd
import signal as _signal
import time
from typing import Any

from batchd import isolation, jobenv, launcher
from batchd.config import Config
from batchd.errors import ConfigError
from batchd.model import Job
from batchd.runs import end_run
from batchd.steps import StepRunner
from batchd.store import Store

log = logging.getLogger(__name__)



class Agent:
    def __init__(self, cfg: Config, store: Store, node_names: list[str], on_change: Any = None):
        self.cfg = cfg
        self.store = store
        self.nodes = set(node_names)
        self.spool = cfg.spool_dir()
        # searchable (not readable) so that users' jobs reach their own script in their run dir
        os.makedirs(self.spool, mode=0o711, exist_ok=True)
        self.on_change = on_change or (lambda: None)
        self.steps = StepRunner(store, self.spool, self.nodes, cfg.cluster_name, cfg.gpu_env)
        self._last_sample: dict[tuple[int, int], float] = {}
        self._gpu_sampler: Any = None
        if any(cfg.node(n).gpus == "nvml" for n in self.nodes):
            from batchd.gpusample import GpuSampler

            self._gpu_sampler = GpuSampler()
        self._sent: dict[tuple[int, int], str] = {}
        self.isolation = self._isolation_mode(cfg.isolation)

    @staticmethod
    def _isolation_mode(setting: str) -> str:
        """Detect (and, where the static checks pass, probe) the isolation this node
        offers and choose the launcher's mode; ConfigError when "systemd" was asked for
        and cannot be had."""
        report = isolation.detect(probe=setting != "plain")
        try:
            mode = isolation.choose_mode(setting, report)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        log.info("isolation mode=%s setting=%s why=%s", mode, setting, "; ".join(report.reasons))
        return mode

    def _mine(self, j: Job) -> bool:
        alloc = j.allocation or {}
        return bool(alloc) and next(iter(alloc)) in self.nodes

    # ------------------------------------------------------------------ one pass
    def step(self) -> int:
        """One pass over the running jobs of this agent's nodes; returns how many runs
        ended (the caller wakes the scheduler when > 0)."""
        ended = 0
        running = [j for j in self.store.list_jobs(states=["RUNNING"]) if self._mine(j)]
        live = set()
        for j in running:
            run = j.restarts
            live.add((j.id, run))
            try:
                st = launcher.poll(self.spool, j.id, run)
            except FileNotFoundError:
                if j.action in ("cancel", "preempt", "requeue"):
                    # asked to end before it was launched: end it without running it
                    self._finish_unlaunched(j)
                    ended += 1
                    continue
                self._launch(j)
                continue
            if st.state == "EXITED":
                self._finish(j, st)
                ended += 1
            elif st.state == "LOST" and not st.pid and st.start_time is None:
                # the daemon died in the middle of launching this run (its dir exists, its
                # supervisor never started): `launch` is idempotent and starts it once
                self._launch(j)
            elif st.state == "LOST":
                # the supervisor is gone: kill whatever of the job is left, then record it
                launcher.terminate(self.spool, j.id, run, "node_fail", grace_s=0)
                self._finish(j, st, lost=True)
                ended += 1
            else:
                if j.action:
                    self._forward(j)
                self._sample(j, st.pid)
        # runs in the spool that the store no longer shows running here: the store gave
        # up on them (cancelled, or NODE_FAIL while this agent was away and requeued).
        # A live one is killed; an ended one is recorded unless the store has its end.
        for job_id, run in launcher.list_runs(self.spool):
            if (job_id, run) in live:
                continue
            st = launcher.poll(self.spool, job_id, run)
            if st.state == "RUNNING":
                if self._sent.get((job_id, run)) != "orphan":
                    log.warning("killing a run the store gave up on job_id=%s run=%s", job_id, run)
                    launcher.terminate(self.spool, job_id, run, "node_fail", grace_s=0)
                    self._sent[(job_id, run)] = "orphan"
                continue
            if self.store.has_usage(job_id, run):
                launcher.collect(self.spool, job_id, run)
                self._sent.pop((job_id, run), None)
                continue
            job = self.store.get_job(job_id)
            if job is not None:
                self._finish(job, st, lost=st.state == "LOST")
            else:
                launcher.collect(self.spool, job_id, run)
        self.steps.step()
        return ended

    # ------------------------------------------------------------------ efficiency
    def _sample(self, j: Job, pid: int) -> None:
        """Every `[accounting] sample_interval_s`: the run's CPU (psutil over its process
        tree) and, where NVML serves the node, its GPUs' utilisation and memory."""
        interval = self.cfg.sample_interval_s
        key = (j.id, j.restarts)
        now = time.time()
        if interval <= 0 or not pid or now - self._last_sample.get(key, 0.0) < interval:
            return
        self._last_sample[key] = now
        from batchd.accounting.efficiency import record_sample, sample_job

        devices = self._gpu_uuids(j) if self._gpu_sampler is not None else None
        try:
            record_sample(self.store, j.id, j.restarts,
                          sample_job([pid], devices=devices, gpu_sampler=self._gpu_sampler, now=now))
        except Exception as e:  # sampling never disturbs the job or the agent
            log.warning("sample failed job_id=%s error=%s", j.id, e)

    def _gpu_uuids(self, j: Job) -> list[str]:
        """UUIDs of the devices (or MIG instances) the job holds on this agent's nodes."""
        out: list[str] = []
        inv = {n.name: n.gpus for n in self.store.list_nodes() if n.name in self.nodes}
        for node, a in (j.allocation or {}).items():
            by_index = {g.get("index"): g.get("uuid") for g in inv.get(node, []) if "index" in g}
            for g in a.get("gpus", []):
                s = str(g)
                uuid = s.split(":", 1)[1] if ":" in s else by_index.get(int(s))
                if uuid:
                    out.append(uuid)
        return out

    # ------------------------------------------------------------------ launch
    def _launch(self, j: Job) -> None:
        alloc = j.allocation or {}
        node = next(iter(alloc))
        spec = j.spec
        view = self._job_dict(j)
        mps = self.cfg.mps and bool(alloc[node].get("shards"))
        # the nodes' GPU inventories, read once, for what needs more than the allocation
        inv = ({n.name: n.gpus for n in self.store.list_nodes()}
               if self.cfg.gpu_env == "uuid" or mps or self.isolation == "systemd" else {})
        if self.cfg.gpu_env == "uuid":
            alloc = jobenv.with_gpu_uuids(alloc, inv)
        env = jobenv.full_environment(spec, view, alloc, node, self.cfg.cluster_name)
        if mps:
            # MPS limits for a shard job: its share of the card its shards are on
            card = jobenv.shard_card(alloc[node])
            mem = next((g.get("memory_mb") for g in inv.get(node, [])
                        if isinstance(g, dict) and g.get("index") == card), None)
            env.update(jobenv.mps_environment(int(alloc[node]["shards"]), self.cfg.shard_per_gpu,
                                              int(mem) if mem else None))
        workdir = spec.get("workdir") or "/"
        out = _path(jobenv.expand_pattern(spec.get("output") or jobenv.default_output(view), view, node), workdir)
        err_pat = spec.get("error")
        err = _path(jobenv.expand_pattern(err_pat, view, node), workdir) if err_pat else out
        inp = spec.get("input")
        try:
            pw = pwd.getpwuid(j.uid)
            home = pw.pw_dir
        except KeyError:
            home = "/"
        uid, gid = (j.uid, j.gid) if os.getuid() == 0 else (os.getuid(), os.getgid())
        sig = spec.get("signal")
        if sig and not sig.get("batch_only"):
            # Slurm: --signal without `B:` goes to the job's steps (srun), never to the batch
            # step, whose processes are the script and what it starts directly (the steps'
            # supervisors time it: batchd.steps.step_signal)
            sig = None
        req = launcher.LaunchRequest(
            job_id=j.id, run=j.restarts, user=j.user, uid=uid, gid=gid, groups=None, home=home,
            workdir=workdir, script=spec.get("script", ""), argv=list(spec.get("argv") or []), env=env,
            stdout=out, stderr=err,
            stdin=_path(jobenv.expand_pattern(inp, view, node), workdir) if inp else None,
            open_mode="append" if spec.get("open_mode") == "append" else "truncate",
            time_limit_s=None if j.time_limit_s in (None, -1) else j.time_limit_s,
            kill_wait_s=self.cfg.kill_wait_s,
            signal=(int(sig["signal"]), int(sig.get("time_s", 60))) if sig else None,
            signal_batch_only=True,
            # without cgroups the node enforces --mem by polling the job's RSS (OUT_OF_MEMORY)
            mem_limit_mb=(int(alloc[node].get("memory_mb") or 0) or None) if self.cfg.enforce_memory else None,
            node=node,
            isolation="systemd" if self.isolation == "systemd" else "plain",
            cpu_ids=[int(c) for c in alloc[node].get("cpu_ids") or []] or None,
            devices=isolation.job_devices(alloc[node], inv.get(node)) if self.isolation == "systemd" else None,
        )
        try:
            info = launcher.launch(req, self.spool)
            log.info("job launched job_id=%s run=%s node=%s pid=%s", j.id, j.restarts, node, info.pid)
        except Exception as e:  # the job cannot start: it fails, the daemon goes on
            log.error("job launch failed job_id=%s error=%s", j.id, e)
            now = time.time()
            self._record(j, "FAILED", 1, 0, j.start_time or now, now, None)
            self.store.update_job(j.id, ("FAILED",), reason="JobLaunchFailure")

    # ------------------------------------------------------------------ requests
    def _forward(self, j: Job) -> None:
        key = (j.id, j.restarts)
        action = j.action or ""
        if self._sent.get(key) == action:
            return
        self._sent[key] = action
        if action == "cancel":
            launcher.terminate(self.spool, j.id, j.restarts, "cancel", grace_s=self.cfg.kill_wait_s)
        elif action in ("preempt", "requeue"):
            sig = (j.spec.get("signal") or {}).get("signal") or int(_signal.SIGTERM)
            grace = next((q.grace_time_s for q in self.cfg.qos if q.name == j.qos),
                         int(self.cfg.scheduler.get("grace_time_s", 60)))
            if action == "requeue":
                sig, grace = int(_signal.SIGTERM), self.cfg.kill_wait_s
            launcher.terminate(self.spool, j.id, j.restarts, "preempt", signal=int(sig), grace_s=grace,
                               cause=action)
        elif action.startswith("signal:"):
            parts = action.split(":")
            launcher.send_signal(self.spool, j.id, j.restarts, int(parts[1]), batch_only=len(parts) > 2)
            self.store.update_job(j.id, ("RUNNING",), action=None)
            self._sent.pop(key, None)
        log.info("job %s sent job_id=%s run=%s", action, j.id, j.restarts)

    # ------------------------------------------------------------------ ends
    def _finish_unlaunched(self, j: Job) -> None:
        now = time.time()
        state = {"cancel": "CANCELLED", "preempt": "PREEMPTED", "requeue": "REQUEUED"}[j.action or "cancel"]
        self._record(j, state, 0, 0, j.start_time or now, now, None)

    def _finish(self, j: Job, st: launcher.RunStatus, lost: bool = False) -> None:
        now = time.time()
        if lost:
            state, code, sig = "NODE_FAIL", 0, 0
            end = now
        else:
            state = st.final_state or "FAILED"
            code, sig, end = st.exit_code, st.signal, st.end_time or now
            if j.action == "requeue" and state in ("PREEMPTED", "CANCELLED"):
                state = "REQUEUED"
        # the run's start is the allocation's (the job's start_time, as squeue and Slurm's
        # sacct show it: the GPUs are held from then), the supervisor's own start only for a
        # run that is not the job's current one
        current = st.run == j.restarts and j.start_time
        start = (j.start_time if current else st.start_time) or st.start_time or end
        self._record(j, state, code, sig, start, end, st.rusage if not lost else None, run=st.run)
        self._sent.pop((j.id, st.run), None)

    def _record(self, j: Job, state: str, code: int, sig: int, start: float, end: float,
                rusage: dict[str, float] | None, run: int | None = None) -> None:
        """End the run in the store (usage record + the job's next state, once), then
        mark the spool run collected."""
        run = j.restarts if run is None else run
        end_run(self.store, j, state, code, sig, start, end, rusage, run)
        self._last_sample.pop((j.id, run), None)
        try:
            launcher.collect(self.spool, j.id, run)
        except FileNotFoundError:
            pass
        self.on_change()

    def _job_dict(self, j: Job) -> dict[str, Any]:
        r = j.request
        tasks = r.get("array_task_ids") or []
        d: dict[str, Any] = {
            "id": j.id, "array_job_id": j.array_job_id, "array_task_id": j.array_task_id,
            "name": j.name, "user": j.user, "uid": j.uid, "gid": j.gid, "account": j.account,
            "partition": j.partition, "qos": j.qos, "restarts": j.restarts, "time_limit_s": j.time_limit_s,
            "node_list": j.node_list, "submit_host": j.spec.get("submit_host") or os.uname().nodename,
            "nice": j.nice, "priority": j.priority, "gpu_type": r.get("gpu_type"),
            "cluster_name": self.cfg.cluster_name, "gpu_env": self.cfg.gpu_env,
            "mem_per_cpu_mb": self.cfg.def_mem_per_cpu_mb,
        }
        if tasks:
            d.update(array_task_min=min(tasks), array_task_max=max(tasks), array_task_count=len(tasks),
                     array_task_step=r.get("array_step") or 1)
        return d


def _path(p: str, workdir: str) -> str:
    return p if os.path.isabs(p) else os.path.join(workdir, p)
