"""`scontrol update TimeLimit=` on a running job reaches its supervisor (issue 15.1: the store
and the backfill plan changed, the job ran on to its old limit; `launcher.set_time_limit` was
called by nothing). The node agent compares the store's limit with the one the run's
supervisor has (its launch request's, at first sight) and sends a change once; the
supervisor re-arms the limit from the run's start. Limits here are seconds, set in the store
directly (the CLI's unit is the minute: tests/e2e/test_time_limits_e2e.py goes through it)."""

import os
import time

import pytest

from batchd.config import parse_config
from batchd.model import Job
from batchd.node import launcher
from batchd.node.agent import Agent
from batchd.node.spool import CONTROL_PREFIX
from batchd.store import Store
from batchd.store.migrate import upgrade


def _cfg(tmp_path):
    return parse_config({"state_dir": str(tmp_path), "scheduler": {"kill_wait_s": 1},
                         "node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]})


@pytest.fixture
def agent(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    yield _cfg(tmp_path), store
    store.close()


def _running(store, tmp_path, jid: int, limit_s: int | None, script: str) -> None:
    spec = {"script": script, "workdir": str(tmp_path), "environment": {"PATH": "/usr/bin:/bin"},
            "output": str(tmp_path / f"out-{jid}.txt")}
    import pwd

    pw = pwd.getpwuid(os.getuid())
    store.insert_jobs([Job(id=jid, name="j", user=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid, account="default",
                           partition="batch", qos="normal", state="RUNNING", submit_time=time.time(), spec=spec,
                           request={"tasks": 1, "per_task": {"cpu": 1}}, start_time=time.time(),
                           time_limit_s=limit_s,
                           allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100}},
                           node_list="n1", tres_alloc="cpu=1,mem=100M,node=1")])


def _until_ended(ag: Agent, store: Store, jid: int, timeout_s: float = 20.0) -> Job:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ag.step()
        j = store.get_job(jid)
        if j.state != "RUNNING":
            return j
        time.sleep(0.05)
    pytest.fail(f"job {jid} still running after {timeout_s}s")


def _controls(ag: Agent, jid: int) -> list[str]:
    return [n for n in os.listdir(launcher.jobdir_path(ag.spool, jid, 0)) if n.startswith(CONTROL_PREFIX)]


def test_lowered_limit_ends_the_run_timeout_at_the_new_limit(agent, tmp_path):
    cfg, store = agent
    ag = Agent(cfg, store, ["n1"])
    _running(store, tmp_path, 7, 600, "#!/bin/sh\nsleep 30\n")
    ag.step()  # launches it
    assert launcher.poll(ag.spool, 7, 0).state == "RUNNING"
    ag.step()
    assert _controls(ag, 7) == []  # nothing changed: nothing sent
    t0 = time.monotonic()
    store.update_job(7, ("RUNNING",), time_limit_s=2)
    j = _until_ended(ag, store, 7)
    assert j.state == "TIMEOUT"
    assert time.monotonic() - t0 < 8  # 2 s from the run's start, plus the 1 s kill wait
    err = (tmp_path / "out-7.txt").read_text()
    assert "DUE TO TIME LIMIT" in err


def test_a_restarted_daemon_sends_a_limit_changed_while_it_was_away(agent, tmp_path):
    cfg, store = agent
    _running(store, tmp_path, 8, 600, "#!/bin/sh\nsleep 30\n")
    Agent(cfg, store, ["n1"]).step()  # launched by the daemon before its restart
    store.update_job(8, ("RUNNING",), time_limit_s=1)
    j = _until_ended(Agent(cfg, store, ["n1"]), store, 8)
    assert j.state == "TIMEOUT"


def test_raised_to_unlimited_the_run_completes(agent, tmp_path):
    cfg, store = agent
    ag = Agent(cfg, store, ["n1"])
    _running(store, tmp_path, 9, 2, "#!/bin/sh\nsleep 3\n")
    ag.step()
    store.update_job(9, ("RUNNING",), time_limit_s=-1)
    ag.step()
    j = _until_ended(ag, store, 9)
    assert j.state == "COMPLETED"
