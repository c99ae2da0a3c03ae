"""Watch the runs of this node's spool: their state, the ones left to finish, their end.

`poll` reads one run's state from its records (`batchd.node.spool`): EXITED once `exit.json`
is there, RUNNING while its supervisor holds the run's lock, else LOST. `list_runs`
names the runs not yet collected (what a restarted daemon must finish), `collect` marks
one done once its usage is stored, `purge_collected` removes old collected directories,
and `find_supervisors` finds live supervisors by their command lines. Nothing here
starts or stops a process. The launcher (`batchd.node.launcher`) re-exports these names.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import Any

import psutil

from batchd.node.spool import (
    COLLECTED,
    EXIT,
    JOBDIR_RE,
    STARTED,
    RunStatus,
    boot_id,
    jobdir_path,
    pid_namespace,
    pids_are_local,
    read_json,
    supervisor_alive,
)

log = logging.getLogger(__name__)


def find_supervisors(spool_dir: str) -> dict[tuple[int, int], int]:
    """(job_id, run) -> pid of every live supervisor of a run of `spool_dir`, from the
    processes' command lines (`... batchd.node.supervisor [options] <spool>/job.<id>.<run>`),
    whether or not the run's directory still exists. Only supervisors this process can
    see: none of those in another pid namespace (their directory's lock is the test that
    reaches them, see `batchd.node.spool`)."""
    spool = os.path.abspath(spool_dir)
    found: dict[tuple[int, int], int] = {}
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "batchd.node.supervisor" not in cmd or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            path = cmd[-1]
        except (psutil.Error, IndexError, TypeError):
            continue
        m = JOBDIR_RE.match(os.path.basename(path))
        if m and os.path.dirname(path) == spool:
            found[(int(m.group(1)), int(m.group(2)))] = int(proc.info["pid"])
    return found


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


#: run directories whose "alive in another view" line was logged; a run's entry goes when
#: it is collected
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


class SpoolIndex:
    """`list_runs` for a node agent's pass, several times a second: the spool directory is
    listed again only when it changed (making or removing a run directory changes its
    mtime), when its mtime is too recent to tell a later change from it (a change within
    the same clock tick), or every RELIST_S; a run once seen collected is not looked at
    again. So a pass costs a stat per run not yet collected, not per run ever made."""

    #: relist at least this often (seconds), whatever the mtime says
    RELIST_S = 30.0
    #: an mtime closer to the clock than this (seconds) is not trusted to be the last one
    RECENT_S = 2.0

    def __init__(self, spool_dir: str):
        self.spool_dir = spool_dir
        self._stamp: tuple[int, int] | None = None
        self._listed = 0.0
        self._runs: list[tuple[int, int]] = []
        self._collected: set[tuple[int, int]] = set()
        self.listings = 0  # how many times the directory was listed (for tests)

    def runs(self) -> list[tuple[int, int]]:
        """(job_id, run) of every run directory not yet collected, sorted."""
        try:
            st = os.stat(self.spool_dir)
        except FileNotFoundError:
            self._stamp, self._runs = None, []
            return []
        now = time.time()
        stamp = (st.st_mtime_ns, st.st_ino)
        if (stamp != self._stamp or now - self._listed >= self.RELIST_S
                or now - st.st_mtime_ns / 1e9 < self.RECENT_S):
            runs = []
            for name in os.listdir(self.spool_dir):
                m = JOBDIR_RE.match(name)
                if m:
                    runs.append((int(m.group(1)), int(m.group(2))))
            self._runs = sorted(runs)
            self._collected.intersection_update(runs)
            self._stamp, self._listed = stamp, now
            self.listings += 1
        out = []
        for job_id, run in self._runs:
            if (job_id, run) in self._collected:
                continue
            if os.path.exists(os.path.join(jobdir_path(self.spool_dir, job_id, run), COLLECTED)):
                self._collected.add((job_id, run))
                continue
            out.append((job_id, run))
        return out


def collect(spool_dir: str, job_id: int, run: int) -> None:
    """Mark a run collected (its usage record is stored). The files stay for debugging
    until `purge_collected`; the directory keeps the run from ever being started again."""
    jobdir = jobdir_path(spool_dir, job_id, run)
    os.close(os.open(os.path.join(jobdir, COLLECTED), os.O_WRONLY | os.O_CREAT, 0o600))
    _noted_views.discard(jobdir)  # the run is over: its note is no longer needed


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
