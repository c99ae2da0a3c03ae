"""Job ids of concurrent submissions (both backends): unique, each submission's ids
consecutive, a repeated token reserving nothing. On PostgreSQL the ids are reserved in a
transaction of their own (Store._reserve_apart): a submission that fails after reserving
leaves a gap, never a duplicate."""

from __future__ import annotations

import threading
import time

import pytest

from batchd.model import Job
from batchd.store import Store
from batchd.store.migrate import upgrade


@pytest.fixture
def store(db_url):
    s = Store(db_url, pool_size=8)
    upgrade(s.engine)
    yield s
    s.close()


def _job(jid: int, token: str | None, task: int | None = None, array: int | None = None) -> Job:
    return Job(id=jid, name="j", user="alice", uid=1000, gid=1000, account="default", partition="gpu",
               qos="normal", state="PENDING", submit_time=time.time(), spec={"script": "#!/bin/sh\n"},
               request={"tasks": 1}, submit_token=token, array_task_id=task, array_job_id=array)


def test_concurrent_submissions_get_unique_consecutive_ids(store):
    results: list[list[int]] = []
    lock = threading.Lock()
    gate = threading.Barrier(8)

    def submit(k: int) -> None:
        gate.wait()
        for i in range(10):
            n = 1 + (k + i) % 3
            jobs, repeated = store.store_submission(
                n, lambda first, n=n, tok=f"t{k}-{i}": [_job(first + t, tok, t, first) for t in range(n)],
                1000, f"t{k}-{i}")
            assert not repeated
            with lock:
                results.append([j.id for j in jobs])

    threads = [threading.Thread(target=submit, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80
    ids = [i for r in results for i in r]
    assert len(ids) == len(set(ids))
    for r in results:
        assert r == list(range(r[0], r[0] + len(r)))
    assert sorted(j.id for j in store.list_jobs()) == sorted(ids)


def test_a_failed_submission_reserves_ids_it_never_uses(store):
    def boom(first: int) -> list[Job]:
        raise ValueError("refused after the reservation")

    before = store.next_job_ids(1)
    with pytest.raises(ValueError):
        store.store_submission(2, boom, 1000, "tx")
    (made,), _ = store.store_submission(1, lambda first: [_job(first, "ty")], 1000, "ty")
    if store.engine.dialect.name == "postgresql":
        assert made.id == before + 3  # the failed one's two ids stay reserved: a gap
    else:
        assert made.id == before + 1  # rolled back with its transaction
    assert [j.id for j in store.list_jobs()] == [made.id]
