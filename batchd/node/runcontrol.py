"""Stop, signal or re-limit a running run through its supervisor's control requests.

`terminate`, `send_signal` and `set_time_limit` write a control request
(a `CONTROL_PREFIX` file) into the run's directory and wake its supervisor with SIGUSR1
where its pid is this process's to signal (elsewhere it rescans every CONTROL_SCAN_S).
A run already gone is never an error; a LOST run (its supervisor dead) has its
processes signalled directly: its process group, filtered by the job's user, and its
systemd unit when it has one. The launcher (`batchd.node.launcher`) re-exports these names.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import signal as _signal
import subprocess
import time
from typing import Any

import psutil

from batchd.node.spool import (
    CONTROL_PREFIX,
    EXIT,
    REASON_STATE,
    REQUEST,
    STARTED,
    Reason,
    jobdir_path,
    lock_is_held,
    pids_are_local,
    read_json,
    supervisor_alive,
    supervisor_here,
    write_json_atomic,
)

log = logging.getLogger(__name__)

_control_seq = itertools.count()


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
