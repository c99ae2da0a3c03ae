"""Start, watch and stop jobs on this node through one supervisor per run.

The node agent calls four things: `launch` (start a run), `poll` (its state),
`terminate` / `send_signal` (stop or signal it), and `list_runs` / `collect` (find the
runs a restarted daemon must finish, and mark them done once their usage is stored).
The run directories and their records are described in `batchd.spool`.

A job is never started twice: the job directory is created by an atomic rename, and the
supervisor only lets the job exec after `started.json` is on disk.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import os
import resource
import selectors
import shutil
import signal as _signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import psutil

from batchd.errors import BatchdError
from batchd.spool import (  # noqa: F401  (re-exported: the launcher's callers use these names)
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
_control_seq = itertools.count()


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
            cmd = [sys.executable, "-m", "batchd.supervisor", "--detach",
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
    from batchd import isolation

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


def find_supervisors(spool_dir: str) -> dict[tuple[int, int], int]:
    """(job_id, run) -> pid of every live supervisor of a run of `spool_dir`, from the
    processes' command lines (`... batchd.supervisor [options] <spool>/job.<id>.<run>`),
    whether or not the run's directory still exists. Only supervisors this process can
    see: none of those in another pid namespace (their directory's lock is the test that
    reaches them, see `batchd.spool`)."""
    spool = os.path.abspath(spool_dir)
    found: dict[tuple[int, int], int] = {}
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "batchd.supervisor" not in cmd or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            path = cmd[-1]
        except (psutil.Error, IndexError, TypeError):
            continue
        m = JOBDIR_RE.match(os.path.basename(path))
        if m and os.path.dirname(path) == spool:
            found[(int(m.group(1)), int(m.group(2)))] = int(proc.info["pid"])
    return found


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


# ---------------------------------------------------------------- watch


def poll(spool_dir: str, job_id: int, run: int) -> RunStatus:
    """The state of one run; see RunStatus. Raises FileNotFoundError for an unknown run."""
    jobdir = jobdir_path(spool_dir, job_id, run)
    if not os.path.isdir(jobdir):
        raise FileNotFoundError(jobdir)
    for _attempt in range(2):
        done = read_json(os.path.join(jobdir, EXIT))
        if done is not None:
            return RunStatus(
                "EXITED", job_id, run, pid=int(done.get("pid") or 0), start_time=done.get("start_time"),
                final_state=done["final_state"], exit_code=int(done["exit_code"]),
                signal=int(done["signal"]), end_time=done.get("end_time"), requested=done.get("requested"),
                rusage=done.get("rusage") or {}, error=done.get("error"))
        started = read_json(os.path.join(jobdir, STARTED))
        if supervisor_alive(jobdir, started):
            if started is None:
                return RunStatus("RUNNING", job_id, run)
            # the job's pid means nothing to this process in another pid namespace:
            # 0 keeps the daemon from sampling or signalling a stranger by it
            pid = int(started["pid"]) if pids_are_local(started) else 0
            _note_foreign_view(jobdir, started)
            return RunStatus("RUNNING", job_id, run, pid=pid, start_time=float(started["start_time"]))
        # the supervisor may have written exit.json and exited between the two reads
    return RunStatus("LOST", job_id, run, pid=int(started["pid"]) if started else 0,
                     start_time=float(started["start_time"]) if started else None)


_noted_views: set[str] = set()


def _note_foreign_view(jobdir: str, started: dict[str, Any]) -> None:
    """Log once per run that its supervisor sees another boot id or pid namespace than
    this daemon (it is alive: its lock is held)."""
    if jobdir in _noted_views:
        return
    theirs_boot, theirs_ns = started.get("boot_id") or "", started.get("pid_ns") or ""
    ours_boot, ours_ns = boot_id(), pid_namespace()
    if (theirs_boot and theirs_boot != ours_boot) or (theirs_ns and theirs_ns != ours_ns):
        _noted_views.add(jobdir)
        log.info("run alive in another view jobdir=%s unit=%s boot_id=%s daemon_boot_id=%s pid_ns=%s "
                 "daemon_pid_ns=%s (its lock is held: the run is RUNNING)", jobdir, started.get("unit") or "-",
                 theirs_boot or "-", ours_boot or "-", theirs_ns or "-", ours_ns or "-")


def list_runs(spool_dir: str) -> list[tuple[int, int]]:
    """(job_id, run) of every run directory not yet collected, sorted."""
    try:
        names = os.listdir(spool_dir)
    except FileNotFoundError:
        return []
    runs = []
    for name in names:
        m = JOBDIR_RE.match(name)
        if m and not os.path.exists(os.path.join(spool_dir, name, COLLECTED)):
            runs.append((int(m.group(1)), int(m.group(2))))
    return sorted(runs)


def collect(spool_dir: str, job_id: int, run: int) -> None:
    """Mark a run collected (its usage record is stored). The files stay for debugging
    until `purge_collected`; the directory keeps the run from ever being started again."""
    path = os.path.join(jobdir_path(spool_dir, job_id, run), COLLECTED)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))


def purge_collected(spool_dir: str, older_than_s: float = 7 * 86400) -> int:
    """Delete collected run directories (and abandoned staging ones) whose marker is
    older than `older_than_s` seconds; returns how many were removed."""
    removed = 0
    now = time.time()
    for name in os.listdir(spool_dir) if os.path.isdir(spool_dir) else []:
        path = os.path.join(spool_dir, name)
        marker = os.path.join(path, COLLECTED) if JOBDIR_RE.match(name) else path
        if not (JOBDIR_RE.match(name) or name.startswith(".new.job.")):
            continue
        try:
            if now - os.stat(marker).st_mtime > older_than_s:
                shutil.rmtree(path)
                removed += 1
        except FileNotFoundError:
            continue
    return removed


# ---------------------------------------------------------------- control


def _post_control(jobdir: str, request: dict[str, Any]) -> bool:
    """Hand `request` to the run's supervisor; False when it is not alive."""
    if os.path.exists(os.path.join(jobdir, EXIT)):
        return True  # already gone: nothing to do
    started = read_json(os.path.join(jobdir, STARTED))
    name = f"{CONTROL_PREFIX}{time.time_ns():020d}-{os.getpid()}-{next(_control_seq)}.json"
    write_json_atomic(os.path.join(jobdir, name), request)
    if not supervisor_alive(jobdir, started):
        # exit.json written meanwhile, or a supervisor still starting (it reads the file)
        return os.path.exists(os.path.join(jobdir, EXIT)) or (started is None and lock_is_held(jobdir))
    # wake it at once where its pid is ours to signal; elsewhere it finds the request
    # within CONTROL_SCAN_S (a bare pid from another namespace could be anyone here)
    pid = supervisor_here(started)
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, _signal.SIGUSR1)
    return True


