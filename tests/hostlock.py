"""What tests share with every other process on the machine: locks around host-wide state.

The suite runs in several pytest-xdist workers at once (docs/testing.md), and another
checkout's run may share the machine. Most of what a test makes is its own (temporary
directories, uuid-named databases and users); what is not is serialized here:

- `host_lock(name)`: an exclusive `flock` on `<tmp>/batchd-tests-<name>.lock`, held for a
  block, across processes (workers, other runs of the suite). Used around host settings a
  test changes and restores (`fs.protected_symlinks`).
- `account_tool(argv)`: `useradd`, `userdel`, `groupadd`, `groupdel` one at a time, under
  `host_lock("passwd")`; shadow's tools take /etc/passwd's lock without waiting ("cannot lock
  /etc/passwd; try again later"), so two at once can fail. A tool that fails on that lock
  anyway (held by a process outside the suite) is tried again for up to `retry_s`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    """Hold the machine-wide test lock `name` for the block (waits for it)."""
    path = os.path.join(tempfile.gettempdir(), f"batchd-tests-{name}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _lock_busy(stderr: str) -> bool:
    return "cannot lock" in stderr or "try again later" in stderr


def account_tool(*argv: str, check: bool = True, retry_s: float = 30.0) -> subprocess.CompletedProcess:
    """Run a shadow tool (`useradd NAME`, `userdel NAME`, ...) under the passwd lock; with
    `check`, AssertionError (its stderr) when it fails for another reason than a busy lock
    or still fails on the lock after `retry_s`."""
    deadline = time.monotonic() + retry_s
    while True:
        with host_lock("passwd"):
            r = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
        if r.returncode == 0 or not _lock_busy(r.stderr) or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # a process outside the suite holds /etc/passwd's lock: wait for it
    if check:
        assert r.returncode == 0, f"{list(argv)} failed rc={r.returncode}: {r.stderr.strip()}"
    return r
