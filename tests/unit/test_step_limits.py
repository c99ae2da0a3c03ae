"""`srun -n N` inside a job asks for more tasks than the job has CPUs: refused as Slurm
22.05 refuses it, and no task of it is stored (so no supervisor is ever started).

Recorded from the real Slurm 22.05 (shared/slurm-peer) on 2026-12-01, inside
`sbatch -n1 -c1` (job 14):

    $ srun -n 100 true          exit 1
    srun: error: Unable to create step for job 14: More processors requested than permitted
    $ srun -n 2 true            exit 1
    srun: error: Unable to create step for job 14: More processors requested than permitted
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from batchd.errors import InvalidRequest
from batchd.model import Job
from batchd.node import steprunner
from batchd.server import steps
from batchd.store import Store
from batchd.store import steps as step_store
from batchd.store.migrate import upgrade

SLURM_LINE = "Unable to create step for job {id}: More processors requested than permitted"


@pytest.fixture
def service(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    store.insert_jobs([Job(id=14, name="j", user="root", uid=0, gid=0, account="default", partition="batch",
                           qos="normal", state="RUNNING", submit_time=time.time(), spec={"workdir": "/"},
                           request={"tasks": 1, "per_task": {"cpu": 1}}, start_time=time.time(),
                           allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100}},
                           node_list="n1", tres_alloc="cpu=1,mem=100M,node=1")])
    yield SimpleNamespace(store=store, is_admin=lambda c: True, require_owner=lambda c, j, message="": None,
                          wake=lambda: None)
    store.close()


@pytest.mark.parametrize("ntasks", [100, 2])
def test_more_tasks_than_the_job_has_cpus_is_refused_as_slurm_does(service, ntasks):
    with pytest.raises(InvalidRequest) as e:
        steps.create(service, SimpleNamespace(uid=0), {"job_id": 14, "argv": ["true"], "ntasks": ntasks})
    assert e.value.message == SLURM_LINE.format(id=14)
    assert e.value.exit_code == 1
    assert step_store.list_tasks(service.store, job_id=14) == []


def test_as_many_tasks_as_cpus_is_a_step(service):
    out = steps.create(service, SimpleNamespace(uid=0), {"job_id": 14, "argv": ["true"], "ntasks": 1})
    assert [t["procid"] for t in out["tasks"]] == [0]


@pytest.mark.parametrize("body", [{"ntasks": "x"}, {"ntasks": -3}, {"nodes": "two"}])
def test_malformed_counts_are_a_clear_error(service, body):
    with pytest.raises(InvalidRequest):
        steps.create(service, SimpleNamespace(uid=0), {"job_id": 14, "argv": ["true"], **body})


def test_step_tasks_are_launched_in_the_background_of_the_agent_pass(service, tmp_path, monkeypatch):
    """A step of many tasks never holds the agent's pass: the pass hands the launches to
    LAUNCH_WORKERS threads and returns; a later pass records them RUNNING."""
    import threading

    from batchd.node import launcher

    store = service.store
    store.update_job(14, allocation={"n1": {"tasks": 8, "gpus": [], "cpus": 8, "memory_mb": 100}})
    steps.create(service, SimpleNamespace(uid=0), {"job_id": 14, "argv": ["true"], "ntasks": 8})
    gate = threading.Event()
    started: list[int] = []

    def launch(req, spool_dir):
        started.append(req.run)
        gate.wait(30)
        return launcher.LaunchInfo(1, time.time(), spool_dir)

    monkeypatch.setattr(launcher, "launch", launch)
    runner = steprunner.StepRunner(store, str(tmp_path / "spool"), {"n1"}, "c", "index")
    try:
        runner.step()  # returns with every launch still blocked
        assert {t.state for t in step_store.list_tasks(store, job_id=14)} == {"PENDING"}
        deadline = time.time() + 10
        while len(started) < steprunner.LAUNCH_WORKERS and time.time() < deadline:
            time.sleep(0.01)
        assert len(started) == steprunner.LAUNCH_WORKERS  # a bounded number at a time
        runner.step()  # no second launch of a task in flight
    finally:
        gate.set()
    deadline = time.time() + 10
    while time.time() < deadline:
        runner._collect_launches()
        if not runner._inflight and len(started) == 8:
            break
        time.sleep(0.02)
    assert sorted(started) == sorted(set(started)) and len(started) == 8
    assert {t.state for t in step_store.list_tasks(store, job_id=14)} == {"RUNNING"}
