"""Database errors leave the store as `StoreError` naming their cause, with the driver's
error kept as `__cause__`, on SQLite and PostgreSQL; what the store answers on purpose (a
compare-and-set that lost, a row that is not there) stays an answer, and an exception
that is not the database's passes unchanged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError

from batchd.config import load_config
from batchd.errors import StoreError, SubmitError
from batchd.model import Job
from batchd.server import api
from batchd.server.caller import Caller
from batchd.server.service import Service
from batchd.store import Store
from batchd.store import accounting as acct_sql
from batchd.store import steps as step_sql
from batchd.store.dberrors import DB_ERRORS
from batchd.store.migrate import check_at_head, current_revision
from tests.refstore import REFERENCE


def _job(jid: int, **kw) -> Job:
    base = dict(id=jid, name="j", user="alice", uid=1000, gid=1000, account="default", partition="gpu",
                qos="normal", state="PENDING", submit_time=time.time(), spec={"script": "#!/bin/sh\n"},
                request={"tasks": 1, "per_task": {"cpu": 1}})
    base.update(kw)
    return Job(**base)


def _drop_jobs(store: Store) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE step_tasks"))
        conn.execute(text("DROP TABLE jobs"))


def _is_store_error(e: StoreError, code: str, cause: type[BaseException] = DBAPIError) -> None:
    assert e.code == code and e.status == 503 and e.message == DB_ERRORS[code]
    assert isinstance(e.__cause__, cause), repr(e.__cause__)


def test_a_taken_key_is_a_conflict(store):
    store.insert_jobs([_job(1)])
    with pytest.raises(StoreError) as e:
        store.insert_jobs([_job(1)])
    _is_store_error(e.value, "DatabaseConflict", IntegrityError)
    assert [j.id for j in store.list_jobs()] == [1]  # rolled back, the store still works


def test_a_taken_key_on_the_submit_path_is_a_conflict(store):
    """The submit path's own Core statements (group-committed on SQLite: the body fails in
    its savepoint and the error comes back to its caller) translate the same way."""
    first = store.next_job_ids(1)
    store.insert_jobs([_job(first + 1)])  # the id the next submission reserves is taken

    def build(jid: int) -> list[Job]:
        return [_job(jid)]

    with pytest.raises(StoreError) as e:
        store.store_submission(1, build, 1000, None)
    _is_store_error(e.value, "DatabaseConflict", IntegrityError)


@pytest.mark.parametrize("call", [
    lambda s: s.list_jobs(),
    lambda s: s.get_job(1),
    lambda s: s.insert_jobs([_job(1)]),
    lambda s: s.update_jobs([(1, ("PENDING",), {"state": "CANCELLED"})]),
    lambda s: s.store_submission(1, lambda jid: [_job(jid)], 1000, "tok"),
    lambda s: s.submit_facts("alice", 1000, "tok"),
    lambda s: step_sql.list_tasks(s, job_id=1),
    lambda s: acct_sql.running_jobs(s),
], ids=["list_jobs", "get_job", "insert_jobs", "update_jobs", "store_submission", "submit_facts",
        "steps.list_tasks", "accounting.running_jobs"])
def test_a_missing_table_is_a_store_error(store, call):
    """SQLite says OperationalError, PostgreSQL ProgrammingError: both are StoreErrors."""
    _drop_jobs(store)
    with pytest.raises(StoreError) as e:
        call(store)
    _is_store_error(e.value, "DatabaseUnavailable")


def test_answers_stay_answers(store):
    """Not found and a lost compare-and-set are results, never errors."""
    assert store.get_job(42) is None
    assert store.update_job(42, ("PENDING",), state="RUNNING") is False
    assert store.update_jobs([(42, ("PENDING",), {"state": "CANCELLED"})]) == []
    assert store.set_node_state("nosuchnode", "DRAIN", "x", 0) is False
    store.insert_jobs([_job(1, state="RUNNING")])
    assert store.update_job(1, ("PENDING",), state="CANCELLED") is False


def test_other_exceptions_pass_unchanged(store):
    """An exception of the caller's own code inside a store transaction is not the
    database's: it leaves as itself (the transaction rolled back)."""
    def build(jid: int) -> list[Job]:
        raise SubmitError("refused by the build")

    with pytest.raises(SubmitError, match="refused by the build"):
        store.store_submission(1, build, 1000, None)
    with pytest.raises(KeyError):
        with store.tx():
            raise KeyError("not the database's")


def _unreachable_url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        (tmp_path / "db-is-a-directory").mkdir()
        return f"sqlite:///{tmp_path / 'db-is-a-directory'}"
    return "postgresql://postgres@127.0.0.1:1/batchd"  # nothing listens on port 1


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_unreachable_database_is_unavailable(backend, tmp_path):
    s = Store(_unreachable_url(backend, tmp_path))
    try:
        with pytest.raises(StoreError) as e:
            s.list_nodes()
        _is_store_error(e.value, "DatabaseUnavailable")
        with pytest.raises(StoreError) as e:
            check_at_head(s.engine)  # the schema check cannot read the database: no verdict
        _is_store_error(e.value, "DatabaseUnavailable")
        with pytest.raises(StoreError):
            current_revision(s.engine)
    finally:
        s.close()


def test_the_schema_verdict_keeps_its_code(db_url):
    s = Store(db_url)
    try:
        with pytest.raises(StoreError, match="batchd migrate") as e:
            check_at_head(s.engine)
        assert e.value.code == "StoreError" and e.value.__cause__ is None
    finally:
        s.close()


def test_the_api_answers_a_store_error_as_503(store, tmp_path):
    """Through the service and api.handle: the envelope names the cause, nothing else leaks."""
    svc = Service(load_config(str(REFERENCE), dev=True), store)
    _drop_jobs(store)
    status, reply = api.handle(svc, Caller(0, 0), "GET", "/v1/jobs", b"")
    assert status == 503 and reply == {"error": {"code": "DatabaseUnavailable", "exit": 1,
                                                 "message": DB_ERRORS["DatabaseUnavailable"]}}
