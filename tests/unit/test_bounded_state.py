"""What the daemon keeps in memory per job or run is bounded by what is live: the node
agent's per-run bookkeeping, the run sampler's readings, the step runner's failure notes
and the launcher's "alive in another view" notes are dropped when their run ends, even
when the end was not seen by this agent (issue 18)."""

from __future__ import annotations

import os
import time

import pytest

from batchd.config import parse_config
from batchd.model import Job, Node
from batchd.node import runwatch
from batchd.node.agent import Agent
from batchd.node.steprunner import StepRunner
from batchd.store import Store
from batchd.store.migrate import upgrade


@pytest.fixture
def env(tmp_path):
    cfg = parse_config({"state_dir": str(tmp_path), "scheduler": {"kill_wait_s": 1},
                        "accounting": {"sample_interval_s": 0.01},
                        "node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]})
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    store.ensure_default_account()
    store.upsert_node(Node(name="n1", state="IDLE", cpus=4, memory_mb=1000, gpus=[], heartbeat=time.time()))
    yield cfg, store, tmp_path
    store.close()


def _running(store, tmp_path, job_id: int, script: str) -> None:
    spec = {"script": script, "workdir": str(tmp_path), "environment": {"PATH": "/usr/bin:/bin"},
            "output": str(tmp_path / f"{job_id}.out")}
    store.insert_jobs([Job(id=job_id, name=f"j{job_id}", user="root", uid=os.getuid(), gid=os.getgid(),
                           account="default", partition="batch", qos="normal", state="RUNNING",
                           submit_time=time.time(), spec=spec, request={"tasks": 1, "per_task": {"cpu": 1}},
                           start_time=time.time(),
                           allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100}},
                           node_list="n1", tres_alloc="cpu=1,mem=100M,node=1")])


def _until(agent, pred, timeout=20.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        agent.step()
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_the_agent_keeps_nothing_of_ended_runs(env):
    cfg, store, tmp = env
    # the job runs until the test lets it end: sampled while it runs however slow the machine
    go = tmp / "go"
    _running(store, tmp, 1, f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.05; done & wait\necho ran\n")
    try:
        ag = Agent(cfg, store, ["n1"])
        # a run this agent never saw end (the store ended it elsewhere, its spool entry gone)
        stale = (99, 0)
        ag._sent[stale], ag._limits[stale], ag._strikes[stale] = "cancel", 60, 1
        ag.sampler._last[stale], ag.sampler._cpu[stale] = time.time(), {12345: (0.0, 0.0, 0.0)}
        _until(ag, lambda: (1, 0) in ag.sampler._cpu)  # sampled while it runs
        assert stale not in ag._sent and stale not in ag._limits and stale not in ag._strikes
        assert stale not in ag.sampler._last and stale not in ag.sampler._cpu
        go.touch()
        _until(ag, lambda: store.get_job(1).state == "COMPLETED")
        ag.step()
        assert ag.sampler._last == {} and ag.sampler._cpu == {}
        assert ag._sent == {} and ag._limits == {} and ag._strikes == {}
    finally:
        go.touch()  # a failed test leaves no job behind


def test_step_failure_notes_go_with_their_tasks(env):
    cfg, store, tmp = env
    runner = StepRunner(store, cfg.spool_dir(), {"n1"}, cfg.cluster_name, cfg.gpu_env)
    runner._failed.add((5, 0, 0, 0))  # a task that failed its bookkeeping and has ended since
    assert runner.step() == 0
    assert runner._failed == set()


def test_a_collected_run_forgets_its_view_note(tmp_path):
    spool = str(tmp_path)
    jobdir = runwatch.jobdir_path(spool, 7, 0)
    os.makedirs(jobdir)
    runwatch._noted_views.add(jobdir)
    runwatch.collect(spool, 7, 0)
    assert jobdir not in runwatch._noted_views


def test_step_tasks_of_ended_runs_are_purged_after_the_keep_time(db_url):
    from batchd.store import steps as step_store

    store = Store(db_url)
    upgrade(store.engine)
    try:
        store.ensure_default_account()
        now = time.time()
        task = {"localid": 0, "nodeid": 0, "node": "n1", "ntasks": 1, "argv": ["true"], "env": {"A": "1"},
                "cwd": "/", "stdout": "/dev/null"}
        for job_id, state in ((1, "COMPLETED"), (2, "RUNNING")):
            store.insert_jobs([Job(id=job_id, name="j", user="root", uid=0, gid=0, account="default",
                                   partition="batch", qos="normal", state=state, submit_time=now, spec={},
                                   request={"tasks": 1, "per_task": {"cpu": 1}})])
            for _ in range(2):  # two ended steps of run 0
                sid = step_store.create_step(store, job_id, 0, [dict(task, procid=0)])
                (t,) = step_store.list_tasks(store, job_id=job_id, step_id=sid)
                step_store.set_task(store, t, ("PENDING",), state="COMPLETED", end_time=now - 100)
        # a task that ended recently, and one still running, of the ended job: kept
        sid = step_store.create_step(store, 1, 0, [dict(task, procid=0), dict(task, procid=1)])
        t0, t1 = step_store.list_tasks(store, job_id=1, step_id=sid)
        step_store.set_task(store, t0, ("PENDING",), state="FAILED", end_time=now - 1)
        step_store.set_task(store, t1, ("PENDING",), state="RUNNING")
        assert step_store.purge_ended(store, ["n2"], now - 50) == 0  # another node's agent
        assert step_store.purge_ended(store, ["n1"], now - 50) == 2
        left = [(t.job_id, t.step_id, t.procid) for t in step_store.list_tasks(store)]
        # job 2 still runs: its ended steps stay (its next step id counts on them)
        assert left == [(1, 2, 0), (1, 2, 1), (2, 0, 0), (2, 1, 0)]
    finally:
        store.close()
