"""Fixtures for the query commands: a fake daemon (client.request patched) and the busy
cluster of the Slurm recordings (views/00_scene_setup.txt, 01_busy_cluster.txt) rebuilt
as JOB_VIEW / NODE_VIEW / PARTITION_VIEW / ACCT_ROW dicts. Times are UTC.

A fake JOB_VIEW carries only keys the daemon sends (`JOB_VIEW_KEYS`, taken from
`batchd.server.views.job_view` itself): a key the daemon never sends would test output no user sees."""

import calendar
import os
import time
from pathlib import Path

import pytest

from batchd.cli import client
from batchd.config import load_config
from batchd.model import Job
from batchd.server.views import job_view


def _job_view_keys() -> frozenset[str]:
    """The keys of every JOB_VIEW the daemon sends (the view of a bare pending job has them all)."""
    cfg = load_config(str(Path(__file__).resolve().parents[2] / "examples" / "slurm-reference.toml"))
    bare = Job(id=1, name="x", user="root", uid=0, gid=0, account="training", partition="gpu", qos="normal",
               state="PENDING", submit_time=0.0, spec={}, request={})
    return frozenset(job_view(bare, cfg, now=0.0))


JOB_VIEW_KEYS = _job_view_keys()


def ts(text):
    """`2026-11-30T14:43:42` (UTC) -> unix seconds."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


NOW = ts("2026-11-30T14:43:48")
WD = "/scratch/golden/scene"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    for k in ("SQUEUE_FORMAT", "SQUEUE_FORMAT2", "SQUEUE_SORT", "SACCT_FORMAT", "SINFO_FORMAT"):
        monkeypatch.delenv(k, raising=False)
    yield
    monkeypatch.undo()
    time.tzset()


def job(id, name, account, prio, state="PENDING", reason="Priority", **kw):
    """A JOB_VIEW of the scene with the defaults most of its jobs share."""
    running = state == "RUNNING"
    j = {
        "id": id, "array_job_id": None, "array_task_id": None, "array_task_str": None,
        "display_id": str(id), "name": name, "user": "root", "uid": 0, "gid": 0, "group": "root",
        "account": account, "partition": "gpu", "qos": "normal", "state": state,
        "reason": "None" if running else reason, "priority": prio, "nice": 0,
        "submit_time": ts("2026-11-30T14:43:42" if running else "2026-11-30T14:43:44"),
        "eligible_time": ts("2026-11-30T14:43:42" if running else "2026-11-30T14:43:44"),
        "start_time": ts("2026-11-30T14:43:42") if running else None, "end_time": None,
        "time_limit_s": -1, "run_time_s": 6 if running else 0, "nodes": 1,
        "node_list": "vm" if running else "", "ntasks": 1, "cpus": 1, "mem_mb": 1024,
        "mem_per_cpu_mb": 1024, "tres_req": "cpu=1,mem=1G,node=1,billing=1",
        "tres_alloc": "cpu=1,mem=1G,node=1,billing=1" if running else "",
        "gres": {}, "gpus_str": "", "workdir": WD, "stdout": f"{WD}/slurm-{id}.out",
        "stderr": f"{WD}/slurm-{id}.out", "command": None, "dependency": None, "requeue": True,
        "restarts": 0, "exit_code": "0:0", "derived_exit_code": "0:0", "comment": None,
        "batch_host": "vm" if running else None, "start_estimate": None, "tres_per_node": None,
        "tres_per_job": None,
    }
    j.update(kw)
    assert set(j) <= JOB_VIEW_KEYS, f"the daemon never sends {sorted(set(j) - JOB_VIEW_KEYS)}"
    return j


def scene_jobs():
    """The 13 jobs of views/01_busy_cluster.txt, in the order the daemon lists them."""
    g1 = "gres:gpu:1"
    return [
        job(90, "nb-over", "notebooks", 12041, reason="AssocGrpGRES", tres_per_node="gres:gpu:2",
            tres_req="cpu=1,mem=1G,node=1,billing=5,gres/gpu=2"),
        job(89, "serve-wait", "serving", 11791, reason="Resources", tres_per_node=g1),
        job(88, "train-wait", "training", 4541, tres_per_node="gres:gpu:2", time_limit_s=600),
        job(96, "lowqos", "training", 4291, qos="low", tres_per_node=g1),
        job(94, "arr", "training", 4291, array_job_id=94, array_task_str="[0-9%2]",
            display_id="94_[0-9%2]", tres_per_node=g1, time_limit_s=300,
            tres_req="cpu=1,mem=1G,node=1,billing=3,gres/gpu=1",
            eligible_time=ts("2026-11-30T14:43:45"),
            stdout=f"{WD}/slurm-94_4294967294.out", stderr=f"{WD}/slurm-94_4294967294.out"),
        job(92, "later", "training", 4041, reason="BeginTime", start_time=ts("2026-11-30T15:43:44")),
        job(93, "dep", "training", 4041, reason="Dependency", dependency="afterok:84(unfulfilled)"),
        job(95, "niced", "training", 3791, nice=500, tres_per_node=g1),
        job(91, "held", "training", 0, reason="JobHeldUser"),
        job(85, "serve-b", "serving", 11860, "RUNNING", cpus=2, mem_mb=8192, mem_per_cpu_mb=None,
            mem_per_node_mb=0, time_limit_s=3600, tres_per_job=g1, mem_per_tres="gres:gpu:8192",
            tres_alloc="cpu=2,mem=8G,node=1,billing=6,gres/gpu=1,gres/gpu:h200=1",
            gres={"vm": [1]}, gpus_str="gpu:h200:1(IDX:1)"),
        job(86, "nb-c", "notebooks", 11791, "RUNNING", tres_per_node=g1,
            tres_alloc="cpu=1,mem=1G,node=1,billing=3,gres/gpu=1,gres/gpu:h200=1",
            gres={"vm": [0]}, gpus_str="gpu:h200:1(IDX:0)"),
        job(84, "train-a", "training", 4667, "RUNNING", cpus=4, mem_mb=4096, mem_per_cpu_mb=None,
            mem_per_node_mb=4096, time_limit_s=1800, tres_per_node="gres:gpu:h200:2",
            tres_alloc="cpu=4,mem=4G,node=1,billing=9,gres/gpu=2,gres/gpu:h200=2",
            gres={"vm": [2, 3]}, gpus_str="gpu:h200:2(IDX:2-3)", cpu_ids={"vm": "3-6"}),
        job(87, "cpu-only", "training", 4083, "RUNNING", cpus=2, mem_mb=2048,
            tres_alloc="cpu=2,mem=2G,node=1,billing=2"),
    ]


def scene_nodes():
    node = {"name": "vm", "state": "MIXED", "reason": None, "cpus": 16, "cpus_alloc": 9,
            "memory_mb": 23081, "memory_alloc_mb": 15360, "free_mem_mb": 23594, "cpu_load": 0.38,
            "gres": "gpu:h200:4", "gres_used": "gpu:h200:4(IDX:0-3)", "partitions": ["gpu", "debug"],
            "features": [], "sockets": 2, "cores_per_socket": 8, "threads_per_core": 1,
            "os": "Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0",
            "boot_time": ts("2026-11-30T14:32:37"), "start_time": ts("2026-11-30T14:38:23"),
            "last_busy_time": ts("2026-11-30T14:43:15"),
            "cfg_tres": "cpu=16,mem=23081M,billing=29,gres/gpu=4,gres/gpu:h200=4",
            "alloc_tres": "cpu=9,mem=15G,gres/gpu=4,gres/gpu:h200=4"}
    tres = "cpu=16,mem=23081M,node=1,billing=29,gres/gpu=4,gres/gpu:h200=4"
    weights = "CPU=1.0,Mem=0.25G,GRES/gpu=2.0"
    parts = [
        {"name": "gpu", "default": True, "nodes": ["vm"], "max_time_s": -1, "default_time_s": None,
         "state": "UP", "priority_job_factor": 1, "preempt_mode": "REQUEUE", "tres": tres,
         "billing_weights": weights},
        {"name": "debug", "default": False, "nodes": ["vm"], "max_time_s": 3600, "default_time_s": 600,
         "state": "UP", "priority_job_factor": 1, "preempt_mode": "REQUEUE", "tres": tres,
         "billing_weights": weights},
    ]
    return [node], parts


class FakeDaemon:
    """Stands in for client.request: answers from canned data, records every call."""

    def __init__(self):
        self.jobs = scene_jobs()
        self.nodes, self.partitions = scene_nodes()
        self.records = []
        self.calls = []
        self.replies = {}   # path -> reply (dict) or exception to raise

    def __call__(self, method, path, body=None, query=None, timeout=60.0):
        self.calls.append((method, path, body, dict(query or {})))
        r = self.replies.get(path)
        if isinstance(r, Exception):
            raise r
        if r is not None:
            return r
        if path == "/v1/jobs":
            ids = (query or {}).get("ids")
            jobs = self.jobs
            if ids:
                want = set(ids.split(","))
                jobs = [j for j in jobs if str(j["id"]) in want or str(j.get("array_job_id")) in want]
            keys = (query or {}).get("keys")
            if keys:  # as the daemon trims (batchd.server.viewmemo.trimmed): every layout test runs on them
                jobs = [{k: j[k] for k in keys.split(",") if k in j} for j in jobs]
            return {"jobs": jobs}
        if path == "/v1/nodes":
            return {"nodes": self.nodes, "partitions": self.partitions}
        if path == "/v1/accounting":
            return {"records": self.records}
        if path == "/v1/ping":
            return {"cluster": "refcluster", "version": "0.1.0"}
        return {"done": (body or {}).get("ids", []), "errors": []}


@pytest.fixture
def daemon(monkeypatch):
    d = FakeDaemon()
    monkeypatch.setattr(client, "request", d)
    return d


def golden(name):
    with open(os.path.join(os.path.dirname(__file__), "golden", name)) as f:
        return f.read()
