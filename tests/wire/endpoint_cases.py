"""A small cluster driven in-process (a real Service on SQLite, the reference config, no
socket) and one good request per endpoint of batchd/protocol.py's ENDPOINTS, for the
protocol and authorization tests.

`World` holds jobs of a plain user (`OWNER`, uid 4101): one pending, one held, one
running with a step, one ended with its usage record; `OTHER` (uid 4102) is another plain
user, `ADMIN` root. Neither plain uid is in the admin group (there is none here)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire_helpers import spec

from batchd.control.controller import Controller
from batchd.model import UsageRec
from batchd.server import steps
from batchd.server.service import Caller, Service
from batchd.store import Store
from tests.refstore import reference_store

OWNER = Caller(uid=4101, gid=4101)
OTHER = Caller(uid=4102, gid=4102)
ADMIN = Caller(uid=0, gid=0)
NODE = "vm"


@dataclass
class World:
    svc: Service
    store: Store
    tmp: Path
    jobs: dict[str, int] = field(default_factory=dict)

    def close(self) -> None:
        self.store.close()


def _submit(w: World, who: Caller, **kw: Any) -> int:
    reply = w.svc.submit(who, spec(w.tmp, **kw))
    return int(reply["job_id"])


def _run(w: World, job_id: int) -> None:
    """The job as the controller and the agent leave a started one (no process behind it)."""
    assert w.store.update_job(job_id, ("PENDING",), state="RUNNING", start_time=time.time(), node_list=NODE,
                              allocation={NODE: {"tasks": 1, "cpus": 1, "memory_mb": 1024, "gpus": []}},
                              tres_alloc="cpu=1,mem=1G,node=1,billing=1")


def make_world(tmp: Path) -> World:
    cfg, store = reference_store(tmp / "batchd.db", dev=True)
    ctl = Controller(cfg, store)
    svc = Service(cfg, store, snapshot=ctl.snapshot, decisions=lambda: ctl.last_decisions)
    w = World(svc, store, tmp)
    w.jobs["pending"] = _submit(w, OWNER, name="pending", comment="c")
    w.jobs["held"] = _submit(w, OWNER, name="held", hold=True)
    w.jobs["array"] = _submit(w, OWNER, name="array", array="0-3")
    w.jobs["running"] = _submit(w, OWNER, name="running")
    _run(w, w.jobs["running"])
    w.jobs["step"] = steps.create(svc, OWNER, {"job_id": w.jobs["running"], "argv": ["hostname"]})["step_id"]
    w.jobs["ended"] = ended = _submit(w, OWNER, name="ended")
    _run(w, ended)
    j = store.get_job(ended)
    assert j is not None and j.start_time is not None
    end = j.start_time + 60
    store.finish_run(ended, 0, {"state": "COMPLETED", "end_time": end, "exit_code": 0}, UsageRec(
        job_id=ended, run=0, name="ended", account="default", user=j.user, uid=j.uid, gid=j.gid, partition="gpu",
        qos="normal", node_list=NODE, tres_alloc="cpu=1,mem=1G,node=1,billing=1",
        tres={"cpu": 1, "mem": 1024, "node": 1}, billing=1.0, submit_time=j.submit_time, start_time=j.start_time,
        end_time=end, elapsed_s=60, state="COMPLETED", exit_code=0, exit_signal=0))
    return w


Request = tuple[str, Any]  # (target with its query, body or None)
PRICE = {"tres": "gres/gpu:h200", "per_hour": "2.50", "currency": "EUR", "valid_from": "2026-01-01"}

#: (case id, (method, path), the request for world w, the reply's lists that must not be empty
#: for the key check to mean something)
CASES: list[tuple[str, tuple[str, str], Callable[[World], Request], tuple[str, ...]]] = [
    ("ping", ("GET", "/v1/ping"), lambda w: ("/v1/ping", None), ()),
    ("submit", ("POST", "/v1/jobs"), lambda w: ("/v1/jobs", {"spec": spec(w.tmp, name="new")}), ()),
    ("submit_test_only", ("POST", "/v1/jobs"),
     lambda w: ("/v1/jobs", {"spec": spec(w.tmp, test_only=True)}), ()),
    ("jobs", ("GET", "/v1/jobs"), lambda w: ("/v1/jobs?all=1", None), ("jobs",)),
    ("jobs_fold", ("GET", "/v1/jobs"), lambda w: ("/v1/jobs?fold=1", None), ("jobs",)),
    ("signal", ("POST", "/v1/jobs/signal"), lambda w: ("/v1/jobs/signal", {"ids": [str(w.jobs["pending"])]}),
     ("done",)),
    ("hold", ("POST", "/v1/jobs/hold"), lambda w: ("/v1/jobs/hold", {"ids": [str(w.jobs["pending"])]}), ("done",)),
    ("release", ("POST", "/v1/jobs/release"), lambda w: ("/v1/jobs/release", {"ids": [str(w.jobs["held"])]}),
     ("done",)),
    ("requeue", ("POST", "/v1/jobs/requeue"), lambda w: ("/v1/jobs/requeue", {"ids": [str(w.jobs["running"])]}),
     ("done",)),
    ("update", ("POST", "/v1/jobs/update"),
     lambda w: ("/v1/jobs/update", {"ids": [str(w.jobs["pending"])], "changes": {"comment": "new"}}), ("done",)),
    ("accounting", ("GET", "/v1/accounting"), lambda w: ("/v1/accounting?all_users=1", None), ("records",)),
    ("nodes", ("GET", "/v1/nodes"), lambda w: ("/v1/nodes", None), ("nodes", "partitions")),
    ("snapshot", ("GET", "/v1/snapshot"), lambda w: ("/v1/snapshot", None), ("jobs", "nodes", "accounts")),
    ("step", ("POST", "/v1/steps"), lambda w: ("/v1/steps", {"job_id": w.jobs["running"], "argv": ["true"]}),
     ("tasks",)),
    ("step_tasks", ("GET", "/v1/steps"),
     lambda w: (f"/v1/steps?job_id={w.jobs['running']}&step_id={w.jobs['step']}", None), ("tasks",)),
    ("steps", ("GET", "/v1/steps"), lambda w: ("/v1/steps", None), ("steps",)),
    ("step_cancel", ("POST", "/v1/steps/cancel"),
     lambda w: ("/v1/steps/cancel", {"job_id": w.jobs["running"], "step_id": w.jobs["step"]}), ()),
    ("why", ("GET", "/v1/why"), lambda w: (f"/v1/why?job={w.jobs['pending']}", None), ("lines",)),
    ("controller", ("GET", "/v1/controller"), lambda w: ("/v1/controller", None), ()),
    ("node_state", ("POST", "/v1/nodes/state"),
     lambda w: ("/v1/nodes/state", {"node": NODE, "action": "drain", "reason": "test"}), ()),
    ("token", ("POST", "/v1/token"), lambda w: ("/v1/token", {"lifespan": 60}), ("token",)),
    ("accounts", ("GET", "/v1/accounts"), lambda w: ("/v1/accounts", None), ("account",)),
    ("accounts_slurm", ("GET", "/v1/accounts"), lambda w: ("/v1/accounts?slurm=1", None), ("account", "qos")),
    ("apply", ("POST", "/v1/accounts/apply"), lambda w: ("/v1/accounts/apply", {
        "doc": {"account": [{"name": "team"}], "user": [{"name": "4101", "account": "team"}]}}), ("changes",)),
    ("modify", ("POST", "/v1/accounts/modify"),
     lambda w: ("/v1/accounts/modify", {"op": "account.add", "name": "team2"}), ("changes",)),
    ("report", ("GET", "/v1/report"), lambda w: ("/v1/report?by_user=1&daily=1&raw=1", None), ()),
    ("prices", ("GET", "/v1/prices"), lambda w: ("/v1/prices", None), ()),
    ("set_prices", ("POST", "/v1/prices"), lambda w: ("/v1/prices", {"prices": [PRICE]}), ()),
    ("eff", ("GET", "/v1/eff"), lambda w: (f"/v1/eff?job={w.jobs['ended']}", None), ("runs",)),
    ("rollup", ("POST", "/v1/rollup"), lambda w: ("/v1/rollup", {}), ()),
]
