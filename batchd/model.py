"""Plain dataclasses that the store returns and the service passes around; ORM rows
never leave `batchd.store`. Field meanings and units are those of `store/tables.py`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any

HOUR_S = 3600
DAY_S = 86400


@dataclass
class Job:
    id: int
    name: str
    user: str
    uid: int
    gid: int
    account: str
    partition: str
    qos: str
    state: str
    submit_time: float
    spec: dict[str, Any]
    request: dict[str, Any]
    array_job_id: int | None = None
    array_task_id: int | None = None
    reason: str = "None"
    priority: int = 0
    nice: int = 0
    hold: bool = False
    eligible_time: float | None = None
    begin_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    time_limit_s: int | None = None
    exit_code: int = 0
    exit_signal: int = 0
    restarts: int = 0
    requeue: bool = True
    dependency: str | None = None
    comment: str | None = None
    node_list: str = ""
    tres_req: str = ""
    tres_alloc: str = ""
    billing: float = 0.0
    allocation: dict[str, Any] | None = None
    charge: dict[str, float] | None = None
    action: str | None = None
    action_by: int | None = None
    start_estimate: float | None = None
    submit_token: str | None = None
    launched_run: int | None = None

    @property
    def display_id(self) -> str:
        if self.array_job_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.id)


def job_of_fields(values: dict[str, Any]) -> Job:
    """The Job whose fields are `values`, which must name every field of Job and nothing
    else (unchecked): what a cycle's snapshot builds 10,000 times, at a seventh of the cost
    of `Job(**values)`."""
    j = object.__new__(Job)
    j.__dict__.update(values)
    return j


@dataclass
class UsageRec:
    job_id: int
    run: int
    name: str
    account: str
    user: str
    uid: int
    gid: int
    partition: str
    qos: str
    node_list: str
    tres_alloc: str
    tres: dict[str, float]
    billing: float
    submit_time: float
    start_time: float
    end_time: float
    elapsed_s: int
    state: str
    exit_code: int
    exit_signal: int
    array_job_id: int | None = None
    array_task_id: int | None = None
    cpu_time_s: float | None = None
    max_rss_mb: float | None = None
    gpu_util_pct: float | None = None
    gpu_mem_mb: float | None = None


@dataclass
class Account:
    name: str
    parent: str | None
    priority: int = 100
    shares: int = 1
    resources: dict[str, dict[str, float]] = field(default_factory=dict)
    policy: dict[str, Any] | None = None  # association limits (batchd.slurm.assocpolicy)


@dataclass
class Node:
    name: str
    state: str
    cpus: int
    memory_mb: int
    gpus: list[Any]
    heartbeat: float
    reason: str | None = None
    reason_uid: int | None = None
    reason_time: float | None = None


@dataclass
class SubmitFacts:
    """What a submission is checked against, read in one snapshot (Store.submit_facts):
    every account (creation order), the submitting user's associations (dicts as
    Store.list_associations gives them), the nodes (by name), and the jobs an earlier
    submission with the same token stored (by id; [] for none or without a token)."""
    accounts: list[Account]
    associations: list[dict[str, Any]]
    nodes: list[Node]
    repeated: list[Job]


def from_row(cls: type, row: Any) -> Any:
    """Copy the columns of an ORM row into the dataclass `cls` (same field names)."""
    return cls(**{f.name: getattr(row, f.name) for f in fields(cls) if hasattr(row, f.name)})


@dataclass(frozen=True)
class Price:
    """One price. `valid_to` None = open-ended. Times are unix seconds (UTC)."""
    tres: str
    per_hour: Decimal
    currency: str
    valid_from: float
    valid_to: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"tres": self.tres, "per_hour": str(self.per_hour), "currency": self.currency,
                "valid_from": self.valid_from, "valid_to": self.valid_to}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Price:
        return cls(tres=str(d["tres"]), per_hour=Decimal(str(d["per_hour"])), currency=str(d["currency"]),
                   valid_from=float(d["valid_from"]),
                   valid_to=None if d.get("valid_to") is None else float(d["valid_to"]))
