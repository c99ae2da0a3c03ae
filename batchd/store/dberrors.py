"""Database errors as batchd's own `StoreError`, named by their cause.

Every public store function runs in one transaction (`Store.tx`, `Store.read`,
`Store.core_tx`, `Store.core_read`, `batchd.store.migrate`); an error the driver raises
there (SQLAlchemy's `DBAPIError`: OperationalError, IntegrityError, ProgrammingError, ...,
or the pool's TimeoutError) leaves the store as a `StoreError` whose `code` says why and
whose `__cause__` is the original error, so that nothing above the store needs to know
SQLAlchemy. The transaction was rolled back: nothing was changed.

| code                  | cause                                                                  |
|-----------------------|------------------------------------------------------------------------|
| `DiskFull`            | SQLite "database or disk is full", PostgreSQL DiskFull / "No space left on device" |
| `DatabaseBusy`        | SQLite "database is locked", a PostgreSQL lock or statement timeout, deadlock or serialization failure, an exhausted connection pool |
| `DatabaseConflict`    | a unique or foreign key refused (IntegrityError), e.g. a concurrent writer took the key |
| `DatabaseUnavailable` | anything else: the database is unreachable or refused the statement      |

The store still answers the expected outcomes itself, never as errors: a compare-and-set
that found the row in another state returns False, a row that is not there None or [].
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from batchd import faults
from batchd.errors import StoreError

#: code -> the message the daemon answers with (HTTP 503, exit 1)
DB_ERRORS = {
    "DiskFull": "the batchd database's disk is full (no space left on device); nothing was changed",
    "DatabaseBusy": "the batchd database is busy (a lock was not granted in time); nothing was changed, try again",
    "DatabaseConflict": "the batchd database refused a concurrent change (a key already taken); "
                        "nothing was changed, try again",
    "DatabaseUnavailable": "the batchd database is unreachable; nothing was changed, try again",
}
_PG_BUSY = {"55P03", "57014", "40001", "40P01"}  # lock/statement timeout, serialization, deadlock
#: what the store translates: the drivers' errors as SQLAlchemy wraps them, and the pool's timeout
DRIVER_ERRORS = (DBAPIError, PoolTimeout)


def db_error_code(e: BaseException) -> str:
    """The cause of a database error, one of DB_ERRORS' codes (module docstring)."""
    if isinstance(e, PoolTimeout):
        return "DatabaseBusy"
    orig = getattr(e, "orig", None) or e
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None) or ""
    why = faults.cause(e)  # the drivers' words for a full disk or a lock, as the loops read them
    if sqlstate == "53100" or why == faults.NO_SPACE:
        return "DiskFull"
    if sqlstate in _PG_BUSY or why == faults.LOCK_TIMEOUT:
        return "DatabaseBusy"
    if isinstance(e, IntegrityError):
        return "DatabaseConflict"
    return "DatabaseUnavailable"


def store_error(e: BaseException) -> StoreError:
    """The StoreError of the driver error `e` (raise it `from e`)."""
    code = db_error_code(e)
    return StoreError(DB_ERRORS[code], code=code)


@contextmanager
def translated() -> Iterator[None]:
    """Inside: a driver error (DRIVER_ERRORS) leaves as its StoreError, its cause kept;
    every other exception, a StoreError included, passes unchanged."""
    try:
        yield
    except DRIVER_ERRORS as e:
        raise store_error(e) from e
