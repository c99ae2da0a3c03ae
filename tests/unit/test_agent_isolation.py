"""The node agent's isolation: the mode it picks from the config and what it puts into
each LaunchRequest (mode, CPU ids from the allocation, device nodes in systemd mode)."""

import time

import pytest

from batchd.config import parse_config
from batchd.errors import ConfigError
from batchd.model import Job, Node
from batchd.node import isolation, launcher
from batchd.node.agent import Agent
from batchd.store import Store
from batchd.store.migrate import upgrade


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(s.engine)
    yield s
    s.close()


def _cfg(tmp_path, **top):
    return parse_config({"state_dir": str(tmp_path), **top,
                         "node": [{"name": "n1", "cpus": 8, "memory_mb": 1000,
                                   "gpus": [{"index": 0, "type": "h200", "uuid": "GPU-a"},
                                            {"index": 1, "type": "h200", "uuid": "GPU-b", "minor": 4}]}]})


def _job(store, tmp_path):
    store.upsert_node(Node(name="n1", state="IDLE", cpus=8, memory_mb=1000,
                           heartbeat=time.time(), gpus=[{"index": 0, "type": "h200", "uuid": "GPU-a", "minor": 0},
                                 {"index": 1, "type": "h200", "uuid": "GPU-b", "minor": 4}]))
    spec = {"script": "#!/bin/sh\ntrue\n", "workdir": str(tmp_path), "environment": {"PATH": "/usr/bin:/bin"},
            "output": str(tmp_path / "out.txt")}
    store.insert_jobs([Job(id=9, name="j", user="root", uid=0, gid=0, account="default", partition="batch",
                           qos="normal", state="RUNNING", submit_time=time.time(), spec=spec,
                           request={"tasks": 1, "per_task": {"cpu": 2}}, start_time=time.time(),
                           allocation={"n1": {"tasks": 1, "gpus": [1], "cpus": 2, "cpu_ids": [4, 5],
                                              "memory_mb": 300}},
                           node_list="n1", tres_alloc="cpu=2,mem=300M,node=1,gres/gpu=1")])


def _captured(monkeypatch):
    seen = []

    def fake_launch(req, spool, before_start=None):
        seen.append(req)
        return launcher.LaunchInfo(0, 0.0, spool)

    monkeypatch.setattr(launcher, "launch", fake_launch)
    return seen


def _report(mode):
    return isolation.IsolationReport(mode=mode, reasons=["systemd is not PID 1"] if mode == "plain" else [])


def test_systemd_mode_request_carries_cpus_and_devices(tmp_path, store, monkeypatch):
    monkeypatch.setattr(isolation, "detect", lambda probe=False: _report("systemd"))
    ag = Agent(_cfg(tmp_path), store, ["n1"])
    assert ag.isolation == "systemd"
    _job(store, tmp_path)
    seen = _captured(monkeypatch)
    ag.step()
    [req] = seen
    assert (req.isolation, req.cpu_ids, req.mem_limit_mb) == ("systemd", [4, 5], 300)
    assert req.devices == ["/dev/nvidia4", *isolation.NVIDIA_CONTROL_DEVICES]  # minor 4 from the inventory


def test_plain_mode_request_pins_cpus_only(tmp_path, store, monkeypatch):
    monkeypatch.setattr(isolation, "detect", lambda probe=False: _report("plain"))
    ag = Agent(_cfg(tmp_path), store, ["n1"])
    _job(store, tmp_path)
    seen = _captured(monkeypatch)
    ag.step()
    [req] = seen
    assert (req.isolation, req.cpu_ids, req.devices) == ("plain", [4, 5], None)


def test_config_forces_plain_even_where_systemd_works(tmp_path, store, monkeypatch):
    monkeypatch.setattr(isolation, "detect", lambda probe=False: _report("systemd"))
    assert Agent(_cfg(tmp_path, isolation="plain"), store, ["n1"]).isolation == "plain"


def test_systemd_asked_for_but_unavailable_refuses_to_start(tmp_path, store, monkeypatch):
    monkeypatch.setattr(isolation, "detect", lambda probe=False: _report("plain"))
    with pytest.raises(ConfigError, match="systemd is not PID 1"):
        Agent(_cfg(tmp_path, isolation="systemd"), store, ["n1"])


