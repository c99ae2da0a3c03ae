"""The typed snapshot (docs/snapshot.md) as `load_snapshot` builds it; see snapshot.py
for the format, its defaults and extensions."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from batchd.slurm.gres import NodeGpus


@dataclass
class Slot:
    """One allocatable GPU unit of a node: a whole GPU (`key` = its index, an int) or a MIG
    instance (`key` = `"<gpu index>:<mig uuid>"`). `share` is what it counts toward
    `gres/gpu` (1.0 for a whole GPU, its card share for a MIG instance: batchd.slurm.gres);
    `card`/`card_type`: the index and type of the physical GPU it is (part of)."""
    key: int | str
    type: str
    share: float
    whole: bool
    order: int
    card: int = 0
    card_type: str = ""


@dataclass
class Node:
    name: str
    cpus: int
    memory_mb: int
    state: str
    usable: bool
    shards: int
    slots: list[Slot]
    raw_gpus: list[dict]
    index: int
    inventory: NodeGpus = field(default_factory=NodeGpus)


@dataclass
class Resource:
    """One account resource: `quota` (-1 unlimited), `limit` (-1 none), weight, lending limit."""
    quota: float
    limit: float
    over_quota_weight: float
    lending_limit: float | None
    raw: dict


@dataclass
class Account:
    name: str
    parent: str | None
    priority: int
    shares: Any
    resources: dict[str, Resource]
    order: int
    raw: dict


@dataclass
class Job:
    id: Any
    account: str
    user: str
    state: str
    priority: int
    preemptible: bool
    submit_time: float
    start_time: float | None
    time_limit_s: int | None
    tasks: int
    nodes: int | None
    tasks_per_node: int | None
    per_task: dict[str, float]
    allocation: dict[str, dict] | None
    eligible: bool
    reason: str | None
    qos: str | None
    index: int
    raw: dict
    partition_nodes: frozenset[str] | None = None
    exclusive: bool = False
    rt: dict | None = field(default=None, repr=False, compare=False)  # JobRT's fields of it (job.py), once computed


@dataclass
class Snapshot:
    """A validated snapshot. `raw` keeps the dict it was loaded from (for the priority hook)."""
    version: int
    now: float
    policy: dict
    nodes: list[Node]
    accounts: list[Account]
    jobs: list[Job]
    users: list
    usage: dict
    qos: list
    raw: dict = field(repr=False, default_factory=dict)

    def to_dict(self) -> dict:
        """The snapshot as a JSON-ready dict in the documented format (a deep copy)."""
        out: dict[str, Any] = {"version": self.version, "now": self.now, "policy": copy.deepcopy(self.policy)}
        out["nodes"] = [{"name": n.name, "cpus": n.cpus, "memory_mb": n.memory_mb, "state": n.state,
                         "gpus": copy.deepcopy(n.raw_gpus), **({"shards": n.shards} if n.shards else {})}
                        for n in self.nodes]
        out["accounts"] = [{"name": a.name, "parent": a.parent, "priority": a.priority, "shares": a.shares,
                            "resources": {k: copy.deepcopy(r.raw) for k, r in a.resources.items()}}
                           for a in self.accounts]
        out["jobs"] = [copy.deepcopy(j.raw) for j in self.jobs]
        for k in ("users", "usage", "qos"):
            v = getattr(self, k)
            if v:
                out[k] = copy.deepcopy(v)
        return out
