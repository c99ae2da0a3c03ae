"""The node agent: launches the jobs the controller placed on its nodes, forwards
cancel/preempt/signal requests to their supervisors, and records each run's end.

Every step is idempotent and driven by the store plus the spool, so a restarted
daemon (even after `kill -9`) re-adopts live runs, collects finished ones and never
starts a run twice: a run is launched only when its spool directory does not exist,
and its usage record is keyed by (job_id, run).

A run's LaunchRequest is built by `batchd.node.launchrequest`; its efficiency samples are
taken by `batchd.node.runsampler`; its end is written by `batchd.node.runs.end_run`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal as _signal
import time
from typing import Any

from batchd import faults
from batchd.config import Config
from batchd.errors import ConfigError, StoreError
from batchd.model import Job
from batchd.node import isolation, jobexec, launcher
from batchd.node.launchrequest import job_signal, launch_request
from batchd.node.runs import end_run
from batchd.node.runsampler import RunSampler
from batchd.node.spool import REQUEST, read_json
from batchd.node.steprunner import StepRunner
from batchd.protocol import IDLE_REASON
from batchd.store import Store
from batchd.store import steps as step_store

log = logging.getLogger(__name__)

#: Passes in a row a running job's bookkeeping may fail before its run is ended FAILED.
STRIKES = 3
#: Seconds without a full disk / lock timeout / unreachable database before its end is
#: logged and a new occurrence is logged again.
FAULT_QUIET_S = 30.0
#: How often collected runs' spool directories are purged (seconds)
PURGE_PERIOD_S = 60.0
#: `[scheduler] spool_keep_s` default: how long a collected run's spool directory is kept
SPOOL_KEEP_S = 3600.0


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class Agent:
    def __init__(self, cfg: Config, store: Store, node_names: list[str], on_change: Any = None):
        self.cfg = cfg
        self.store = store
        self.nodes = set(node_names)
        self.spool = cfg.spool_dir()
        # the agent is made at daemon start: a daemon holding many connections must not
        # run out of descriptors (launches and records work above 1024: no select())
        launcher.raise_nofile_limit()
        # searchable (not readable) so that users' jobs reach their own script in their run dir
        os.makedirs(self.spool, mode=0o711, exist_ok=True)
        self.on_change = on_change or (lambda: None)
        self.steps = StepRunner(store, self.spool, self.nodes, cfg.cluster_name, cfg.gpu_env)
        self.sampler = RunSampler(cfg, store, self.nodes)
        self._sent: dict[tuple[int, int], str] = {}
        self._limits: dict[tuple[int, int], int | None] = {}  # time limit each run's supervisor has
        self._strikes: dict[tuple[int, int], int] = {}
        self._once = faults.OnceLog(log)
        self._supervisors: dict[tuple[int, int], int] | None = None  # per pass, when asked
        self._faulted = False  # this pass met a full disk / lock timeout / unreachable database
        self._fault_seen = 0.0  # when a pass or the daemon's loop last met one
        self.isolation = self._isolation_mode(cfg.isolation)
        self.runs = launcher.SpoolIndex(self.spool)
        self._purged = 0.0  # when collected runs were last purged (time.time())

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
        return isinstance(alloc, dict) and bool(alloc) and next(iter(alloc)) in self.nodes

    # ------------------------------------------------------------------ one pass
    def step(self) -> int:
        """One pass over the running jobs of this agent's nodes; returns how many runs
        ended (the caller wakes the scheduler when > 0).

        One job never stops the pass: an error in one job's launch or bookkeeping is
        logged once and the pass goes on with the others (`_job_failed`); a job that
        keeps failing its bookkeeping is ended FAILED (SystemFailure)."""
        ended = 0
        self._faulted = False
        running = [j for j in self.store.list_jobs(states=["RUNNING"]) if self._mine(j)]
        live = set()
        self._supervisors = None
        for j in running:
            live.add((j.id, j.restarts))
            try:
                ended += self._step_job(j)
                self._strikes.pop((j.id, j.restarts), None)
            except Exception as e:  # isolation: this job's failure, not the pass's
                ended += self._job_failed(j, e)
        # runs in the spool that the store no longer shows running here: the store gave
        # up on them (cancelled, or NODE_FAIL while this agent was away and requeued).
        # A live one is killed; an ended one is recorded unless the store has its end.
        spooled = self.runs.runs()
        for job_id, run in spooled:
            if (job_id, run) in live:
                continue
            try:
                self._step_orphan(job_id, run)
            except Exception as e:
                if faults.cause(e) == faults.UNREACHABLE:
                    raise
                self._once(("orphan", job_id, run), logging.ERROR, "run bookkeeping failed job_id=%s run=%s "
                           "error=%s", job_id, run, _describe(e), exc_info=faults.cause(e) is None)
        self._forget_except(live, live.union(spooled))
        self._purge()
        try:
            self.steps.step()
        except Exception as e:
            if faults.cause(e) == faults.UNREACHABLE:
                raise
            self._once(("steps", type(e).__name__), logging.ERROR, "step pass failed error=%s", _describe(e),
                       exc_info=faults.cause(e) is None)
        self._once.clear_where(lambda k: isinstance(k, tuple) and len(k) == 3 and k[0] in ("job", "gone")
                               and (k[1], k[2]) not in live)
        if self._faulted:
            self._fault_seen = time.time()
        elif time.time() - self._fault_seen > FAULT_QUIET_S:
            # no fault for a while: say so once, and log the next one again
            for why in (faults.NO_SPACE, faults.LOCK_TIMEOUT, faults.UNREACHABLE):
                self._once.clear(("fault", why), "agent pass complete again (%s gone)", why)
        return ended

    def _forget_except(self, running: set[tuple[int, int]], known: set[tuple[int, int]]) -> None:
        """Drop what the agent keeps per run (job id, run) for runs that are neither
        running here nor in the spool any more: ends normally pop their keys, but a run the
        store ended elsewhere (NODE_FAIL, a cancel before launch) must not stay forever."""
        self.sampler.retain(running)
        for d in (self._sent, self._limits, self._strikes):
            for key in [k for k in d if k not in known]:
                del d[key]

    def _purge(self) -> None:
        """Every PURGE_PERIOD_S, delete the spool directories of runs collected more than
        `[scheduler] spool_keep_s` ago (batchd.config; kept for debugging until then), and
        the step tasks of ended runs that ended as long ago. The store's launched_run, not
        the directory, keeps a run from starting twice."""
        now = time.time()
        if now - self._purged < PURGE_PERIOD_S:
            return
        self._purged = now
        keep = float(self.cfg.scheduler.get("spool_keep_s", SPOOL_KEEP_S))
        try:
            n = launcher.purge_collected(self.spool, keep)
        except OSError as e:
            self._once(("purge", type(e).__name__), logging.ERROR, "spool purge failed error=%s", _describe(e))
            return
        if n:
            log.info("spool purged runs=%s keep_s=%s", n, int(keep))
        # the step tasks of ended runs go after the same time (their rows hold argv and env)
        try:
            n = step_store.purge_ended(self.store, sorted(self.nodes), now - keep)
        except Exception as e:  # the store: the next purge tries again
            self._once(("purge-steps", type(e).__name__), logging.ERROR, "step task purge failed error=%s",
                       _describe(e))
            return
        if n:
            log.info("step tasks purged tasks=%s keep_s=%s", n, int(keep))

    def log_failure(self, what: str) -> None:
        """Log the exception being handled at the top of the daemon's loop: a full disk,
        a lock timeout or an unreachable database in one plain line, once until it
        clears (`_once`); anything else with its traceback, as before."""
        import sys

        exc = sys.exc_info()[1]
        why = faults.cause(exc, (self.cfg.state_dir,)) if exc is not None else None
        if why is None:
            log.exception(what)
            return
        self._fault_seen = time.time()
        # the driver's own words: under the store's StoreError, under SQLAlchemy's wrapper
        inner = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ is not None else exc
        self._once(("fault", why), logging.ERROR, "%s: %s (%s); retrying", what, why,
                   (str(getattr(inner, "orig", None) or inner).splitlines() or [""])[0][:300])

    def _step_job(self, j: Job) -> int:
        """One running job's part of the pass; returns 1 when its run ended."""
        run = j.restarts
        try:
            st = launcher.poll(self.spool, j.id, run)
        except FileNotFoundError:
            if j.launched_run is not None and j.launched_run >= run and not launcher.staged(self.spool, j.id, run):
                # launched before, and its run directory is gone (removed by hand, a
                # cleaner): never a second start; the supervisor restores the directory.
                # (A staging directory left means the daemon died before the run existed:
                # it is launched below, for the first time.)
                return self._directory_gone(j)
            if j.action in ("cancel", "preempt", "requeue"):
                # asked to end before it was launched: end it without running it
                self._finish_unlaunched(j)
                return 1
            self._launch(j)
            return 0
        if st.state == "EXITED":
            self._finish(j, st)
            return 1
        if st.state == "LOST" and not st.pid and st.start_time is None:
            # the daemon died in the middle of launching this run (its dir exists, its
            # supervisor never started): `launch` is idempotent and starts it once
            self._launch(j)
            return 0
        if st.state == "LOST":
            # the supervisor is gone: kill whatever of the job is left, then record it
            launcher.terminate(self.spool, j.id, run, "node_fail", grace_s=0)
            self._finish(j, st, lost=True)
            return 1
        if j.action:
            self._forward(j)
        self._forward_limit(j)
        self.sampler.sample(j, st.pid)
        self._end_if_idle(j)
        return 0

    def _end_if_idle(self, j: Job) -> None:
        """The QOS's idle_timeout: a run whose GPUs all read 0 % in every sample for that
        long is ended (CANCELLED, Reason GpuIdleTimeout, slurmstepd's line in its error
        file saying why); only where NVML samples exist."""
        limit = next((q.idle_timeout_s for q in self.cfg.qos if q.name == j.qos), 0)
        key = (j.id, j.restarts)
        if not limit or self._sent.get(key) == "idle":
            return
        idle = self.sampler.idle_s(j.id, j.restarts)
        if idle < limit:
            return
        self._sent[key] = "idle"
        self.store.update_job(j.id, ("RUNNING",), reason=IDLE_REASON)
        launcher.terminate(self.spool, j.id, j.restarts, "cancel", grace_s=self.cfg.kill_wait_s, cause="idle")
        log.info("job idle timeout job_id=%s run=%s qos=%s idle_s=%d idle_timeout_s=%d", j.id, j.restarts, j.qos,
                 idle, limit)

    def _step_orphan(self, job_id: int, run: int) -> None:
        st = launcher.poll(self.spool, job_id, run)
        if st.state == "RUNNING":
            if self._sent.get((job_id, run)) != "orphan":
                log.warning("killing a run the store gave up on job_id=%s run=%s", job_id, run)
                launcher.terminate(self.spool, job_id, run, "node_fail", grace_s=0)
                self._sent[(job_id, run)] = "orphan"
            return
        if self.store.has_usage(job_id, run):
            launcher.collect(self.spool, job_id, run)
            self._sent.pop((job_id, run), None)
            return
        job = self.store.get_job(job_id)
        if job is None:
            launcher.collect(self.spool, job_id, run)
            return
        try:
            self._finish(job, st, lost=st.state == "LOST")
        except Exception as e:
            if faults.cause(e) is not None:
                raise  # the disk or the database: the next pass tries again
            # a record that can never be written (malformed job): give up on it once
            log.error("run end not recorded job_id=%s run=%s error=%s", job_id, run, _describe(e))
            launcher.collect(self.spool, job_id, run)

    # ------------------------------------------------------------------ isolation
    def _job_failed(self, j: Job, e: Exception) -> int:
        """A job's part of the pass raised. The disk, the database: logged once in plain
        words, tried again next pass (nothing is lost: the exit status stays in the
        spool). Anything else is this job's: logged once; after STRIKES passes in a row
        its run is ended FAILED (reason SystemFailure). Returns 1 when the run ended."""
        why = faults.cause(e)
        if why == faults.UNREACHABLE:
            raise e
        if why is not None:
            self._faulted = True
            self._once(("fault", why), logging.ERROR, "agent pass incomplete: %s (job_id=%s run=%s: %s); "
                       "the job's end is kept and recorded once the cause is gone", why, j.id, j.restarts, e)
            return 0
        key = (j.id, j.restarts)
        self._strikes[key] = self._strikes.get(key, 0) + 1
        self._once(("job", j.id, j.restarts), logging.ERROR, "job bookkeeping failed job_id=%s run=%s error=%s",
                   j.id, j.restarts, _describe(e), exc_info=True)
        if self._strikes[key] < STRIKES:
            return 0
        self._strikes.pop(key, None)
        log.error("job failed: its bookkeeping keeps failing job_id=%s run=%s", j.id, j.restarts)
        with contextlib.suppress(Exception):
            launcher.terminate(self.spool, j.id, j.restarts, "node_fail", grace_s=0)
        now = time.time()
        try:
            self._record(j, "FAILED", 1, 0, j.start_time or now, now, None)
        except Exception:  # the record itself cannot be built: end the job without it
            self.store.update_job(j.id, ("RUNNING",), state="FAILED", end_time=now, exit_code=1, exit_signal=0,
                                  action=None)
        self.store.update_job(j.id, ("FAILED",), reason="SystemFailure")
        self.on_change()
        return 1

    def _directory_gone(self, j: Job) -> int:
        """Run `j.restarts` was launched but its spool directory is gone. A live
        supervisor restores it (and keeps the job's end): wait for it. With none, the
        run is recorded NODE_FAIL once; it is never started a second time."""
        run = j.restarts
        if self._supervisors is None:
            self._supervisors = launcher.find_supervisors(self.spool)
        if (j.id, run) in self._supervisors:
            self._once(("gone", j.id, run), logging.WARNING, "run directory gone, its supervisor is alive: "
                       "waiting for it to restore it job_id=%s run=%s pid=%s", j.id, run,
                       self._supervisors[(j.id, run)])
            return 0
        log.error("run directory gone and no supervisor: recording the run NODE_FAIL, not starting it again "
                  "job_id=%s run=%s", j.id, run)
        if j.action == "cancel":
            self._finish_unlaunched(j)
        else:
            self._finish(j, launcher.RunStatus("LOST", j.id, run), lost=True)
        return 1

    # ------------------------------------------------------------------ launch
    def _launch(self, j: Job) -> None:
        """Start the job's current run once: the store records the launch (launched_run,
        compare-and-set) before the run's directory is made, so that a run whose
        directory later vanishes is never started again. A job whose request cannot be
        built or whose supervisor cannot start ends FAILED (JobLaunchFailure), with a line
        in its error file where that can be written."""
        run = j.restarts
        try:
            req = launch_request(j, self.cfg, self.store, self.isolation)
        except Exception as e:
            self._launch_failed(j, e, None)
            return
        jobdir = launcher.jobdir_path(self.spool, j.id, run)
        fresh = not os.path.isdir(jobdir)
        recorded = j.launched_run is not None and j.launched_run >= run  # a launch that stopped staged
        refused: list[bool] = []

        def record(staging: str) -> bool:  # the store first, then the run's directory
            ok = recorded or self.store.mark_launched(j.id, run)
            refused.append(not ok)
            if ok:  # what an earlier, interrupted launch staged must never count again
                for old in launcher.staged(self.spool, j.id, run):
                    if old != staging:
                        shutil.rmtree(old, ignore_errors=True)
            return ok

        try:
            info = launcher.launch(req, self.spool, before_start=record if fresh else None)
            log.info("job launched job_id=%s run=%s node=%s pid=%s", j.id, run, req.node, info.pid)
        except Exception as e:  # the job cannot start: it fails, the daemon goes on
            if refused and refused[-1]:
                log.info("job launch skipped, the store changed job_id=%s run=%s", j.id, run)
                return
            if fresh and not os.path.isdir(jobdir):
                self.store.clear_launched(j.id, run)  # nothing started: a later launch is the first
                if faults.cause(e) is not None:
                    # the disk or the database, not the job: it waits and is launched later
                    self._faulted = True
                    self._once(("fault", faults.cause(e)), logging.ERROR, "job not launched: %s job_id=%s "
                               "run=%s (launched once the cause is gone)", faults.cause(e), j.id, run)
                    return
            self._launch_failed(j, e, req)

    def _launch_failed(self, j: Job, e: Exception, req: launcher.LaunchRequest | None) -> None:
        log.error("job launch failed job_id=%s run=%s error=%s", j.id, j.restarts, _describe(e))
        self._note_failure(j, req, f"batchd: error: job {j.id} could not be launched: {e}\n")
        now = time.time()
        self._record(j, "FAILED", 1, 0, j.start_time or now, now, None)
        self.store.update_job(j.id, ("FAILED",), reason="JobLaunchFailure")

    def _note_failure(self, j: Job, req: launcher.LaunchRequest | None, line: str) -> None:
        """Append `line` to the job's error file, as the user (the request's file, else
        Slurm's default `slurm-<id>.out` in its working directory); best effort."""
        try:
            spec = j.spec if isinstance(j.spec, dict) else {}
            workdir = req.workdir if req else spec.get("workdir")
            if not isinstance(workdir, str) or not os.path.isabs(workdir):
                return
            if req is not None:
                path = req.stderr or req.stdout
            elif j.array_job_id is not None:
                path = os.path.join(workdir, f"slurm-{j.array_job_id}_{j.array_task_id}.out")
            else:
                path = os.path.join(workdir, f"slurm-{j.id}.out")
            uid, gid = (j.uid, j.gid) if os.getuid() == 0 else (os.getuid(), os.getgid())
            jobexec.append_as_user(j.user, uid, gid, path, line)
        except Exception as e:  # the note is a courtesy; the job's reason says it anyway
            log.warning("launch failure note not written job_id=%s error=%s", j.id, e)

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
            sig = job_signal(j.spec)
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

    def _forward_limit(self, j: Job) -> None:
        """A time limit changed by `scontrol update` on a running job reaches its run's
        supervisor (`launcher.set_time_limit`; it re-arms the limit from the run's start,
        batchd.node.runlimits), once per change: the store's limit is compared with what the
        supervisor last got, at first sight of a run (a restarted daemon too) its launch
        request's. Unlike cancel and signal, nothing is queued in the job's `action`: the
        limit itself is the request, so it never competes with a cancel or a preemption."""
        key = (j.id, j.restarts)
        want = None if j.time_limit_s is None or j.time_limit_s < 0 else int(j.time_limit_s)
        if key not in self._limits:
            req = read_json(os.path.join(launcher.jobdir_path(self.spool, j.id, j.restarts), REQUEST)) or {}
            self._limits[key] = req.get("time_limit_s")
        if self._limits[key] == want:
            return
        launcher.set_time_limit(self.spool, j.id, j.restarts, want)
        self._limits[key] = want
        log.info("job time limit sent job_id=%s run=%s time_limit_s=%s", j.id, j.restarts, want)

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
        self.sampler.forget(j.id, run)
        self._limits.pop((j.id, run), None)
        try:
            launcher.collect(self.spool, j.id, run)
        except FileNotFoundError:
            pass
        self.on_change()