def test_bad_isolation_setting_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match='isolation: must be "auto", "systemd" or "plain"'):
        _cfg(tmp_path, isolation="cgroup")


@pytest.mark.parametrize("shards,per,mem,want", [
    (1, 4, 143771, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=35942M"}),
    (3, 8, None, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "37"}),
    (1, 200, 1000, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "1", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=5M"}),
    (2, 0, 1000, {}),
], ids=["quarter", "no-memory-known", "tiny-share", "no-shards-configured"])
def test_mps_environment(shards, per, mem, want):
    from batchd.node.jobenv import mps_environment

    assert mps_environment(shards, per, mem) == want


def test_shard_job_gets_mps_limits_when_the_node_runs_mps(tmp_path, store, monkeypatch):
    monkeypatch.setattr(isolation, "detect", lambda probe=False: _report("plain"))
    store.upsert_node(Node(name="n1", state="IDLE", cpus=8, memory_mb=1000, heartbeat=time.time(),
                           gpus=[{"index": 0, "type": "h200", "uuid": "GPU-a", "memory_mb": 80000}]))
    spec = {"script": "#!/bin/sh\ntrue\n", "workdir": str(tmp_path), "environment": {"PATH": "/usr/bin:/bin"},
            "output": str(tmp_path / "out.txt")}
    store.insert_jobs([Job(id=11, name="s", user="root", uid=0, gid=0, account="default", partition="batch",
                           qos="normal", state="RUNNING", submit_time=time.time(), spec=spec,
                           request={"tasks": 1, "per_task": {"cpu": 1}}, start_time=time.time(),
                           allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100, "shards": 2,
                                              "shard_gpu": 0}},
                           node_list="n1", tres_alloc="cpu=1,mem=100M,node=1,gres/shard=2")])
    for mps, want in ((True, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40000M"}),
                      (False, {})):
        ag = Agent(_cfg(tmp_path, shard_per_gpu=4, mps=mps), store, ["n1"])
        seen = _captured(monkeypatch)
        store.update_job(11, launched_run=None)  # the fake launch made nothing: launch again
        ag.step()
        [req] = seen
        got = {k: v for k, v in req.env.items() if k.startswith("CUDA_MPS")}
        assert got == want
        assert req.env["CUDA_VISIBLE_DEVICES"] == "0"


def test_mps_setting_must_be_a_boolean(tmp_path):
    with pytest.raises(ConfigError, match="mps: must be true or false"):
        _cfg(tmp_path, mps="yes")


def test_gpu_env_uuid_puts_the_cards_uuids_in_cuda_visible_devices(tmp_path, store, monkeypatch):
    """gpu_env = "uuid": the whole GPU's UUID from the node's inventory (it used to fall back
    to the index because nothing filled the allocation's uuids)."""
    monkeypatch.setattr(isolation, "detect", lambda probe=False: _report("plain"))
    ag = Agent(_cfg(tmp_path, gpu_env="uuid"), store, ["n1"])
    _job(store, tmp_path)
    seen = _captured(monkeypatch)
    ag.step()
    [req] = seen
    assert req.env["CUDA_VISIBLE_DEVICES"] == "GPU-b" and req.env["SLURM_JOB_GPUS"] == "1"


@pytest.mark.parametrize("alloc,want", [
    ({"gpus": [1, 0]}, {"gpus": [1, 0], "gpu_uuids": ["GPU-b", "GPU-a"]}),
    ({"gpus": [], "shards": 1, "shard_gpus": [1]}, {"gpus": [], "shards": 1, "shard_gpus": [1],
                                                    "shard_gpu_uuid": "GPU-b"}),
    ({"gpus": [7]}, {"gpus": [7]}),  # not in the inventory: left to the index
    ({"gpus": ["0:MIG-x", 1]}, {"gpus": ["0:MIG-x", 1]}),  # mixed: positions would not match
], ids=["whole", "shard", "unknown", "mixed-mig"])
def test_with_gpu_uuids(alloc, want):
    from batchd.node.jobenv import with_gpu_uuids

    inv = {"n1": [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": "GPU-b"}]}
    assert with_gpu_uuids({"n1": alloc}, inv) == {"n1": want}
