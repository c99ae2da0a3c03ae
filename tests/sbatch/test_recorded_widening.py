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

from batchd import jobenv, jobspec


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
