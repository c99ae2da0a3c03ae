"""The per-run supervisor: `python -m batchd.node.supervisor [--detach | --unit] JOBDIR`.

Started by `batchd.node.launcher.launch` in a new session and forked once more (`--detach`),
so that it is neither the daemon's child nor in its process group: a daemon that dies
(even by `kill -9`) or a Ctrl-C in its terminal never reaches the job. It depends on
nothing but the job directory. With `--unit` it is the main process of the job's
transient systemd unit (isolation "systemd"): it takes the run's lock from the launcher,
protects itself from the OOM killer, leaves the memory limit to the kernel (MemoryMax)
and reads a kernel OOM kill from the unit's `memory.events` (OUT_OF_MEMORY).

It forks the job, which puts itself in a new session (its pid is its process group),
drops to the user's groups, gid and uid (in that order) when the supervisor is root,
opens stdin/stdout/stderr and changes to the working directory *as the user*, and execs
the script (`/bin/bash script argv...` when it has no `#!` line). The job execs only
after `started.json` is on disk, so a job that ran always has a record.

While the job runs, the supervisor enforces the time limit (the `--signal` signal at
its time, SIGTERM at the limit, SIGKILL `kill_wait_s` later: TIMEOUT), the memory limit
(RSS of the whole process tree, sampled every MEM_POLL_S seconds: OUT_OF_MEMORY) and the
daemon's control requests (woken by SIGUSR1, and rescanned every second). It is a child
subreaper, so processes that leave the job's process group are still found and killed
when the job ends. It reaps the batch shell with `os.wait4` and writes `exit.json`.
It ignores SIGINT, SIGHUP and SIGTERM: only SIGKILL ends it early (the run is then LOST).

This module holds the run itself (start record, main loop, exit record, the job
directory's restoration) and the entry point; the handling of control requests and
limits is `batchd.node.runlimits.RunControl`, the signalling and reaping of the job's
processes `batchd.node.jobtree.JobTree`, both bases of `Supervisor`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import selectors
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

import psutil

from batchd.node.jobexec import OUTPUT_OPEN_FAILED, OUTPUT_OPEN_FAILED_SIG, exec_job, write_stepd_error
from batchd.node.jobtree import set_subreaper
from batchd.node.runlimits import RunControl, protect_from_oom
from batchd.node.spool import (
    EXIT,
    LOCK,
    REASON_STATE,
    REQUEST,
    SCRIPT,
    STARTED,
    LaunchRequest,
    boot_id,
    pid_namespace,
    read_json,
    start_ticks,
    write_json_atomic,
)

log = logging.getLogger(__name__)

#: Interval between RSS samples of the job's process tree when a memory limit is set (s).
MEM_POLL_S = 0.25
#: Interval between scans of the job directory for control requests (s).
CONTROL_SCAN_S = 1.0
#: Longest wait between two tries to write the exit status (a full disk) (s).
WRITE_RETRY_MAX_S = 10.0


class Supervisor(RunControl):
    """Runs one job of one job directory to its end; see the module docstring."""

    def __init__(self, jobdir: str, ready_fd: int | None, unit: bool = False) -> None:
        self.jobdir = jobdir
        self.ready_fd = ready_fd
        # in a systemd unit the kernel enforces the memory limit (MemoryMax): polling only
        # records the peak, and an OOM kill is read from the unit's memory.events
        self.unit = unit
        self.cgroup_dir: str | None = None
        self.oom_base: int | None = None
        self.req: LaunchRequest | None = None
        self.child = 0
        self.start_time = 0.0
        self.t0 = 0.0
        self.requested: str | None = None
        self.kill_at: float | None = None
        self.limit_at: float | None = None  # monotonic time of the time limit
        self.sig_at: float | None = None  # monotonic time of --signal's signal
        self.signal_sent = False
        self.reaped = False  # the batch shell has been waited for
        self.error = b""
        self.peak_rss_kb = 0
        self.started: dict[str, Any] | None = None  # what started.json holds, to restore it
        self.lock_fds: list[int] = []  # locks of restored run directories, held to the end

    # ------------------------------------------------------------ helpers
    def _path(self, name: str) -> str:
        return os.path.join(self.jobdir, name)

    def _notify(self, answer: bytes) -> None:
        if self.ready_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.ready_fd, answer)
                os.close(self.ready_fd)
            self.ready_fd = None

    # ------------------------------------------------------------ the run directory
    def _restore_dir(self) -> bool:
        """Put the job directory back when it was removed while the job runs: request,
        start record and a held lock, built under a temporary name and renamed into
        place, so the daemon never sees a directory without them (which it would take
        for a run never started, and start). True when the directory is there again."""
        if os.path.isdir(self.jobdir):
            return True
        spool = os.path.dirname(self.jobdir)
        staging = None
        try:
            os.makedirs(spool, mode=0o711, exist_ok=True)
            staging = tempfile.mkdtemp(dir=spool, prefix=f".restore.{os.path.basename(self.jobdir)}.")
            os.chmod(staging, 0o711 if os.geteuid() == 0 else 0o700)
            if self.req is not None:
                write_json_atomic(os.path.join(staging, REQUEST), self.req.to_json())
            fd = os.open(os.path.join(staging, LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.lock_fds.append(fd)
            if self.started is not None:
                write_json_atomic(os.path.join(staging, STARTED), self.started)
            os.rename(staging, self.jobdir)
            log.warning("job directory was removed: restored jobdir=%s", self.jobdir)
            return True
        except OSError as exc:
            log.warning("job directory not restored jobdir=%s error=%s", self.jobdir, exc)
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            return os.path.isdir(self.jobdir)

    def _write_record(self, name: str, record: dict[str, Any]) -> None:
        """Write `record` as `name` in the job directory, however long it takes: a full
        disk or a removed directory never loses a job's end. Retries with backoff up to
        WRITE_RETRY_MAX_S between tries, keeping the record in memory meanwhile; the
        daemon sees a live supervisor and waits."""
        delay = 0.2
        logged = False
        while True:
            try:
                if not os.path.isdir(self.jobdir):
                    self._restore_dir()
                write_json_atomic(self._path(name), record)
                if logged:
                    log.info("%s written after all jobdir=%s", name, self.jobdir)
                return
            except OSError as exc:
                if not logged:
                    logged = True
                    log.error("%s not written, retrying: %s jobdir=%s", name, exc.strerror or exc, self.jobdir)
            time.sleep(delay)
            delay = min(delay * 2, WRITE_RETRY_MAX_S)

    def _unit_name(self) -> str | None:
        """The transient unit this supervisor is the main process of (isolation
        "systemd"), else None."""
        if not self.unit or self.req is None:
            return None
        from batchd.node import isolation

        return isolation.unit_name(self.req.job_id)

    # ------------------------------------------------------------ main
    def _fail_before_start(self, message: str) -> int:
        now = time.time()
        self._write_record(EXIT, {
            "pid": 0, "final_state": "FAILED", "exit_code": 1, "signal": 0, "start_time": now,
            "end_time": now, "rusage": {}, "requested": None, "error": message})
        self._notify(b"F")
        return 1

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)
        if os.path.exists(self._path(EXIT)) or os.path.exists(self._path(STARTED)):
            log.error("run already started jobdir=%s", self.jobdir)
            self._notify(b"S")
            return 2
        try:
            self.req = req = LaunchRequest.from_json(read_json(self._path(REQUEST)) or {})
        except (OSError, TypeError, ValueError) as exc:
            return self._fail_before_start(f"unreadable launch request: {exc}")
        set_subreaper()
        if self.unit:
            from batchd.node import isolation

            protect_from_oom()
            self.cgroup_dir = isolation.own_cgroup_dir()
            self.oom_base = isolation.oom_kills(self.cgroup_dir)
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGUSR1, lambda *_: None)
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe()
        sid_r, sid_w = os.pipe()
        try:
            self.child = os.fork()
        except OSError as exc:
            return self._fail_before_start(f"fork failed: {exc}")
        if self.child == 0:
            exec_job(req, self._path(SCRIPT), go_r, err_w, sid_w, parents=(go_w, err_r, sid_r))
        os.close(go_r)
        os.close(err_w)
        os.close(sid_w)
        # the child is in its own session (its pid is its process group) before the start
        # is recorded with that group; b"" when it died first (reaped by the loop below)
        os.read(sid_r, 1)
        os.close(sid_r)
        self.t0 = time.monotonic()
        self.start_time = time.time()
        try:
            create_time = psutil.Process(self.child).create_time()
        except psutil.Error:
            create_time = self.start_time
        me = psutil.Process()
        self.started = {
            "pid": self.child, "pgid": self.child, "start_time": self.start_time, "create_time": create_time,
            "start_ticks": start_ticks(self.child), "supervisor_pid": os.getpid(),
            "supervisor_start_time": me.create_time(), "supervisor_start_ticks": start_ticks(os.getpid()),
            "boot_id": boot_id(), "pid_ns": pid_namespace(), "unit": self._unit_name(),
            "invocation_id": os.environ.get("INVOCATION_ID") if self.unit else None}
        write_json_atomic(self._path(STARTED), self.started)
        os.write(go_w, b"g")
        os.close(go_w)
        self._notify(b"S")
        log.info("job started job_id=%s run=%s pid=%s uid=%s", req.job_id, req.run, self.child, req.uid)
        status, rusage = self._loop(wake_r, err_r)
        end_time = time.time()
        self._kill_leftovers()
        self._write_exit(status, rusage, end_time)
        return 0

    def _loop(self, wake_r: int, err_r: int) -> tuple[int, Any]:
        assert self.req is not None
        req = self.req
        self._set_time_limit(req.time_limit_s)
        next_ctl = self.t0
        next_mem = self.t0 if req.mem_limit_mb is not None else None
        # poll-based (no select(): it fails for descriptors above 1024)
        sel = selectors.DefaultSelector()
        sel.register(wake_r, selectors.EVENT_READ)
        sel.register(err_r, selectors.EVENT_READ)
        while True:
            reaped = self._reap()
            if reaped is not None:
                with contextlib.suppress(OSError):
                    self.error += os.read(err_r, 4096)
                return reaped
            now = time.monotonic()
            if now >= next_ctl:
                self._handle_controls()
                next_ctl = now + CONTROL_SCAN_S
            if self.sig_at is not None and now >= self.sig_at:
                log.info("job signal before time limit signal=%s", req.signal)
                self._signal_job(int(req.signal[0]) if req.signal else signal.SIGTERM, req.signal_batch_only)
                self.sig_at = None
                self.signal_sent = True
            if self.limit_at is not None and now >= self.limit_at:
                self.limit_at = None
                if self.requested is None:
                    self._begin_termination("timeout", signal.SIGTERM, req.kill_wait_s)
            if self.kill_at is not None and now >= self.kill_at:
                self._signal_job(signal.SIGKILL)
                self.kill_at = now + 1.0  # again, for processes stuck in the kernel
            if next_mem is not None and now >= next_mem:
                self._check_memory()
                next_mem = now + MEM_POLL_S
            deadlines = [t for t in (next_ctl, self.sig_at, self.limit_at, self.kill_at, next_mem) if t is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 1.0
            readable = {key.fd for key, _ev in sel.select(min(timeout, 1.0))}
            if wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    data = os.read(wake_r, 256)
                    if int(signal.SIGUSR1) in data:
                        next_ctl = 0.0
            if err_r in readable:
                chunk = os.read(err_r, 4096)
                self.error += chunk
                if not chunk:
                    sel.unregister(err_r)

    def _write_exit(self, status: int, rusage: Any, end_time: float) -> None:
        """Write exit.json. State: OUT_OF_MEMORY after a memory-limit kill, else the
        requested termination's state, else COMPLETED for exit 0, else FAILED. `rusage`
        is that of the batch shell and the descendants it reaped: `max_rss_kb` (KiB; the
        kernel carries the forked supervisor image's peak, about 15 MB, across exec, so
        it never reads lower), `user_cpu_s`, `sys_cpu_s`; `peak_tree_rss_kb` is the
        sampled peak of the whole tree, present when a memory limit was set."""
        assert self.req is not None
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        if self.error.startswith(OUTPUT_OPEN_FAILED):
            exit_code, sig = 0, OUTPUT_OPEN_FAILED_SIG
        if self.unit and self.requested is None and self.oom_base is not None:
            from batchd.node import isolation

            kills = isolation.oom_kills(self.cgroup_dir)
            if kills is not None and kills > self.oom_base:
                n = kills - self.oom_base
                log.info("job killed by the kernel at its memory limit oom_kills=%s", n)
                # slurmstepd's line for the cgroup's OOM kills (Slurm 22.05's task/cgroup wording)
                write_stepd_error(self.req, f"Detected {n} oom_kill event{'s' if n > 1 else ''} in "
                                            f"StepId={self.req.job_id}.batch. Some of the step tasks have "
                                            f"been OOM Killed.")
                self.requested = "oom"
        if self.requested == "oom":
            final = "OUT_OF_MEMORY"
        elif self.requested in REASON_STATE:
            final = REASON_STATE[self.requested]
        elif exit_code == 0 and sig == 0 and not self.error:
            final = "COMPLETED"
        else:
            final = "FAILED"
        usage: dict[str, float] = {
            "max_rss_kb": rusage.ru_maxrss, "user_cpu_s": rusage.ru_utime, "sys_cpu_s": rusage.ru_stime}
        if self.peak_rss_kb:
            usage["peak_tree_rss_kb"] = self.peak_rss_kb
        self._write_record(EXIT, {
            "pid": self.child, "pgid": self.child, "final_state": final, "exit_code": exit_code,
            "signal": sig, "start_time": self.start_time, "end_time": end_time, "rusage": usage,
            "requested": self.requested, "error": self.error.decode(errors="replace") or None})
        log.info("job exited job_id=%s run=%s state=%s exit=%s:%s", self.req.job_id, self.req.run,
                 final, exit_code, sig)
        from batchd.node.wakeup import wake_agent

        wake_agent(os.path.dirname(self.jobdir))  # the agent records the end now, not at its next pass


def main(argv: list[str] | None = None) -> int:
    """Entry point; see the module docstring. Returns the supervisor's exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    detach = "--detach" in args
    unit = "--unit" in args
    lock_fd = ready_fd = None
    rest = []
    for arg in args:
        if arg.startswith("--lock-fd="):
            lock_fd = int(arg.split("=", 1)[1])
        elif arg.startswith("--ready-fd="):
            ready_fd = int(arg.split("=", 1)[1])
        elif arg not in ("--detach", "--unit"):
            rest.append(arg)
    if len(rest) != 1:
        print("usage: python -m batchd.node.supervisor [--detach | --unit] JOBDIR", file=sys.stderr)
        return 2
    jobdir = os.path.abspath(rest[0])
    if detach and os.fork() != 0:
        os._exit(0)  # the launcher reaps this intermediate; the supervisor is re-parented
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s supervisor[{os.getpid()}] %(message)s")
    for fd in (lock_fd, ready_fd):
        if fd is not None:
            os.set_inheritable(fd, False)  # the job must not inherit them
    if lock_fd is None:
        lock_fd = os.open(os.path.join(jobdir, LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            # in a unit: wait while the launcher hands the lock over (it releases it once
            # systemd-run has returned); the run's checks below then see what happened
            fcntl.flock(lock_fd, fcntl.LOCK_EX if unit else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.error("another supervisor holds %s", jobdir)
            return 2
    return Supervisor(jobdir, ready_fd, unit=unit).run()


if __name__ == "__main__":
    sys.exit(main())
