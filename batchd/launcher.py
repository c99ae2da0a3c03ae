"""Start, watch and stop jobs on this node through one detached supervisor per run.

The node agent calls four things: `launch` (start a run), `poll` (its state),
`terminate` / `send_signal` (stop or signal it), and `list_runs` / `collect` (find the
runs a restarted daemon must finish, and mark them done once their usage is stored).

Spool layout, one directory per run (`run` = restart count of the job)::

    <spool>/job.<id>.<run>/          root-owned 0711 when the daemon is root (0700 otherwise)
        request.json                 the LaunchRequest (0600; it holds the job's environment)
        slurm_script                 the script, 0700, owned by the job's user
        supervisor.lock              flock held by the supervisor for its whole life
        supervisor.log               the supervisor's own stderr
        started.json                 {pid, pgid, start_time, create_time, start_ticks, supervisor_pid,
                                      supervisor_start_time, supervisor_start_ticks, boot_id}
        control.<ns>-<n>.json        requests from the daemon; the supervisor deletes each once handled
        exit.json                    {final_state, exit_code, signal, start_time, end_time, rusage, requested, error}
        collected                    marker: the daemon has stored the run's usage record

The job directory is not writable by the job's user: the daemon trusts `exit.json`
for accounting, so the user must not be able to forge it. The user can reach the script
because the directory and the spool directory are searchable (launch makes the spool
searchable when root); the spool's own parents must be searchable too.

A job is never started twice: the job directory is created by an atomic rename, and the
supervisor only lets the job exec after `started.json` is on disk. Times are unix seconds
(float). `start_time`/`end_time` are wall-clock readings taken by the supervisor at fork and
at reaping (elapsed = end - start); processes are identified by pid + start ticks since boot
+ boot id (psutil's `create_time`, also stored, can be off by up to a second and moves
with wall-clock steps).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import itertools
import json
import logging
import os
import re
import select
import shutil
import signal as _signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import psutil

from batchd.errors import BatchdError

log = logging.getLogger(__name__)

REQUEST, SCRIPT, LOCK, LOG = "request.json", "slurm_script", "supervisor.lock", "supervisor.log"
STARTED, EXIT, COLLECTED, CONTROL_PREFIX = "started.json", "exit.json", "collected", "control."
JOBDIR_RE = re.compile(r"^job\.(\d+)\.(\d+)$")
#: How long `launch` waits for the supervisor to record the start (seconds).
LAUNCH_TIMEOUT_S = 60.0
#: Tolerance when comparing a persisted process create time with psutil's (seconds).
CREATE_TIME_TOLERANCE_S = 0.05
_control_seq = itertools.count()

Reason = Literal["cancel", "preempt", "timeout", "node_fail"]
#: final state for each termination reason
REASON_STATE = {"cancel": "CANCELLED", "preempt": "PREEMPTED", "timeout": "TIMEOUT", "node_fail": "NODE_FAIL"}


class LaunchError(BatchdError):
    """The supervisor of a run could not be started (the job did not run)."""

    code = "JobLaunchFailure"
    status = 500


@dataclass
class LaunchRequest:
    """Everything the supervisor needs to run one run of a job.

    `env` is the complete environment of the job (SLURM_*, CUDA_VISIBLE_DEVICES
    included); `stdout`/`stderr`/`stdin` are absolute paths, already expanded; the same
    path for stdout and stderr (or an empty stderr) sends both streams to one file.
    `time_limit_s` None or <= 0 means no limit; `signal` is `--signal` as
    (signal number, seconds before the time limit), sent to the batch shell alone when
    `signal_batch_only` (`--signal=B:...`), else to every process of the job;
    `mem_limit_mb` is enforced by polling the RSS of the job's process tree (over it:
    OUT_OF_MEMORY). `node` names this node in slurmstepd's messages (default: the
    environment's SLURMD_NODENAME, else the short host name).

    `isolation` "systemd" starts the supervisor in its own transient unit (see
    `batchd.isolation.unit_command`): the kernel then enforces `mem_limit_mb` (MemoryMax),
    `cpu_ids` (AllowedCPUs) and `devices` (DevicePolicy=closed + DeviceAllow). In "plain"
    mode `cpu_ids` pins the job with sched_setaffinity (the CPUs of them this machine
    has) and `devices` is not enforced (CUDA_VISIBLE_DEVICES only).
    """

    job_id: int
    run: int
    user: str
    uid: int
    gid: int
    groups: list[int] | None
    home: str
    workdir: str
    script: str
    argv: list[str]
    env: dict[str, str]
    stdout: str
    stderr: str
    stdin: str | None = None
    open_mode: Literal["truncate", "append"] = "truncate"
    time_limit_s: int | None = None
    kill_wait_s: int = 30
    signal: tuple[int, int] | None = None
    mem_limit_mb: int | None = None
    signal_batch_only: bool = False
    node: str | None = None
    isolation: Literal["plain", "systemd"] = "plain"
    cpu_ids: list[int] | None = None
    devices: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LaunchRequest:
        data = dict(data)
        if data.get("signal") is not None:
            data["signal"] = tuple(data["signal"])
        return cls(**data)


@dataclass(frozen=True)
class LaunchInfo:
    """A started run: the job's pid (also its process group) and start time (unix s).

    `pid == 0` means the run never started; `poll` then reports it EXITED with an error.
    """

    pid: int
    start_time: float
    jobdir: str


@dataclass(frozen=True)
class RunStatus:
    """What `poll` knows about one run.

    `state`: RUNNING (supervisor alive, no exit yet; `pid` 0 while it is still starting),
    EXITED (`exit.json` written: `final_state`, `exit_code`, `signal`, `end_time`,
    `requested` = the action that ended it or None, `rusage`, `error`), or LOST (no
    supervisor and no exit status: the daemon marks the job NODE_FAIL).
    """

    state: Literal["RUNNING", "EXITED", "LOST"]
    job_id: int
    run: int
    pid: int = 0
    start_time: float | None = None
    final_state: str | None = None
    exit_code: int = 0
    signal: int = 0
    end_time: float | None = None
    requested: str | None = None
    rusage: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def exit_code_str(self) -> str:
        """Slurm's `exit:signal` pair, e.g. "1:0", "0:9"."""
        return f"{self.exit_code}:{self.signal}"


