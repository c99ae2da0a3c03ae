"""Submission tokens (service + store, both backends): a submission carrying a token that
its uid already stored returns the same job ids with `duplicate` and stores nothing; the
same token from another uid is another submission; a malformed token is a 400."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from batchd.config import load_config
from batchd.errors import InvalidRequest
from batchd.model import Node
from batchd.server.service import Caller, Service
from batchd.store import Store
from batchd.store.migrate import upgrade

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "slurm-reference.toml"
ME = Caller(uid=os.getuid(), gid=os.getgid())
OTHER = Caller(uid=54321, gid=54321)
TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def svc(db_url, tmp_path):
    cfg = load_config(str(CONFIG), dev=True)
    store = Store(db_url)
    upgrade(store.engine)
    store.ensure_default_account()
    for n in cfg.nodes:
        store.upsert_node(Node(name=n.name, state="IDLE", cpus=n.cpus, memory_mb=n.memory_mb,
                               gpus=list(n.gpus) if isinstance(n.gpus, list) else [], heartbeat=time.time()))
    yield Service(cfg, store)
    store.close()


def spec(tmp_path: Path, **kw: object) -> dict:
    base = {"name": "job", "script": "#!/bin/sh\ntrue\n", "workdir": str(tmp_path), "submit_dir": str(tmp_path),
            "environment": {}, "export": "ALL", "argv": [], "account": "default"}
    base.update(kw)
    return base


def test_same_token_twice_is_one_job_with_the_same_id(svc, tmp_path):
    first = svc.submit(ME, spec(tmp_path, submit_token=TOKEN))
    again = svc.submit(ME, spec(tmp_path, submit_token=TOKEN))
    assert "duplicate" not in first
    assert again == {"job_id": first["job_id"], "array_task_ids": None, "duplicate": True}
    jobs = svc.store.list_jobs()
    assert [j.id for j in jobs] == [first["job_id"]]
    assert jobs[0].submit_token == TOKEN
    # the next submission gets the next id: the repeat burnt none
    assert svc.submit(ME, spec(tmp_path))["job_id"] == first["job_id"] + 1


def test_an_array_repeated_returns_its_ids_and_stores_no_task_twice(svc, tmp_path):
    first = svc.submit(ME, spec(tmp_path, array="0-4", submit_token=TOKEN))
    again = svc.submit(ME, spec(tmp_path, array="0-4", submit_token=TOKEN))
    assert first["array_task_ids"] == [0, 1, 2, 3, 4]
    assert again == dict(first, duplicate=True)
    jobs = svc.store.list_jobs()
    assert len(jobs) == 5 and {j.submit_token for j in jobs} == {TOKEN}
    assert {j.array_job_id for j in jobs} == {first["job_id"]}


def test_the_same_token_from_another_uid_is_another_submission(svc, tmp_path):
    mine = svc.submit(ME, spec(tmp_path, submit_token=TOKEN))
    theirs = svc.submit(OTHER, spec(tmp_path, submit_token=TOKEN))
    assert theirs["job_id"] != mine["job_id"] and "duplicate" not in theirs
    assert sorted((j.uid, j.id) for j in svc.store.list_jobs()) == sorted(
        [(ME.uid, mine["job_id"]), (OTHER.uid, theirs["job_id"])])


def test_submissions_without_a_token_are_never_merged(svc, tmp_path):
    a = svc.submit(ME, spec(tmp_path))
    b = svc.submit(ME, spec(tmp_path))
    assert a["job_id"] != b["job_id"] and len(svc.store.list_jobs()) == 2


@pytest.mark.parametrize("bad", [5, "", "x" * 65, "abc def", "ab\u00b2", ["a"]])
def test_a_malformed_token_is_refused_and_names_the_field(svc, tmp_path, bad):
    with pytest.raises(InvalidRequest, match="submit_token"):
        svc.submit(ME, spec(tmp_path, submit_token=bad))
    assert svc.store.list_jobs() == []


def test_concurrent_submissions_with_one_token_store_one_job(svc, tmp_path):
    """A retry racing the first request (the reply timed out, the first still running):
    the check and the insert are one serialized transaction, so one submission stores."""
    replies: list[dict] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            replies.append(svc.submit(ME, spec(tmp_path, submit_token=TOKEN)))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(svc.store.list_jobs()) == 1
    assert {r["job_id"] for r in replies} == {svc.store.list_jobs()[0].id}
    assert sum("duplicate" not in r for r in replies) == 1
