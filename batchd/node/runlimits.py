"""What a supervisor does to a running job on request or at a limit.

Control requests (files named CONTROL_PREFIX... in the job directory, written by
`batchd.node.runcontrol`): terminate (signal, grace, SIGKILL; the final state follows the
reason, REASON_STATE), signal, and a new time limit. The time limit is armed from the
job's start (`_set_time_limit`, with `--signal`'s signal before it) and the memory limit
is checked on the RSS of the whole tree (`_check_memory`: OUT_OF_MEMORY; in a systemd
unit the kernel enforces it and this only records the peak, and `protect_from_oom`
keeps the kernel's OOM killer off the supervisor). `RunControl` is a base of
`batchd.node.supervisor.Supervisor`, which owns the state declared on it and calls these
from its loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from typing import TYPE_CHECKING

import psutil

from batchd.node.jobexec import write_stepd_error, write_stepd_note
from batchd.node.jobtree import JobTree
from batchd.node.spool import CONTROL_PREFIX, REASON_STATE, LaunchRequest, read_json

log = logging.getLogger(__name__)


def protect_from_oom() -> None:
    """In a unit the supervisor shares the job's cgroup and memory limit: make sure the
    kernel's OOM killer picks the job, never the process that records its end."""
    with contextlib.suppress(OSError):
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("-1000")


class RunControl(JobTree):
    """Control requests, time limit and memory limit; see the module docstring."""

    jobdir: str
    unit: bool
    req: LaunchRequest | None
    t0: float  # monotonic time of the job's start
    requested: str | None  # the termination asked for (a REASON_STATE key, or "oom")
    kill_at: float | None
    limit_at: float | None
    sig_at: float | None
    signal_sent: bool
    peak_rss_kb: int

    if TYPE_CHECKING:
        def _path(self, name: str) -> str: ...

        def _restore_dir(self) -> bool: ...

    def _stepd_note(self, cause: str) -> None:
        """slurmstepd's CANCELLED line in the job's error file (`jobexec.write_stepd_note`),
        unless the batch shell is already gone."""
        assert self.req is not None
        if not self.reaped:
            write_stepd_note(self.req, cause)

    def _begin_termination(self, reason: str, sig: int, grace_s: float, batch_only: bool = False,
                           cause: str | None = None) -> None:
        if self.requested is None:
            self.requested = reason
            self._stepd_note(cause or reason)
        log.info("job signalled job_id=%s reason=%s signal=%s grace_s=%s",
                 self.req.job_id if self.req else "?", reason, sig, grace_s)
        self._signal_job(sig, batch_only)
        if sig not in (signal.SIGKILL, signal.SIGCONT, signal.SIGSTOP):
            self._signal_job(signal.SIGCONT, batch_only)  # a stopped job must see it
        deadline = time.monotonic() + max(0.0, grace_s)
        self.kill_at = deadline if self.kill_at is None else min(self.kill_at, deadline)

    def _set_time_limit(self, limit_s: int | None) -> None:
        """(Re)arm the time limit, counted from the job's start; None or <= 0: none.
        `--signal` is re-armed with it unless it was already sent."""
        assert self.req is not None
        limit = limit_s if limit_s is not None and limit_s > 0 else None
        self.limit_at = self.t0 + limit if limit else None
        self.sig_at = None
        if limit and self.req.signal and not self.signal_sent:
            self.sig_at = self.t0 + max(0, limit - int(self.req.signal[1]))

    def _handle_controls(self) -> None:
        assert self.req is not None
        try:
            listing = os.listdir(self.jobdir)
        except FileNotFoundError:
            self._restore_dir()  # removed under the running job: the daemon must still find it
            return
        except OSError as exc:
            log.warning("job directory unreadable error=%s", exc)
            return
        names = sorted(n for n in listing if n.startswith(CONTROL_PREFIX) and n.endswith(".json"))
        for name in names:
            try:
                data = read_json(self._path(name))
                os.unlink(self._path(name))
            except (OSError, ValueError) as exc:
                log.warning("control request unreadable file=%s error=%s", name, exc)
                continue
            if not data:
                continue
            log.info("control request %s", data)
            try:
                sig = int(data.get("signal") or signal.SIGTERM)
            except (TypeError, ValueError):
                sig = int(signal.SIGTERM)
            if data.get("action") == "terminate" and data.get("reason") in REASON_STATE:
                grace = data.get("grace_s")
                self._begin_termination(data["reason"], sig, self.req.kill_wait_s if grace is None else grace,
                                        bool(data.get("batch_only")), data.get("cause"))
            elif data.get("action") == "time_limit" and self.requested is None:
                self._set_time_limit(data.get("time_limit_s"))
            elif data.get("action") == "signal":
                self._signal_job(sig, bool(data.get("batch_only")))

    def _check_memory(self) -> None:
        assert self.req is not None and self.req.mem_limit_mb is not None
        rss = 0
        for proc in self._tree():
            with contextlib.suppress(psutil.Error):
                rss += proc.memory_info().rss
        self.peak_rss_kb = max(self.peak_rss_kb, rss // 1024)
        if not self.unit and rss > self.req.mem_limit_mb * 1024 * 1024 and self.requested != "oom":
            log.info("job over memory limit rss_mb=%s limit_mb=%s", rss >> 20, self.req.mem_limit_mb)
            # slurmstepd's line when its memory accounting kills a step (Slurm 22.05 wording)
            write_stepd_error(self.req, f"StepId={self.req.job_id}.batch exceeded memory limit "
                                        f"({rss} > {self.req.mem_limit_mb * 1024 * 1024}), being killed")
            self.requested = "oom"
            self._signal_job(signal.SIGKILL)
            self.kill_at = time.monotonic() + 1.0
