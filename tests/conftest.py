"""Shared fixtures: a database URL per backend.

Every store test runs on SQLite and on PostgreSQL. PostgreSQL comes from
$BATCHD_TEST_PG (a URL to an existing database the tests may create databases from),
else postgresql://postgres@127.0.0.1:5432/test when a server answers there; only when
BATCHD_TEST_PG is unset and no server answers are the PostgreSQL cases skipped.
`.ci/run` sets BATCHD_TEST_PG, so CI never skips them.
"""

from __future__ import annotations

import os
import socket
import uuid

import pytest

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


def _pg_base() -> str | None:
    url = os.environ.get("BATCHD_TEST_PG")
    if url:
        return url
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            return DEFAULT_PG
    except OSError:
        return None


def _pg_url(base: str, dbname: str) -> str:
    head, _, _ = base.rpartition("/")
    return f"{head}/{dbname}"


@pytest.fixture(scope="session")
def pg_base_url():
    """URL of a PostgreSQL database to create test databases from, or None."""
    return _pg_base()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A URL to an empty database of each backend (PostgreSQL: a fresh database,
    dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'batchd.db'}"
        return
    base = _pg_base()
    if base is None:
        pytest.skip("no PostgreSQL server (set BATCHD_TEST_PG)")
    import psycopg

    name = f"batchd_t_{uuid.uuid4().hex[:12]}"
    conninfo = base.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(base, name)
    finally:
        import sqlalchemy

        sqlalchemy.pool.clear_managers() if hasattr(sqlalchemy.pool, "clear_managers") else None
        with psycopg.connect(conninfo, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: Test tiers (docs/testing.md): every test under tests/<folder>/ gets these markers, so
#: `-m "not e2e and not cluster"` selects the fast tier without a mark in each file.
#: Tests that need root elsewhere, and the slow ones, carry their marks where they are; a
#: `slow` test belongs to the e2e tier (the tier of minutes), so the fast tier leaves it out.
TIER_MARKERS: dict[str, tuple[str, ...]] = {
    "e2e": ("e2e",),
    "cluster": ("cluster",),
    "systemd": ("root",),  # besides its own `systemd` marker
}


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    tests = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        rel = os.path.relpath(str(item.path), tests).split(os.sep)
        for name in TIER_MARKERS.get(rel[0], ()) if len(rel) > 1 else ():
            item.add_marker(name)
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("e2e") is None:
            item.add_marker("e2e")
