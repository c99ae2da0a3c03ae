"""Name the real cause of an environmental failure, and log each failure once.

The daemon's loops meet errors that are nobody's job's fault: a full disk, a database
lock held too long, a database that does not answer. `cause` tells them apart so that
the log says which one it is in plain words, and `OnceLog` keeps a loop that meets the
same failure every pass (four times a second) from writing it every pass.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Any

NO_SPACE = "no space left on device"
LOCK_TIMEOUT = "database lock timeout"
UNREACHABLE = "database unreachable"

_NO_SPACE_TEXT = ("no space left", "disk is full", "database or disk is full", "could not extend file",
                  "could not write to file", "disk full")
_LOCK_TEXT = ("database is locked", "lock timeout", "lock_timeout", "could not obtain lock",
              "canceling statement due to lock timeout", "deadlock detected")
_UNREACHABLE_TEXT = ("connection refused", "could not connect", "server closed the connection",
                     "connection is closed", "terminating connection", "unable to open database file",
                     "no such host", "connection timed out", "the database system is")


def cause(exc: BaseException, paths: tuple[str, ...] = ()) -> str | None:
    """NO_SPACE, LOCK_TIMEOUT or UNREACHABLE when `exc` (or what it wraps) is one of
    those environmental failures, else None (a bug, or a bad job). SQLite reports some
    writes on a full disk only as a "disk I/O error": with `paths` given, such an error
    is NO_SPACE when one of them has (almost) no space left."""
    if paths and _io_error(exc) and any(_nearly_full(p) for p in paths):
        return NO_SPACE
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return NO_SPACE
        text = str(e).lower()
        if any(t in text for t in _NO_SPACE_TEXT):
            return NO_SPACE
        if any(t in text for t in _LOCK_TEXT):
            return LOCK_TIMEOUT
        if any(t in text for t in _UNREACHABLE_TEXT) and _is_database_error(e):
            return UNREACHABLE
        e = getattr(e, "orig", None) or e.__cause__ or e.__context__
    return None


def _io_error(exc: BaseException) -> bool:
    e: BaseException | None = exc
    for _ in range(8):
        if e is None:
            return False
        if (isinstance(e, OSError) and e.errno == errno.EIO) or "disk i/o error" in str(e).lower():
            return True
        e = getattr(e, "orig", None) or e.__cause__ or e.__context__
    return False


def _nearly_full(path: str, least_bytes: int = 1 << 20) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < least_bytes


def _is_database_error(e: BaseException) -> bool:
    mod = type(e).__module__ or ""
    return mod.startswith(("sqlalchemy", "sqlite3", "psycopg"))


def is_disk_full(exc: BaseException) -> bool:
    return cause(exc) == NO_SPACE


class OnceLog:
    """Log a message the first time its key is seen; `clear(key)` when the condition
    ends, so that a later recurrence is logged again (and `clear` logs the recovery)."""

    def __init__(self, logger: logging.Logger):
        self.log = logger
        self._seen: set[Any] = set()

    def __call__(self, key: Any, level: int, msg: str, *args: Any, exc_info: bool = False) -> bool:
        """Log `msg % args` at `level` unless `key` was logged before; True when logged."""
        if key in self._seen:
            return False
        self._seen.add(key)
        self.log.log(level, msg, *args, exc_info=exc_info)
        return True

    def clear(self, key: Any, msg: str | None = None, *args: Any) -> None:
        if key in self._seen:
            self._seen.discard(key)
            if msg:
                self.log.info(msg, *args)

    def clear_where(self, pred: Any) -> None:
        """Forget every key for which `pred(key)` is true (e.g. the keys of ended jobs)."""
        self._seen = {k for k in self._seen if not pred(k)}
