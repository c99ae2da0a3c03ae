"""The node agent after a daemon that died in the middle of launching a run (the run's
directory exists, its supervisor never started): the next pass starts the run once,
instead of declaring it lost (NODE_FAIL) and requeueing it."""

import time

import pytest

from batchd.config import parse_config
from batchd.model import Job
from batchd.node import launcher
from batchd.node.agent import Agent
from batchd.store import Store
from batchd.store.migrate import upgrade


class Crash(BaseException):
    """The daemon dying (not an error the agent may catch)."""


@pytest.fixture
def agent(tmp_path):
    cfg = parse_config({"state_dir": str(tmp_path), "scheduler": {"kill_wait_s": 1},
                        "node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]})
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    spec = {"script": "#!/bin/sh\necho ran\n", "workdir": str(tmp_path), "environment": {"PATH": "/usr/bin:/bin"},
            "output": str(tmp_path / "out.txt")}
    store.insert_jobs([Job(id=7, name="j", user="root", uid=0, gid=0, account="default", partition="batch",
                           qos="normal", state="RUNNING", submit_time=time.time(), spec=spec,
                           request={"tasks": 1, "per_task": {"cpu": 1}}, start_time=time.time(),
                           allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100}},
                           node_list="n1", tres_alloc="cpu=1,mem=100M,node=1")])
    yield Agent(cfg, store, ["n1"]), store
    store.close()


def test_run_left_half_launched_is_started_once(agent, monkeypatch):
    ag, store = agent

    def crash(*a, **k):
        raise Crash()

    monkeypatch.setattr(launcher, "_spawn_supervisor", crash)
    with pytest.raises(Crash):
        ag.step()
    assert launcher.poll(ag.spool, 7, 0).state == "LOST"  # the directory is there, no supervisor
    monkeypatch.undo()
    deadline = time.time() + 20
    while time.time() < deadline:
        ag.step()
        j = store.get_job(7)
        if j.state != "RUNNING":
            break
        time.sleep(0.1)
    assert (j.state, j.restarts) == ("COMPLETED", 0)
    assert [u.state for u in store.list_usage(job_ids=[7])] == ["COMPLETED"]
