"""A large pending array is folded for the controller's cycle (batchd.control.arrayfold): the
cycle takes the first alike tasks only, starts exactly what it would start with every
task in it, and the folded tasks get their group's reason and priority, no planned start.
A task changed on its own (scontrol update) is a group of its own and is scheduled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchd.config import parse_config
from batchd.control import arrayfold
from batchd.control.controller import Controller
from batchd.model import Job, Node
from batchd.store import Store
from batchd.store.migrate import upgrade

T = 1_700_000_000.0
CPUS = 4
TASKS = 60  # > the cap of a 4-CPU cluster (20)
CFG = {"scheduler": {"kill_wait_s": 1}, "node": [{"name": "n1", "cpus": CPUS, "memory_mb": 8000}]}


def _task(i: int, request: dict[str, Any], **kw: Any) -> Job:
    return Job(id=i + 1, name="arr", user="root", uid=0, gid=0, account="default", partition="batch",
               qos="normal", state="PENDING", submit_time=T - 60, spec={"script": "true", "workdir": "/"},
               request=request, array_job_id=1, array_task_id=i, **kw)


def _controller(tmp: Path, jobs: list[Job]) -> tuple[Controller, Store]:
    store = Store(f"sqlite:///{tmp / 'db.sqlite'}")
    upgrade(store.engine)
    store.ensure_default_account()
    store.upsert_node(Node(name="n1", state="IDLE", cpus=CPUS, memory_mb=8000, gpus=[], heartbeat=T))
    store.insert_jobs(jobs)
    return Controller(parse_config(dict(CFG, state_dir=str(tmp))), store), store


REQ = {"tasks": 1, "per_task": {"cpu": 1, "mem": 100}, "array_task_min": 0, "array_task_max": TASKS - 1,
       "array_task_count": TASKS}


def test_the_cap_is_never_below_what_could_run_at_once():
    class N:
        def __init__(self, cpus: int):
            self.cpus = cpus
    assert arrayfold.cap([N(4)]) == arrayfold.MIN_TASKS
    assert arrayfold.cap([N(64), N(64)]) == 129


def test_a_cycle_folds_alike_tasks_and_starts_what_it_would_start_unfolded(tmp_path: Path):
    ctl, store = _controller(tmp_path, [_task(i, REQ) for i in range(TASKS)])
    snap, book = ctl._build(T, fold=True)
    in_cycle = [j["id"] for j in snap["jobs"]]
    assert in_cycle == list(range(1, arrayfold.MIN_TASKS + 1))  # the first tasks, by id
    assert set(book.folded) == set(range(arrayfold.MIN_TASKS + 1, TASKS + 1))
    assert set(book.folded.values()) == {arrayfold.MIN_TASKS}  # the group's last task in the cycle
    full, _ = ctl._build(T)  # what sprio, `batchd why` and plan --dump see: every task
    assert len(full["jobs"]) == TASKS

    from batchd.scheduler import decide, load_snapshot
    unfolded = decide(load_snapshot(full)).to_dict()
    dec = ctl.cycle(T)
    assert sorted(s["job"] for s in dec["start"]) == sorted(s["job"] for s in unfolded["start"])
    assert len(dec["start"]) == CPUS

    jobs = {j.id: j for j in store.list_jobs()}
    rep = jobs[arrayfold.MIN_TASKS]
    assert rep.state == "PENDING"
    unfolded_reason = {p["job"]: p.get("reason") for p in unfolded["pending"]}
    for jid in book.folded:
        assert jobs[jid].state == "PENDING"
        assert jobs[jid].reason == rep.reason == unfolded_reason[jid]  # what it would have been told
        assert jobs[jid].priority == rep.priority
        assert jobs[jid].start_estimate is None


def test_tasks_start_in_id_order_across_cycles(tmp_path: Path):
    ctl, store = _controller(tmp_path, [_task(i, REQ) for i in range(TASKS)])
    ctl.cycle(T)
    # the four running tasks end; the next cycle starts the next four by id
    done = [j.id for j in store.list_jobs() if j.state == "RUNNING"]
    assert done == [1, 2, 3, 4]
    for jid in done:
        store.update_job(jid, state="COMPLETED", end_time=T + 1, exit_code=0)
    dec = ctl.cycle(T + 2)
    assert sorted(s["job"] for s in dec["start"]) == [5, 6, 7, 8]


@pytest.mark.parametrize("change", [
    {"request": {**REQ, "per_task": {"cpu": 1, "mem": 200}}},  # scontrol update of one task's request
    {"nice": -100},
    {"time_limit_s": 60},
])
def test_a_task_changed_alone_is_a_group_of_its_own(tmp_path: Path, change: dict[str, Any]):
    last = TASKS - 1
    jobs = [_task(i, REQ) for i in range(last)] + [_task(last, **{"request": REQ, **change})]
    ctl, _store = _controller(tmp_path, jobs)
    snap, book = ctl._build(T, fold=True)
    assert TASKS in [j["id"] for j in snap["jobs"]]
    assert TASKS not in book.folded


def test_non_array_jobs_are_never_folded(tmp_path: Path):
    jobs = [Job(id=i, name="j", user="root", uid=0, gid=0, account="default", partition="batch",
                qos="normal", state="PENDING", submit_time=T - 60, spec={"script": "true", "workdir": "/"},
                request={"tasks": 1, "per_task": {"cpu": 1, "mem": 100}}) for i in range(1, 51)]
    ctl, _store = _controller(tmp_path, jobs)
    snap, book = ctl._build(T, fold=True)
    assert len(snap["jobs"]) == 50 and not book.folded
