"""Start jobs on this node, one detached supervisor per run.

`launch` starts a run (idempotent: a run's directory appears once, by an atomic rename,
and the supervisor only lets the job exec after `started.json` is on disk, so a job is
never started twice); the supervisor is spawned plainly (`_spawn_supervisor`, a
detached `python -m batchd.node.supervisor`) or as the main process of a transient systemd
unit (`_spawn_unit`, isolation "systemd"). `staged` finds a launch's leftover staging
directories. The run directories and their records are described in `batchd.node.spool`.

The node agent also calls, through this module's names: `poll`, `list_runs`,
`collect`, `purge_collected`, `find_supervisors`, `SpoolIndex` (from `batchd.node.runwatch`) and
`terminate`, `send_signal`, `set_time_limit` (from `batchd.node.runcontrol`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from batchd.errors import BatchdError
from batchd.node.runcontrol import send_signal, set_time_limit, terminate  # noqa: F401  (re-exported)
from batchd.node.runwatch import (  # noqa: F401  (re-exported)
    SpoolIndex,
    collect,
    find_supervisors,
    list_runs,
    poll,
    purge_collected,
)
from batchd.node.spool import (  # noqa: F401  (re-exported: the launcher's callers use these names)
    CANCEL_NOTES,
    COLLECTED,
    CONTROL_PREFIX,
    DAEMON_ONLY_ENV,
    EXIT,
    JOBDIR_RE,
    LOCK,
    LOG,
    REASON_STATE,
    REQUEST,
    SCRIPT,
    STARTED,
    LaunchInfo,
    LaunchRequest,
    Reason,
    RunStatus,
    boot_id,
    jobdir_path,
    lock_is_held,
    lock_state,
    pid_namespace,
    pids_are_local,
    process_matches,
    read_json,
    start_ticks,
    supervisor_alive,
    supervisor_here,
    write_json_atomic,
)

log = logging.getLogger(__name__)

#: How long `launch` waits for the supervisor to record the start (seconds).
LAUNCH_TIMEOUT_S = 60.0


class LaunchError(BatchdError):
    """The supervisor of a run could not be started (the job did not run)."""

    code = "JobLaunchFailure"
    status = 500


# ---------------------------------------------------------------- launch


_checked_spools: set[str] = set()


def _prepare_spool(spool_dir: str) -> None:
    """Create the spool (0711) if needed. When root, make it searchable by all (its
    files stay unlistable and private), so that jobs of other users can exec their
    script; warn once when a parent directory is not searchable."""
    os.makedirs(spool_dir, mode=0o711, exist_ok=True)
    if os.geteuid() != 0 or spool_dir in _checked_spools:
        return
    _checked_spools.add(spool_dir)
    mode = os.stat(spool_dir).st_mode
    if mode & 0o011 != 0o011:
        os.chmod(spool_dir, (mode & 0o7777) | 0o011)
        log.info("spool made searchable spool=%s", spool_dir)
    parent = os.path.dirname(os.path.abspath(spool_dir))
    while parent != "/":
        if not os.stat(parent).st_mode & 0o001:
            log.warning("spool parent not searchable path=%s: jobs of other users cannot run", parent)
            break
        parent = os.path.dirname(parent)


def _write_staging(req: LaunchRequest, spool_dir: str) -> str:
    """Build the complete job directory under a temporary name; return its path."""
    staging = tempfile.mkdtemp(dir=spool_dir, prefix=f".new.job.{req.job_id}.{req.run}.")
    root = os.geteuid() == 0
    os.chmod(staging, 0o711 if root else 0o700)
    write_json_atomic(os.path.join(staging, REQUEST), req.to_json())
    script = os.path.join(staging, SCRIPT)
    fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
    with os.fdopen(fd, "w") as fh:
        fh.write(req.script)
    if root:
        os.chown(script, req.uid, req.gid)
    os.close(os.open(os.path.join(staging, LOCK), os.O_WRONLY | os.O_CREAT, 0o600))
    return staging


def _spawn_supervisor(jobdir: str, lock_fd: int) -> LaunchInfo:
    """Start the supervisor for `jobdir` and wait until it reports.

    `lock_fd` is the supervisor lock, held by the caller. A plain supervisor is detached
    and inherits it, so the lock is held without a gap from before the spawn until the
    supervisor exits; a supervisor in a systemd unit takes it over (`_spawn_unit`).
    """
    try:
        req = read_json(os.path.join(jobdir, REQUEST)) or {}
    except ValueError:
        req = {}  # the supervisor reports an unreadable request as the run's failure
    if req.get("isolation") == "systemd":
        return _spawn_unit(jobdir, LaunchRequest.from_json(req), lock_fd)
    ready_r, ready_w = os.pipe()
    env = _child_env()
    try:
        with open(os.path.join(jobdir, LOG), "ab") as logf:
            os.chmod(logf.name, 0o600)
            cmd = [sys.executable, "-m", "batchd.node.supervisor", "--detach",
                   f"--lock-fd={lock_fd}", f"--ready-fd={ready_w}", jobdir]
            # start_new_session: the supervisor is neither in the daemon's process group nor
            # its session, so Ctrl-C in the daemon's terminal or a kill of its group never
            # reaches it; --detach forks once more so it is not the daemon's child either.
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                    pass_fds=(lock_fd, ready_w), start_new_session=True,
                                    close_fds=True, env=env, cwd="/")
        os.close(ready_w)
        ready_w = -1
        proc.wait()
        answer = _read_ready(ready_r, LAUNCH_TIMEOUT_S)
    finally:
        os.close(ready_r)
        if ready_w >= 0:
            os.close(ready_w)
    info = _existing_info(jobdir)
    if info is None:
        raise LaunchError(f"supervisor did not start the job (answer {answer!r}); see {jobdir}/{LOG}")
    return info


def _spawn_unit(jobdir: str, req: LaunchRequest, lock_fd: int) -> LaunchInfo:
    """Start the supervisor in the transient unit `batchd-job-<id>.service` and wait
    until it has recorded the start.

    systemd passes no file descriptors into a unit, so the lock is handed over: the
    supervisor waits for it (`--unit`), and this function releases it once systemd-run
    has started the unit. The unit name is the guard against a second start in the
    window between: a second systemd-run for the same job fails ("already loaded"), and
    the launcher then waits for the run that is there.
    """
    from batchd.node import isolation

    systemd_run = shutil.which("systemd-run")
    if systemd_run is None:
        raise LaunchError("isolation is systemd but systemd-run is not on PATH")
    cmd = isolation.unit_command(
        systemd_run=systemd_run, job_id=req.job_id, run=req.run, user=req.user, jobdir=jobdir,
        python=sys.executable, mem_limit_mb=req.mem_limit_mb, cpu_ids=req.cpu_ids, devices=req.devices,
        log_path=os.path.join(jobdir, LOG))
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=LAUNCH_TIMEOUT_S, check=False, cwd="/", env=_child_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"systemd-run failed: {exc}") from None
    fcntl.flock(lock_fd, fcntl.LOCK_UN)  # the supervisor in the unit takes it now
    if proc.returncode != 0 and "already" not in proc.stderr:
        raise LaunchError(f"systemd-run failed rc={proc.returncode}: {proc.stderr.strip()[-300:]}")
    unit = isolation.unit_name(req.job_id)
    if proc.returncode != 0:
        log.warning("job unit already there, waiting for it unit=%s", unit)
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    next_check = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        info = _existing_info(jobdir)
        if info is not None:
            return info
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + 0.5
            if not lock_is_held(jobdir) and _unit_gone(unit):
                break
        time.sleep(0.01)
    info = _existing_info(jobdir)
    if info is None:
        raise LaunchError(f"unit {unit} did not start the job; see {jobdir}/{LOG}")
    return info


def _child_env() -> dict[str, str]:
    """The daemon's environment without its service's own variables: a supervisor's."""
    return {k: v for k, v in os.environ.items() if k not in DAEMON_ONLY_ENV}


