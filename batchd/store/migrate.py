"""Schema migrations through alembic, without an alembic.ini: the script location is
the `batchd.migrations` package and the connection is handed to `migrations/env.py`."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import batchd.migrations
from batchd.errors import StoreError
from batchd.store.dberrors import translated


def _alembic_config() -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(Path(batchd.migrations.__file__).parent))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with translated(), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


MIGRATE_LOCK_KEY = 0x62617464  # advisory lock held while one node migrates a shared database


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the database to `revision`. On PostgreSQL the migration holds a
    transaction-level advisory lock, so when several nodes run `batchd migrate` at once
    one migrates and the others wait, then find the schema at head and do nothing."""
    cfg = _alembic_config()
    with translated(), engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATE_LOCK_KEY})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def check_at_head(engine: Engine) -> None:
    """Raise StoreError (what to run; code "StoreError") unless the database is at the head
    revision; a database that cannot be read is a StoreError of batchd.store.dberrors."""
    cur, head = current_revision(engine), head_revision()
    if cur != head:
        state = "empty (no schema)" if cur is None else f"at revision {cur}"
        raise StoreError(f"the database is {state}, batchd needs {head}: run `batchd migrate` first")
