"""A database error names its real cause: disk full, a lock not granted in time, a key
taken by a concurrent writer, or an unreachable database; each a 503 with its code, and
nothing else of the request happened. The service is a stub raising the exceptions the
drivers raise (sqlite3, psycopg), wrapped by SQLAlchemy as the store would see them."""

from __future__ import annotations

import errno
import sqlite3
from types import SimpleNamespace

import psycopg
import psycopg.errors as pg
import pytest
from sqlalchemy import exc as sa

from batchd.server import api
from batchd.server.service import Caller


def wrapped(cls, orig):
    return cls("SELECT 1", {}, orig)


class Stub:
    """A Service whose job listing raises `error`."""

    def __init__(self, error: BaseException):
        self.cfg = SimpleNamespace(limits={}, cluster_name="t")
        self.error = error

    def list_jobs(self, query):
        raise self.error


CASES = [
    ("sqlite_full", wrapped(sa.OperationalError, sqlite3.OperationalError("database or disk is full")), "DiskFull"),
    ("pg_disk_full", wrapped(sa.OperationalError, pg.DiskFull("could not extend file: No space left on device")),
     "DiskFull"),
    ("pg_enospc_text", wrapped(sa.OperationalError, psycopg.OperationalError(
        'could not write to file "pg_wal/xlogtemp.1": No space left on device')), "DiskFull"),
    ("sqlite_locked", wrapped(sa.OperationalError, sqlite3.OperationalError("database is locked")), "DatabaseBusy"),
    ("pg_lock_timeout", wrapped(sa.OperationalError, pg.LockNotAvailable("canceling statement due to lock timeout")),
     "DatabaseBusy"),
    ("pg_deadlock", wrapped(sa.OperationalError, pg.DeadlockDetected("deadlock detected")), "DatabaseBusy"),
    ("pg_serialization", wrapped(sa.OperationalError, pg.SerializationFailure("could not serialize access")),
     "DatabaseBusy"),
    ("pool_timeout", sa.TimeoutError("QueuePool limit of size 5 overflow 10 reached"), "DatabaseBusy"),
    ("pg_unique", wrapped(sa.IntegrityError, pg.UniqueViolation('duplicate key value violates unique constraint '
                                                                 '"pk_jobs"')), "DatabaseConflict"),
    ("pg_refused", wrapped(sa.OperationalError, psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused')),
     "DatabaseUnavailable"),
    ("sqlite_cantopen", wrapped(sa.OperationalError, sqlite3.OperationalError("unable to open database file")),
     "DatabaseUnavailable"),
]


@pytest.mark.parametrize("error, code", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_database_errors_name_their_cause(error, code):
    status, reply = api.handle(Stub(error), Caller(0, 0), "GET", "/v1/jobs", b"")
    assert status == 503 and reply["error"]["code"] == code and reply["error"]["exit"] == 1, reply
    assert reply["error"]["message"] == api.DB_ERRORS[code]
    assert "nothing was changed" in reply["error"]["message"]


def test_disk_full_words():
    err = wrapped(sa.OperationalError, sqlite3.OperationalError("database or disk is full"))
    _status, reply = api.handle(Stub(err), Caller(0, 0), "GET", "/v1/jobs", b"")
    assert reply["error"]["message"] == ("the batchd database's disk is full (no space left on device); "
                                         "nothing was changed")


def test_enospc_outside_the_database_is_disk_full_too():
    status, reply = api.handle(Stub(OSError(errno.ENOSPC, "No space left on device")), Caller(0, 0), "GET",
                               "/v1/jobs", b"")
    assert status == 503 and reply["error"]["code"] == "DiskFull"


def test_other_os_errors_stay_internal():
    status, reply = api.handle(Stub(OSError(errno.EIO, "I/O error")), Caller(0, 0), "GET", "/v1/jobs", b"")
    assert status == 500 and reply["error"]["code"] == "Internal"