def _unit_gone(unit: str) -> bool:
    """systemd says the unit is not running (inactive, failed or unknown); False when
    that cannot be asked."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return False
    try:
        p = subprocess.run([systemctl, "is-active", unit], capture_output=True, text=True, timeout=10,
                           check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.stdout.strip() in ("inactive", "failed", "unknown")


def _read_ready(fd: int, timeout_s: float) -> bytes:
    """The supervisor's answer on `fd` (b"" at EOF or after `timeout_s`). Waits with
    poll, not select(): it works whatever the descriptor's number (a daemon holding many
    connections has descriptors above FD_SETSIZE, 1024)."""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return b""
            if sel.select(left):
                return os.read(fd, 16)


def raise_nofile_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (a daemon serving many
    connections must not run out of descriptors); returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("descriptor limit not raised soft=%s hard=%s error=%s", soft, hard, exc)
    return soft


def _existing_info(jobdir: str) -> LaunchInfo | None:
    started = read_json(os.path.join(jobdir, STARTED))
    if started is not None:
        return LaunchInfo(int(started["pid"]), float(started["start_time"]), jobdir)
    if os.path.exists(os.path.join(jobdir, EXIT)):
        return LaunchInfo(0, 0.0, jobdir)
    return None


def _wait_existing(jobdir: str, timeout_s: float) -> LaunchInfo | None:
    """Info of a run whose supervisor is alive (maybe still starting), or None."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = _existing_info(jobdir)
        if info is not None or not lock_is_held(jobdir) or time.monotonic() > deadline:
            return info
        time.sleep(0.01)


