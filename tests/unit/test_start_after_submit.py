"""A job stored after the cycle read its clock (its submit time is later than the cycle's
`now`) never gets a start time before its submit time (side_by_side.py saw StartTime 81 ms
before SubmitTime)."""

from __future__ import annotations

from pathlib import Path

from batchd.config import parse_config
from batchd.control.controller import Controller
from batchd.model import Job, Node
from batchd.store import Store
from batchd.store.migrate import upgrade

T = 1_700_000_000.0


def test_a_job_submitted_after_the_cycles_clock_starts_at_its_submit_time(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    store.ensure_default_account()
    store.upsert_node(Node(name="n1", state="IDLE", cpus=4, memory_mb=1000, gpus=[], heartbeat=T))
    store.insert_jobs([
        Job(id=1, name="early", user="root", uid=0, gid=0, account="default", partition="batch", qos="normal",
            state="PENDING", submit_time=T - 10, spec={"script": "true", "workdir": "/"},
            request={"tasks": 1, "per_task": {"cpu": 1, "mem": 100}}),
        Job(id=2, name="late", user="root", uid=0, gid=0, account="default", partition="batch", qos="normal",
            state="PENDING", submit_time=T + 0.081, spec={"script": "true", "workdir": "/"},
            request={"tasks": 1, "per_task": {"cpu": 1, "mem": 100}}),
    ])
    cfg = parse_config({"node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]})
    dec = Controller(cfg, store).cycle(now=T)
    assert {int(s["job"]) for s in dec["start"]} == {1, 2}
    jobs = {j.id: j for j in store.list_jobs(states=["RUNNING"])}
    assert jobs[1].start_time == T
    assert jobs[2].start_time == T + 0.081
