"""Group commit: concurrent small write transactions share one BEGIN .. COMMIT (on SQLite,
one fsync of the WAL) instead of queueing for the write lock one by one.

A caller hands `GroupCommit.run` a body (a function of the open transaction's connection
or session); the first caller that finds no group being committed becomes the leader: it
takes every body queued so far, opens one transaction (`tx`, the store's write
transaction), runs each body in its own SAVEPOINT (a group of one needs none: its
transaction is its own), commits once, and hands every caller its own result or exception. Callers
that arrive meanwhile queue for the next group. A body that raises rolls back its
savepoint only; a failed COMMIT is every body's failure. No caller returns before the
COMMIT of its body returned, so an acknowledged result is as durable as with a
transaction of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


class _Item:
    __slots__ = ("body", "done", "result", "error")

    def __init__(self, body: Callable[[Any], Any]):
        self.body = body
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class GroupCommit:
    """Bodies of many threads, one transaction per group (module docstring)."""

    def __init__(self, tx: Callable[[], AbstractContextManager[Any]]):
        self._tx = tx
        self._cv = threading.Condition()
        self._queue: list[_Item] = []
        self._busy = False

    def run(self, body: Callable[[Any], Any]) -> Any:
        """`body(conn)` inside a group's transaction; its result once that committed."""
        item = _Item(body)
        with self._cv:
            self._queue.append(item)
            while not item.done and self._busy:
                self._cv.wait()
            if not item.done:  # still queued and nobody commits: lead the next group
                batch, self._queue, self._busy = self._queue, [], True
        if not item.done:
            try:
                self._commit(batch)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
        if item.error is not None:
            raise item.error
        return item.result

    def _commit(self, batch: list[_Item]) -> None:
        if len(batch) == 1:  # alone: no savepoint, a failure rolls the transaction back
            it = batch[0]
            try:
                with self._tx() as s:
                    it.result = it.body(s)
            except BaseException as e:
                it.error, it.result = e, None
                if not isinstance(e, Exception):
                    raise
            finally:
                it.done = True
            return
        try:
            with self._tx() as s:
                for it in batch:
                    try:
                        with s.begin_nested():
                            it.result = it.body(s)
                    except Exception as e:  # this body's own failure: its savepoint is rolled back
                        it.error = e
        except BaseException as e:  # BEGIN or COMMIT failed: no body of the group was stored
            for it in batch:
                if it.error is None:
                    it.error, it.result = e, None
            if not isinstance(e, Exception):
                raise
        finally:
            for it in batch:
                it.done = True