def launch(req: LaunchRequest, spool_dir: str, before_start: Any = None) -> LaunchInfo:
    """Start run `req.run` of job `req.job_id` under a detached supervisor.

    Returns once the supervisor has written `started.json` (or recorded a failure
    before the job started: `pid == 0`). Idempotent: when the run's directory exists,
    no second copy is started and the existing run's info is returned; only a run
    whose supervisor died before the job was let to exec is started (for the first time).
    `before_start(staging)`, when given, is called once the run's files are staged (in
    `staging`) and before its directory appears: False means the run must not start
    (LaunchError). A daemon
    that dies between the two leaves the staging directory (`staged`). Raises LaunchError
    when the supervisor cannot be brought up.
    """
    _prepare_spool(spool_dir)
    jobdir = jobdir_path(spool_dir, req.job_id, req.run)
    if not os.path.isdir(jobdir):
        staging = _write_staging(req, spool_dir)
        if before_start is not None and not before_start(staging):
            shutil.rmtree(staging, ignore_errors=True)
            raise LaunchError(f"launch of job {req.job_id} run {req.run} refused by the store")
        lock_fd = os.open(os.path.join(staging, LOCK), os.O_RDWR)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            try:
                os.rename(staging, jobdir)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                shutil.rmtree(staging, ignore_errors=True)
            else:
                log.info("job launching job_id=%s run=%s jobdir=%s", req.job_id, req.run, jobdir)
                return _spawn_supervisor(jobdir, lock_fd)
        finally:
            os.close(lock_fd)
    return _launch_existing(jobdir)


def staged(spool_dir: str, job_id: int, run: int) -> list[str]:
    """Staging directories of a run (the launch's files, written before its directory is
    renamed into place); one left behind means the launch stopped before the run existed."""
    prefix = f".new.job.{int(job_id)}.{int(run)}."
    try:
        return [os.path.join(spool_dir, n) for n in os.listdir(spool_dir) if n.startswith(prefix)]
    except FileNotFoundError:
        return []


def _launch_existing(jobdir: str) -> LaunchInfo:
    info = _wait_existing(jobdir, LAUNCH_TIMEOUT_S)
    if info is not None:
        return info
    lock_fd = os.open(os.path.join(jobdir, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _wait_existing(jobdir, LAUNCH_TIMEOUT_S)
            if info is None:
                raise LaunchError(f"supervisor of {jobdir} did not record a start") from None
            return info
        info = _existing_info(jobdir)
        if info is not None:
            return info
        # No started.json and nobody holds the lock: the job never ran (the supervisor
        # only lets it exec after started.json exists), so starting it now is its first start.
        log.warning("job never started, starting now jobdir=%s", jobdir)
        return _spawn_supervisor(jobdir, lock_fd)
    finally:
        os.close(lock_fd)
