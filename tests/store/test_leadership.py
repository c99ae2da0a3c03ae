"""The controller role on PostgreSQL is per database: a daemon of another cluster on the
same server (another database) neither holds this cluster's role nor shows as its
controller (`Leadership.holder`)."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from batchd.store.leader import Leadership


@pytest.fixture
def other_db(db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("the role is an advisory lock of PostgreSQL's")
    head, _, _ = db_url.rpartition("/")
    name = f"batchd_o_{uuid.uuid4().hex[:10]}"
    admin = db_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    yield f"{head}/{name}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_role_and_its_holder_are_per_database(db_url, other_db):
    other = Leadership(other_db, "elsewhere")
    mine = Leadership(db_url, "here")
    try:
        assert other.poll()
        assert mine.holder()["node"] is None  # the other cluster's controller is not ours
        assert mine.poll()  # and its lock does not keep ours from being taken
        assert mine.holder()["node"] == "here"
        assert other.holder()["node"] == "elsewhere"
    finally:
        other.release()
        mine.release()
