"""Giving freed heap memory back to the operating system.

A large reply (`sacct -S` over a year of jobs) is built from many small Python objects and
one large encoded body; once they are freed, glibc keeps the pages in its arenas (one per
thread that allocated) and the daemon's RSS stays at its peak. `malloc_trim(0)` returns the
free pages of every arena. Elsewhere than glibc (musl, macOS) `give_back` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

#: replies at least this long (bytes, encoded) are followed by a trim once sent
TRIM_AFTER_BYTES = 4 * 1024 * 1024


def _load() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_trim = _load()


def give_back() -> bool:
    """Return the free heap pages to the system; True when the C library can (glibc)."""
    if _trim is None:
        return False
    _trim(0)
    return True