# ---------------------------------------------------------------- spool helpers


def jobdir_path(spool_dir: str, job_id: int, run: int) -> str:
    return os.path.join(spool_dir, f"job.{int(job_id)}.{int(run)}")


def write_json_atomic(path: str, data: dict[str, Any], mode: int = 0o600) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when the file does not exist."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22).

    Unlike psutil's create_time it does not move when the wall clock is stepped, so it
    identifies a process exactly (with the boot id). None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return int(fields[19])


def process_matches(pid: int, ticks: int | None, create_time: float | None = None) -> bool:
    """True when `pid` is a live (non-zombie) process with start `ticks` (or, lacking
    those, psutil `create_time` within CREATE_TIME_TOLERANCE_S)."""
    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        if ticks is not None:
            if start_ticks(pid) != ticks:
                return False
        elif create_time is None or abs(proc.create_time() - create_time) > CREATE_TIME_TOLERANCE_S:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _lock_is_held(jobdir: str) -> bool:
    """True when some process holds the supervisor lock of `jobdir`."""
    try:
        fd = os.open(os.path.join(jobdir, LOCK), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def supervisor_alive(jobdir: str, started: dict[str, Any] | None) -> bool:
    """Whether the run's supervisor is alive (same boot, pid and create time match)."""
    if started is None:
        return _lock_is_held(jobdir)
    if started.get("boot_id") and started["boot_id"] != boot_id():
        return False
    return process_matches(int(started["supervisor_pid"]), started.get("supervisor_start_ticks"),
                           started.get("supervisor_start_time"))


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
    if proc.returncode != 0:
        log.warning("job unit already there, waiting for it unit=%s", isolation.unit_name(req.job_id))
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    unit = isolation.unit_name(req.job_id)
    next_check = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        info = _existing_info(jobdir)
        if info is not None:
            return info
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + 0.5
            if not _lock_is_held(jobdir) and _unit_gone(unit):
                break
        time.sleep(0.01)
    info = _existing_info(jobdir)
    if info is None:
        raise LaunchError(f"unit {unit} did not start the job; see {jobdir}/{LOG}")
    return info


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC",
                         "WATCHDOG_PID")}


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
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b""
        readable, _, _ = select.select([fd], [], [], left)
        if readable:
            return os.read(fd, 16)


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
        if info is not None or not _lock_is_held(jobdir) or time.monotonic() > deadline:
            return info
        time.sleep(0.01)


def launch(req: LaunchRequest, spool_dir: str) -> LaunchInfo:
    """Start run `req.run` of job `req.job_id` under a detached supervisor.

    Returns once the supervisor has written `started.json` (or recorded a failure
    before the job started: `pid == 0`). Idempotent: when the run's directory exists,
    no second copy is started and the existing run's info is returned; only a run
    whose supervisor died before the job was let to exec is started (for the first time).
    Raises LaunchError when the supervisor cannot be brought up.
    """
    _prepare_spool(spool_dir)
    jobdir = jobdir_path(spool_dir, req.job_id, req.run)
    if not os.path.isdir(jobdir):
        staging = _write_staging(req, spool_dir)
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
            return RunStatus("RUNNING", job_id, run, pid=int(started["pid"]),
                             start_time=float(started["start_time"]))
        # the supervisor may have written exit.json and exited between the two reads
    return RunStatus("LOST", job_id, run, pid=int(started["pid"]) if started else 0,
                     start_time=float(started["start_time"]) if started else None)


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
        return os.path.exists(os.path.join(jobdir, EXIT)) or (started is None and _lock_is_held(jobdir))
    if started is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(started["supervisor_pid"]), _signal.SIGUSR1)
    return True


def _signal_orphans(jobdir: str, sig: int) -> None:
    """Signal the processes of a run whose supervisor is gone (LOST): members of the
    job's process group that belong to the job's user (the daemon's user when it is not
    root), so that a reused process group id never hits a stranger."""
    started = read_json(os.path.join(jobdir, STARTED))
    req = read_json(os.path.join(jobdir, REQUEST))
    if started is None or req is None:
        return
    pgid = int(started["pgid"])
    uid = int(req["uid"]) if os.geteuid() == 0 else os.getuid()
    for proc in psutil.process_iter(["pid", "uids"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["uids"].real == uid:
                os.kill(proc.pid, sig)
        except (ProcessLookupError, psutil.Error, OSError):
            continue


#: What slurmstepd appends to `*** JOB N ON node CANCELLED AT time` in the job's error
#: file, per cause of the end (`terminate`'s `cause`; None: no line).
CANCEL_NOTES: dict[str, str | None] = {
    "cancel": "", "preempt": " DUE TO PREEMPTION", "requeue": " DUE TO JOB REQUEUE",
    "timeout": " DUE TO TIME LIMIT", "node_fail": None}


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
