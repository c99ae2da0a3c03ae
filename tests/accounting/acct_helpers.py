"""Builders for the chargeback tests: usage records, running jobs, accounts, nodes, times.
(A module of its own: `conftest` is a name several test folders use.)"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

from batchd.model import Account, Node
from batchd.store import Store
from batchd.store.tables import JobRow, UsageRecord

_ids = itertools.count(1)


def ts(text: str) -> float:
    """ISO date/datetime, UTC -> unix seconds."""
    if len(text) == 10:
        text += "T00:00"
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


def usage(start: float, end: float, *, account: str = "a", user: str = "u", job_id: int | None = None,
          run: int = 0, tres: dict[str, float] | None = None, billing: float = 1.0, node: str = "gpu01",
          gpu_util_pct: float | None = None) -> dict[str, Any]:
    """A usage-record row (a plain dict for a bulk insert)."""
    jid = next(_ids) if job_id is None else job_id
    return dict(job_id=jid, run=run, name="j", account=account, user=user, uid=1000, gid=1000,
                partition="gpu", qos="normal", node_list=node, tres_alloc="",
                tres=tres if tres is not None else {"cpu": 4, "mem": 16384, "node": 1, "gres/gpu": 1,
                                                    "gres/gpu:h200": 1},
                billing=billing, submit_time=start, start_time=start, end_time=end,
                elapsed_s=int(end - start), state="COMPLETED", exit_code=0, exit_signal=0,
                gpu_util_pct=gpu_util_pct)


def insert_usage(store: Store, rows: list[dict[str, Any]]) -> None:
    with store.tx() as s:
        for i in range(0, len(rows), 5000):
            s.execute(UsageRecord.__table__.insert(), rows[i:i + 5000])


def insert_running(store: Store, job_id: int, start: float, tres_alloc: str, *, account: str = "a",
                   user: str = "u", billing: float = 1.0, node: str = "gpu01", restarts: int = 0,
                   charge: dict[str, float] | None = None) -> None:
    with store.tx() as s:
        s.add(JobRow(id=job_id, name="r", user=user, uid=1000, gid=1000, account=account, partition="gpu",
                     qos="normal", state="RUNNING", reason="None", priority=1, nice=0, hold=False,
                     submit_time=start, start_time=start, exit_code=0, exit_signal=0, restarts=restarts,
                     requeue=True, node_list=node, tres_req="", tres_alloc=tres_alloc, billing=billing,
                     charge=charge, spec={}, request={}))


def add_account(store: Store, name: str, gpu_quota: float) -> None:
    store.put_account(Account(name=name, parent="root",
                              resources={"gres/gpu": {"quota": gpu_quota, "limit": -1}}))


def add_node(store: Store, name: str, gpus: int, gpu_type: str = "h200", cpus: int = 64) -> None:
    store.upsert_node(Node(name=name, state="IDLE", cpus=cpus, memory_mb=512000,
                           gpus=[{"type": gpu_type, "count": gpus}], heartbeat=0.0))
