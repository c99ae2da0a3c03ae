"""Who is the controller, and how daemons wake each other.

SQLite (one node): this daemon is always the controller; wake-ups are in-process.

PostgreSQL (several nodes): the controller role is a session-level advisory lock held
on a dedicated connection. PostgreSQL releases it when that connection dies (process
killed, machine lost, network cut), so another daemon's next `try_acquire` takes over
within its polling period. The holder checks its connection before every cycle and
steps down when it is gone. LISTEN/NOTIFY on the channel `batchd` carries wake-ups:
a submit on any node wakes the controller; a cycle that started jobs wakes the agents.
No home-made consensus.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

LOCK_KEY = 0x62617463  # "batc": the advisory lock id of the controller role
CHANNEL = "batchd"


def _pg_conninfo(url: str) -> str:
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix):]
    return url


class Leadership:
    """The controller role. `is_leader()` is cheap; `poll()` tries to take the role
    (or checks it is still held) and returns whether this daemon holds it."""

    def __init__(self, url: str, node: str):
        self.url = url
        self.node = node
        self.pg = url.startswith("postgresql")
        self._conn: Any = None
        self._leader = not self.pg
        self.since: float | None = time.time() if not self.pg else None

    def is_leader(self) -> bool:
        return self._leader

    def poll(self) -> bool:
        if not self.pg:
            return True
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                # keepalives both ways: the server frees the lock of a controller whose
                # machine vanished within ~15 s, and this side notices a dead link as fast
                self._conn = psycopg.connect(_pg_conninfo(self.url), autocommit=True,
                                             application_name=f"batchd-controller:{self.node}",
                                             connect_timeout=5, keepalives=1, keepalives_idle=5,
                                             keepalives_interval=2, keepalives_count=3)
                for setting in ("tcp_keepalives_idle = 5", "tcp_keepalives_interval = 2",
                                "tcp_keepalives_count = 3", "statement_timeout = 5000"):
                    self._conn.execute(f"SET {setting}")
                self._leader = False
            if self._leader:
                self._conn.execute("SELECT 1")
                return True
            got = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]
            if got:
                self._leader = True
                self.since = time.time()
                log.info("controller role taken node=%s", self.node)
            return self._leader
        except Exception as e:  # the connection is gone: the lock with it
            if self._leader:
                log.error("controller role lost node=%s error=%s", self.node, e)
            self._leader = False
            self.since = None
            try:
                if self._conn is not None:
                    self._conn.close()
            except Exception:
                pass
            self._conn = None
            return False

    def holder(self) -> dict[str, Any]:
        """Who holds the role: {"node", "pid", "since"} from pg_stat_activity (PostgreSQL),
        or this daemon (SQLite)."""
        if not self.pg:
            return {"node": self.node, "pid": os.getpid(), "since": self.since, "host": socket.gethostname()}
        import psycopg

        with psycopg.connect(_pg_conninfo(self.url), autocommit=True, connect_timeout=5) as c:
            row = c.execute(
                "SELECT a.application_name, a.pid, a.backend_start, a.client_addr::text "
                "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objid = %s "
                # advisory locks are per database, pg_locks is the server's: another
                # cluster's controller on the same server is not this one's
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (LOCK_KEY,)).fetchone()
        if row is None:
            return {"node": None, "pid": None, "since": None}
        name = row[0].split(":", 1)[1] if ":" in row[0] else row[0]
        return {"node": name, "pid": row[1], "since": row[2].timestamp() if row[2] else None, "host": row[3]}

    def release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
        self._conn = None
        self._leader = not self.pg


class Notifier:
    """LISTEN/NOTIFY wake-ups between daemons (PostgreSQL only; a no-op on SQLite)."""

    def __init__(self, url: str, on_notify: Callable[[str], None]):
        self.url = url
        self.pg = url.startswith("postgresql")
        self.on_notify = on_notify
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._notify_lock = threading.Lock()
        self._notify_conn: Any = None

    def start(self) -> None:
        if not self.pg:
            return
        self._thread = threading.Thread(target=self._listen, name="listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._notify_lock:
            self._close_notify_conn()

    def notify(self, payload: str) -> None:
        """NOTIFY on one connection kept open for it (opened on first use, reopened once
        after an error): a connection per call cost a PostgreSQL backend start per
        submission. Callers are serialized; a failure is logged, not raised."""
        if not self.pg:
            return
        import psycopg

        with self._notify_lock:
            for attempt in (1, 2):
                try:
                    if self._notify_conn is None or self._notify_conn.closed:
                        self._notify_conn = psycopg.connect(_pg_conninfo(self.url), autocommit=True,
                                                            connect_timeout=5)
                    self._notify_conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
                    return
                except Exception as e:
                    self._close_notify_conn()
                    if attempt == 2:
                        log.warning("notify failed payload=%s error=%s", payload, e)

    def _close_notify_conn(self) -> None:
        if self._notify_conn is not None:
            try:
                self._notify_conn.close()
            except Exception:
                pass
        self._notify_conn = None

    def _listen(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(_pg_conninfo(self.url), autocommit=True, connect_timeout=5) as c:
                    c.execute(f"LISTEN {CHANNEL}")
                    # poll-based (no select(): the daemon's descriptors may pass 1024)
                    sel = selectors.DefaultSelector()
                    sel.register(c.fileno(), selectors.EVENT_READ)
                    while not self._stop.is_set():
                        # wait on the socket so that a dead connection is noticed
                        ready = sel.select(1.0)
                        if ready:
                            for n in c.notifies(timeout=0):
                                self.on_notify(n.payload)
                        else:
                            c.execute("SELECT 1")
            except Exception as e:
                log.warning("listen connection lost error=%s; retrying", e)
                self._stop.wait(1.0)
