"""The job's process tree, as its supervisor sees it: signal it, reap it, kill what is left.

The supervisor is a child subreaper (`set_subreaper`), so every process of the job,
even one that left the job's process group, is one of its descendants: `_signal_job`
reaches them all, `_reap` waits for the batch shell (`os.wait4`, for its rusage) and
reaps adopted orphans on the way, and `_kill_leftovers` SIGKILLs and reaps what the
batch shell left behind, for at most LEFTOVER_WAIT_S seconds. `JobTree` is a base of
`batchd.node.supervisor.Supervisor`, which sets `child` (the batch shell's pid, also its
process group id) and `reaped`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from typing import Any

import psutil

#: How long to wait for leftover processes to die after the batch shell ended (s).
LEFTOVER_WAIT_S = 2.0
_PR_SET_CHILD_SUBREAPER = 36


def set_subreaper() -> None:
    """Make this process a child subreaper (orphans of the job are re-parented to it,
    not to init); where the kernel refuses, nothing happens."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class JobTree:
    """Signalling and reaping of the job's processes; see the module docstring."""

    child: int  # the batch shell's pid (and process group id)
    reaped: bool  # the batch shell has been waited for

    def _tree(self) -> list[psutil.Process]:
        """Every live descendant of the supervisor (the job and what it left behind)."""
        try:
            return psutil.Process().children(recursive=True)
        except psutil.Error:
            return []

    def _signal_job(self, sig: int, batch_only: bool = False) -> None:
        """`sig` to the batch shell only, or to its process group and every other
        descendant (processes that left the group). Gone processes are ignored."""
        if batch_only:
            if not self.reaped:  # once reaped, its pid (and group id) may be reused
                with contextlib.suppress(OSError):  # gone, or a signal the kernel refuses
                    os.kill(self.child, sig)
            return
        group_done = False
        if not self.reaped:
            with contextlib.suppress(OSError):
                os.killpg(self.child, sig)
                group_done = True
        for proc in self._tree():  # as subreaper, every process of the job is in the tree
            with contextlib.suppress(OSError, psutil.Error):
                if not (group_done and os.getpgid(proc.pid) == self.child):
                    os.kill(proc.pid, sig)

    def _reap(self, block: bool = False) -> tuple[int, Any] | None:
        """Reap adopted orphans; return (status, rusage) once the batch shell is reaped."""
        while True:
            flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
            try:
                info = os.waitid(os.P_ALL, 0, flags)
            except ChildProcessError:
                return None
            except InterruptedError:
                continue
            if info is None or info.si_pid == 0:
                return None
            if info.si_pid == self.child:
                _pid, status, rusage = os.wait4(self.child, 0)
                self.reaped = True
                return status, rusage
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)

    def _kill_leftovers(self) -> None:
        """SIGKILL what the batch shell left behind, and reap it (bounded wait)."""
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        while time.monotonic() < deadline:
            self._signal_job(signal.SIGKILL)
            while True:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return
                if pid == 0:
                    break
            time.sleep(0.02)
