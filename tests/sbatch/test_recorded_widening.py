"""What Slurm records for requests that are widened at allocation (issue 15.4), recorded from
Slurm 22.05 (../shared/slurm-peer: one node `vm`, 16 CPUs, 4 h200, DefMemPerCPU 1024,
TRESBillingWeights CPU=1.0,Mem=0.25G,GRES/gpu=2.0) on 2026-12-04 with
`sbatch --wrap 'env | grep ^SLURM_ ...'` and `sacct -X -P -o ReqTRES,AllocTRES,NCPUS`:

    --cpus-per-gpu=4 --gpus=2   ReqTRES billing=5,cpu=1,gres/gpu=2,mem=1G,node=1
                                AllocTRES billing=14,cpu=8,gres/gpu:h200=2,gres/gpu=2,mem=8G,node=1
                                SLURM_TASKS_PER_NODE=8 SLURM_CPUS_ON_NODE=8
    --exclusive                 ReqTRES billing=1,cpu=1,mem=1G,node=1
                                AllocTRES billing=28,cpu=16,gres/gpu:h200=4,gres/gpu=4,mem=16G,node=1
                                SLURM_TASKS_PER_NODE=16 SLURM_CPUS_ON_NODE=16
    -n 3 -c 2                   ReqTRES = AllocTRES billing=7,cpu=6,mem=6G,node=1, SLURM_TASKS_PER_NODE=3
"""

import pytest
from sbatch_helpers import CLUSTER

from batchd.node import jobenv
from batchd.server import jobspec


def _spec(**kw):
    base = {"script": "#!/bin/sh\ntrue\n", "cwd": "/tmp", "environment": {}, "name": "wrap"}
    return {**base, **kw}


@pytest.mark.parametrize("kw, req_tres, cpus, mem_mb", [
    ({"cpus_per_gpu": 4, "gpus": {"count": 2}}, "cpu=1,mem=1G,node=1,billing=5,gres/gpu=2", 8, 8192),
    ({"exclusive": True}, "cpu=1,mem=1G,node=1,billing=1", 16, 16384),
    ({"ntasks": 3, "cpus_per_task": 2}, "cpu=6,mem=6G,node=1,billing=7", 6, 6144),
])
def test_req_tres_is_the_request_before_widening(kw, req_tres, cpus, mem_mb):
    r = jobspec.resolve(_spec(**kw), CLUSTER, "root", 0)
    assert r["tres_req"] == req_tres
    assert (r["cpus"], r["mem_mb"]) == (cpus, mem_mb)  # what the allocation holds (AllocTRES)


@pytest.mark.parametrize("spec, alloc_cpus, tasks, want", [
    ({"cpus_per_gpu": 4}, 8, 1, "8"),
    ({"exclusive": True}, 16, 1, "16"),
    ({"cpus_per_task": 4}, 4, 1, "1"),
    ({"ntasks": 3, "cpus_per_task": 2}, 6, 3, "3"),
    ({}, 1, 1, "1"),
])
def test_tasks_per_node_of_a_job_without_a_task_count(spec, alloc_cpus, tasks, want):
    env = jobenv.job_environment(_spec(**spec), {"id": 7}, {"vm": {"tasks": tasks, "cpus": alloc_cpus}}, "vm",
                                 "refcluster")
    assert env["SLURM_TASKS_PER_NODE"] == want


def test_array_task_step_comes_from_the_array_text():
    # Slurm 22.05 (peer): --array=1-7:2%3 -> task 3 sees SLURM_ARRAY_TASK_STEP=2, COUNT=4,
    # MIN=1, MAX=7 (batchd's launch request sent step 1)
    from batchd.config import Config
    from batchd.model import Job
    from batchd.node.launchrequest import job_dict

    spec = _spec(array="1-7:2%3")
    req = jobspec.resolve(spec, CLUSTER, "root", 0)
    j = Job(id=9, name="wrap", user="root", uid=0, gid=0, account="default", partition="gpu", qos="normal",
            state="RUNNING", submit_time=0.0, spec=spec, request=req, array_job_id=6, array_task_id=3)
    job = job_dict(j, Config(path="t.toml"))
    env = jobenv.job_environment(spec, job, {"vm": {"tasks": 1, "cpus": 1}}, "vm", "refcluster")
    assert [env[f"SLURM_ARRAY_{k}"] for k in ("JOB_ID", "TASK_ID", "TASK_COUNT", "TASK_MIN", "TASK_MAX",
                                              "TASK_STEP")] == ["6", "3", "4", "1", "7", "2"]