def _signal_orphans(jobdir: str, sig: int) -> None:
    """Signal the processes of a run whose supervisor is gone (LOST): members of the
    job's process group that belong to the job's user (the daemon's user when it is not
    root), so that a reused process group id never hits a stranger."""
    started = read_json(os.path.join(jobdir, STARTED))
    req = read_json(os.path.join(jobdir, REQUEST))
    if started is None or req is None:
        return
    if started.get("unit"):
        _stop_unit(str(started["unit"]), started.get("invocation_id"), sig)
    if not pids_are_local(started):
        log.warning("lost run's processes are in another pid namespace: not signalled by pid jobdir=%s "
                    "pid_ns=%s unit=%s", jobdir, started.get("pid_ns"), started.get("unit") or "-")
        return
    pgid = int(started["pgid"])
    uid = int(req["uid"]) if os.geteuid() == 0 else os.getuid()
    for proc in psutil.process_iter(["pid", "uids"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["uids"].real == uid:
                os.kill(proc.pid, sig)
        except (ProcessLookupError, psutil.Error, OSError):
            continue


def _stop_unit(unit: str, invocation_id: str | None, sig: int) -> None:
    """`sig` to every process of a lost run's transient unit, through systemd (which
    reaches them from any pid namespace), only while the unit is still that run's own
    invocation (the unit name is per job: a later run may have it); nothing where
    systemctl is missing."""
    systemctl = shutil.which("systemctl")
    if systemctl is None or not invocation_id:
        return
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        shown = subprocess.run([systemctl, "show", "-p", "InvocationID", "--value", unit],
                               capture_output=True, text=True, timeout=10, check=False)
        if shown.stdout.strip().replace("-", "") != invocation_id.replace("-", ""):
            return
        subprocess.run([systemctl, "kill", f"--signal={int(sig)}", "--kill-who=all", unit],
                       capture_output=True, timeout=10, check=False)


def terminate(spool_dir: str, job_id: int, run: int, reason: Reason, signal: int = _signal.SIGTERM,
              grace_s: int | None = None, batch_only: bool = False, cause: str | None = None) -> None:
    """Ask the supervisor to end the run: `signal` to the job's process group (only the
    batch shell with `batch_only`), `grace_s` seconds (default the request's
    kill_wait_s), then SIGKILL to the group; the final state follows `reason`
    (REASON_STATE). `cause` (a CANCEL_NOTES key, default `reason`) picks Slurm's
    `slurmstepd: error: *** JOB N ON node CANCELLED AT ... ***` line that the supervisor
    writes to the job's error file first. A run already gone is not an error; a LOST
    run's processes are killed directly."""
    if reason not in REASON_STATE:
        raise ValueError(f"unknown terminate reason {reason!r}")
    jobdir = jobdir_path(spool_dir, job_id, run)
    if not os.path.isdir(jobdir):
        return
    request = {"action": "terminate", "reason": reason, "signal": int(signal), "grace_s": grace_s,
               "batch_only": bool(batch_only), "cause": cause or reason}
    log.info("job terminate job_id=%s run=%s reason=%s signal=%s", job_id, run, reason, signal)
    if not _post_control(jobdir, request):
        _signal_orphans(jobdir, _signal.SIGKILL)


def send_signal(spool_dir: str, job_id: int, run: int, sig: int, batch_only: bool = False) -> None:
    """Forward `sig` to the job's process group (only the batch shell with
    `batch_only`), as `scancel --signal` does. A run already gone is not an error."""
    jobdir = jobdir_path(spool_dir, job_id, run)
    if not os.path.isdir(jobdir):
        return
    if not _post_control(jobdir, {"action": "signal", "signal": int(sig), "batch_only": bool(batch_only)}):
        _signal_orphans(jobdir, sig)


def set_time_limit(spool_dir: str, job_id: int, run: int, time_limit_s: int | None) -> None:
    """Change a running job's time limit (seconds from its start; None or <= 0: none),
    as `scontrol update TimeLimit=` does. A limit already passed ends the job at once
    (TIMEOUT). A run already gone is not an error."""
    jobdir = jobdir_path(spool_dir, job_id, run)
    if os.path.isdir(jobdir):
        _post_control(jobdir, {"action": "time_limit", "time_limit_s": time_limit_s})
