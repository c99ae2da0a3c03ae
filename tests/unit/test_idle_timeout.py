"""A QOS's idle_timeout (issue 19, item 6), with the real node agent and a job of real
processes, the GPU readings from a stand-in NVML sampler: a run whose GPUs read 0 % in
every sample for that long is ended (CANCELLED, Reason GpuIdleTimeout, slurmstepd's line
in its output); a run that is busy, or has no GPU readings at all, is not."""

from __future__ import annotations

import os
import time

import pytest

from batchd.config import parse_config
from batchd.model import Job, Node
from batchd.node.agent import Agent
from batchd.protocol import IDLE_REASON
from batchd.store import Store
from batchd.store.migrate import upgrade

LIMIT_S = 1.0


class Readings:
    """Stands for batchd.node.gpusample.GpuSampler: the utilisation each device reads."""

    def __init__(self, util):
        self.util = util  # a number, or None for a device NVML gives no reading for

    def sample(self, devices, pids=None):
        return {"devices": {d: {"util_pct": self.util, "mem_used_mib": 100.0} for d in devices}}


@pytest.fixture
def env(tmp_path):
    cfg = parse_config({"state_dir": str(tmp_path), "scheduler": {"kill_wait_s": 1},
                        "accounting": {"sample_interval_s": 0.05},
                        "qos": [{"name": "normal"}, {"name": "interactive", "preemptible": False,
                                                     "idle_timeout": "0:01:00"}],
                        "node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]})
    assert [q.idle_timeout_s for q in cfg.qos] == [0, 60]
    cfg.qos[1].idle_timeout_s = int(LIMIT_S)  # Slurm times are whole minutes; the test's window is a second
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    store.ensure_default_account()
    store.upsert_node(Node(name="n1", state="IDLE", cpus=4, memory_mb=1000, heartbeat=time.time(),
                           gpus=[{"index": 0, "uuid": "GPU-0", "type": "h200"},
                                 {"index": 1, "uuid": "GPU-1", "type": "h200"}]))
    yield cfg, store, tmp_path
    store.close()


def _running(store, tmp_path, job_id: int, qos: str, go) -> None:
    spec = {"script": f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.05; done\n", "workdir": str(tmp_path),
            "environment": {"PATH": "/usr/bin:/bin"}, "output": str(tmp_path / f"{job_id}.out")}
    store.insert_jobs([Job(id=job_id, name=f"j{job_id}", user="root", uid=os.getuid(), gid=os.getgid(),
                           account="default", partition="batch", qos=qos, state="RUNNING",
                           submit_time=time.time(), spec=spec, request={"tasks": 1, "per_task": {"cpu": 1}},
                           start_time=time.time(),
                           allocation={"n1": {"tasks": 1, "gpus": [0, 1], "cpus": 1, "memory_mb": 100}},
                           node_list="n1", tres_alloc="cpu=1,mem=100M,node=1,gres/gpu=2")])


def _pass_for(agent, seconds: float, until=None) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        agent.step()
        if until is not None and until():
            return
        time.sleep(0.05)


@pytest.mark.parametrize("util,qos,ended", [
    (0.0, "interactive", True),    # idle GPUs in a QOS with idle_timeout: ended
    (35.0, "interactive", False),  # busy GPUs: never
    (None, "interactive", False),  # no readings (no NVML): never
    (0.0, "normal", False),        # idle, but the QOS has no idle_timeout
])
def test_idle_gpus_end_the_job_only_where_the_qos_says_and_readings_exist(env, util, qos, ended):
    cfg, store, tmp = env
    go = tmp / "go"
    _running(store, tmp, 1, qos, go)
    try:
        ag = Agent(cfg, store, ["n1"])
        ag.sampler._gpu_sampler = Readings(util)
        _pass_for(ag, LIMIT_S + 6, until=lambda: store.get_job(1).state != "RUNNING")
        job = store.get_job(1)
        if ended:
            assert (job.state, job.reason) == ("CANCELLED", IDLE_REASON)
            assert "DUE TO GPU IDLE TIMEOUT ***" in (tmp / "1.out").read_text()
        else:
            assert job.state == "RUNNING"
            go.touch()
            _pass_for(ag, 15, until=lambda: store.get_job(1).state != "RUNNING")
            assert (store.get_job(1).state, store.get_job(1).reason) == ("COMPLETED", "None")
    finally:
        go.touch()


def test_a_busy_sample_restarts_the_window(env):
    cfg, store, tmp = env
    go = tmp / "go"
    _running(store, tmp, 1, "interactive", go)
    try:
        ag = Agent(cfg, store, ["n1"])
        readings = Readings(0.0)
        ag.sampler._gpu_sampler = readings
        _pass_for(ag, LIMIT_S * 0.6)
        readings.util = 80.0  # one busy sample inside the window
        _pass_for(ag, 0.2)
        readings.util = 0.0
        _pass_for(ag, LIMIT_S * 0.6)
        assert store.get_job(1).state == "RUNNING"  # idle 0.6 s twice, never 1 s in a row
        _pass_for(ag, LIMIT_S + 6, until=lambda: store.get_job(1).state != "RUNNING")
        assert store.get_job(1).state == "CANCELLED"
    finally:
        go.touch()
