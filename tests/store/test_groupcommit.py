"""Group commit (batchd.store.groupcommit): concurrent submissions on SQLite share one
transaction, each keeps its own result or failure, and nothing is returned before COMMIT."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from batchd.store import Store
from batchd.store.groupcommit import GroupCommit


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path}/g.db")
    with s.tx() as t:
        t.execute(text("CREATE TABLE g (k INTEGER PRIMARY KEY)"))
    yield s
    s.close()


def test_concurrent_bodies_share_commits_and_keep_their_own_failures(store):
    commits = []
    real_tx = store.tx

    def counting_tx():
        commits.append(1)
        return real_tx()

    group = GroupCommit(counting_tx)
    gate = threading.Barrier(16)
    results: dict[int, object] = {}

    def submit(i: int) -> None:
        gate.wait()

        def body(s):
            if i == 5:  # a body that fails after writing: only its savepoint is rolled back
                s.execute(text("INSERT INTO g VALUES (1005)"))
                raise ValueError("refused")
            s.execute(text("INSERT INTO g VALUES (:k)"), {"k": i})
            return i * 10
        try:
            results[i] = group.run(body)
        except ValueError as e:
            results[i] = e

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results.pop(5), ValueError)
    assert results == {i: i * 10 for i in range(16) if i != 5}
    with store.read() as s:
        stored = sorted(r[0] for r in s.execute(text("SELECT k FROM g")))
    assert stored == [i for i in range(16) if i != 5]
    assert len(commits) < 16  # at least two shared a transaction


def test_a_failed_commit_fails_every_body_of_the_group(store):
    class Boom(Exception):
        pass

    from contextlib import contextmanager

    @contextmanager
    def failing_tx():
        with store.tx() as s:
            yield s
            raise Boom("commit failed")

    group = GroupCommit(failing_tx)
    with pytest.raises(Boom):
        group.run(lambda s: s.execute(text("INSERT INTO g VALUES (7)")))
    with store.read() as s:
        assert s.execute(text("SELECT count(*) FROM g")).scalar_one() == 0
    with pytest.raises(Boom):  # the group is free again afterwards (no caller left waiting)
        group.run(lambda s: 3)


def test_store_submission_on_sqlite_goes_through_the_group(store):
    assert store._group is not None
