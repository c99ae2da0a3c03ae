"""Helpers for the priority tests: the recorded fair-share scenarios."""

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
SCENARIOS = DATA / "scenarios" / "fairshare"


def load_case(name):
    return json.loads((SCENARIOS / f"{name}.json").read_text())

VIEWS = DATA / "slurm-reference" / "views"

# The recorded Slurm 22.05 cluster of tests/data/slurm-reference (views/01_busy_cluster.txt,
# six seconds after the submissions; Slurm's stored factors were computed at submit, so
# the pending jobs here are submitted at `now` (age 0)): one node, 16 CPUs, 23081 MiB, 4 h200; accounts
# serving 50, training 30, notebooks 20; user root in each; only training has usage.
REF_NOW = 2_000_000


def _job(jid, acct, gpus, *, state="PENDING", cpus=1, mem=1024, limit=None, start=None, **kw):
    per = {"cpu": cpus, "mem": mem}
    if gpus:
        per["gres/gpu"] = gpus
    j = {"id": jid, "account": acct, "user": "root", "state": state, "partition": "gpu",
         "submit_time": REF_NOW if state == "PENDING" else REF_NOW - 6, "time_limit_s": limit, "tasks": 1, "per_task": per}
    if state == "RUNNING":
        j["start_time"] = start if start is not None else REF_NOW - 6
        j["allocation"] = {"vm": {"tasks": 1, "gpus": list(range(gpus)), "cpus": cpus, "memory_mb": mem}}
    j.update(kw)
    return j


def reference_snapshot(training_usage=161.0):
    return {
        "version": 1, "now": REF_NOW, "cluster": "refcluster",
        "policy": {"calc_period_s": 60, "weight_age": 1000, "weight_fairshare": 10000, "weight_jobsize": 1000,
                   "weight_partition": 1000, "weight_qos": 2000,
                   "weight_tres": "CPU=100,Mem=100,GRES/gpu=1000",
                   "tres_billing_weights": "CPU=1.0,Mem=0.25G,GRES/gpu=2.0"},
        "nodes": [{"name": "vm", "cpus": 16, "memory_mb": 23081, "gpus": [{"type": "h200", "count": 4}]}],
        "partitions": [{"name": "gpu", "default": True, "priority_job_factor": 1}],
        "accounts": [{"name": "notebooks", "parent": None, "shares": 20},
                     {"name": "serving", "parent": None, "shares": 50},
                     {"name": "training", "parent": None, "shares": 30}],
        "users": [{"name": "root", "account": a, "shares": 1} for a in ("root", "notebooks", "serving", "training")],
        "usage": {"users": {"training/root": training_usage}},
        "jobs": [
            _job(84, "training", 2, state="RUNNING", cpus=4, mem=4096, limit=1800),
            _job(85, "serving", 1, state="RUNNING", cpus=2, mem=8192, limit=3600),
            _job(86, "notebooks", 1, state="RUNNING"),
            _job(87, "training", 0, state="RUNNING", cpus=2, mem=2048),
            _job(88, "training", 2, limit=600),
            _job(89, "serving", 1),
            _job(90, "notebooks", 2, reason="AssocGrpGRES"),
            _job(91, "training", 0, hold=True, reason="JobHeldUser"),
            _job(92, "training", 0, begin_time=REF_NOW + 3594, reason="BeginTime"),
            _job(93, "training", 0, reason="Dependency"),
            _job(94, "training", 1, limit=300),
            _job(95, "training", 1, nice=500),
            _job(96, "training", 1, qos="low"),
        ],
    }


def recorded(view, command):
    """The output lines of `$ command` in a recorded view file."""
    lines = (VIEWS / view).read_text().splitlines()
    i = lines.index(f"$ {command}")
    out = []
    for ln in lines[i + 1:]:
        if ln.startswith("[exit "):
            break
        out.append(ln)
    return out
