"""The run directories of the spool and what is recorded in them: shared by the launcher
(the daemon's side) and the supervisor (the run's side), which imports nothing else of
the daemon.

Spool layout, one directory per run (`run` = restart count of the job)::

    <spool>/job.<id>.<run>/          root-owned 0711 when the daemon is root (0700 otherwise)
        request.json                 the LaunchRequest (0600; it holds the job's environment)
        slurm_script                 the script, 0700, owned by the job's user
        supervisor.lock              flock held by the supervisor for its whole life
        supervisor.log               the supervisor's own stderr
        started.json                 {pid, pgid, start_time, create_time, start_ticks, supervisor_pid,
                                      supervisor_start_time, supervisor_start_ticks, boot_id,
                                      pid_ns, unit, invocation_id}
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
at reaping (elapsed = end - start).

Run identity: a run's supervisor is alive exactly while `supervisor.lock` is locked (an
exclusive flock taken before the job may start, held until the supervisor exits; the
kernel drops it when the process dies, even by SIGKILL). A flock belongs to the file, so
the daemon and the supervisor agree on it from any mount namespace, pid namespace or
boot-id view that shares the spool's file system (a daemon under `ProtectKernelTunables=`
or in systemd-nspawn sees another boot id than its job units; a daemon in another pid
namespace cannot see their pids). The recorded pids (+ start ticks since boot, boot id,
pid namespace `pid_ns`; for isolation "systemd" also the transient unit `unit` and its
`invocation_id`) are what the supervisor saw: the daemon signals or samples them only
from the same pid namespace, and judges liveness by them only where the file system
cannot tell whether the lock is held. psutil's `create_time`, also stored, can be off by up to a second and moves with
wall-clock steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any, Literal

import psutil

REQUEST, SCRIPT, LOCK, LOG = "request.json", "slurm_script", "supervisor.lock", "supervisor.log"
STARTED, EXIT, COLLECTED, CONTROL_PREFIX = "started.json", "exit.json", "collected", "control."
JOBDIR_RE = re.compile(r"^job\.(\d+)\.(\d+)$")
#: How long `launch` waits for the supervisor to record the start (seconds).
LAUNCH_TIMEOUT_S = 60.0
#: Tolerance when comparing a persisted process create time with psutil's (seconds).
CREATE_TIME_TOLERANCE_S = 0.05
#: Variables of the daemon's own service that reach neither a supervisor nor a job.
DAEMON_ONLY_ENV = ("INVOCATION_ID", "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
                   "JOURNAL_STREAM", "WATCHDOG_USEC", "WATCHDOG_PID")

Reason = Literal["cancel", "preempt", "timeout", "node_fail"]
#: final state for each termination reason
REASON_STATE = {"cancel": "CANCELLED", "preempt": "PREEMPTED", "timeout": "TIMEOUT", "node_fail": "NODE_FAIL"}

#: What slurmstepd appends to `*** JOB N ON node CANCELLED AT time` in the job's error
#: file, per cause of the end (`terminate`'s `cause`; None: no line).
CANCEL_NOTES: dict[str, str | None] = {
    "cancel": "", "preempt": " DUE TO PREEMPTION", "requeue": " DUE TO JOB REQUEUE",
    "timeout": " DUE TO TIME LIMIT", "node_fail": None, "idle": " DUE TO GPU IDLE TIMEOUT"}


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
    `batchd.node.isolation.unit_command`): the kernel then enforces `mem_limit_mb` (MemoryMax),
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
    """This process's view of the boot id ("" where it cannot be read). Under
    systemd-nspawn or `ProtectKernelTunables=` two processes of one boot may see
    different ones: it is a record, never the proof that a run is gone."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's pid namespace, e.g. "pid:[4026531836]" ("" where it cannot be
    read). Pids recorded in another one name other processes (or none) here."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def pids_are_local(started: dict[str, Any] | None) -> bool:
    """Whether the pids in `started` name the same processes in this process's view
    (recorded in this pid namespace; records without `pid_ns` predate it: assumed so)."""
    if not started:
        return False
    ns = started.get("pid_ns")
    return not ns or ns == pid_namespace()
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


def lock_state(jobdir: str) -> bool | None:
    """True when some process holds the supervisor lock of `jobdir`, False when none
    does (or there is no lock file), None when the file system cannot tell (flock
    unsupported there)."""
    try:
        fd = os.open(os.path.join(jobdir, LOCK), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


def lock_is_held(jobdir: str) -> bool:
    """True when some process holds the supervisor lock of `jobdir`."""
    return bool(lock_state(jobdir))


def supervisor_alive(jobdir: str, started: dict[str, Any] | None) -> bool:
    """Whether the run's supervisor is alive: its lock is held (see the module
    docstring, "Run identity"). A boot id or pid namespace other than the daemon's
    changes nothing. Only where the lock cannot be tested are the recorded pid, start
    ticks and boot id compared (a different boot id then means gone)."""
    held = lock_state(jobdir)
    if held is not None or started is None:
        return bool(held)
    if started.get("boot_id") and started["boot_id"] != boot_id():
        return False
    if not pids_are_local(started):
        return False
    return process_matches(int(started["supervisor_pid"]), started.get("supervisor_start_ticks"),
                           started.get("supervisor_start_time"))


def supervisor_here(started: dict[str, Any] | None) -> int:
    """The supervisor's pid when it may be signalled from this process (same pid
    namespace and start ticks: never a stranger that got the pid), else 0."""
    if not pids_are_local(started):
        return 0
    assert started is not None
    pid = int(started.get("supervisor_pid") or 0)
    ticks, ctime = started.get("supervisor_start_ticks"), started.get("supervisor_start_time")
    return pid if process_matches(pid, ticks, ctime) else 0
