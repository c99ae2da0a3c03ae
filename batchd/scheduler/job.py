"""A job during one cycle, and the resource-key constants the passes share."""

from __future__ import annotations

import math
from typing import Any

from .fairshare import Queue
from .placement import Take
from .snapshot import ACTIVE_STATES

GPU = "gres/gpu"
TYPED = "gres/gpu:"
BASE_RES = (GPU, "cpu", "mem")
EPS = 1e-9
_PLAIN = frozenset({GPU, "cpu", "mem"})
_CPU_POOL = frozenset({"cpu"})


class JobRT:
    """A job during one cycle. `R` is its whole-gang request on the tracked resource keys
    (an untyped GPU request counts on `gres/gpu` only); `charge` what it holds once placed.
    Fields that most jobs never change are class-level defaults (cheap to build 100k)."""

    takes: list[Take] | None = None
    charge: dict[str, float] = {}
    started = False
    evicted = False
    evict_seq = -1            # its place among the cycle's evictions, while evicted (Session.evict)
    end_time: float | None = None
    qos_max: float | None = None
    typed: list[tuple[str, int]] = []
    shard = 0.0
    R: dict[str, float] = {}
    gpus_total = 0
    sort_key: tuple = ()
    shape: tuple = ()
    amounts: tuple = ()
    time_limit_key = float("inf")
    pools: frozenset = frozenset()
    allowed: frozenset[str] | None = None
    exclusive = False
    array: object = None      # the array job id of a task whose array has a %N throttle
    array_max: int | None = None
    assoc: Any = None         # the association limits it runs under (assoclimits.Limits), if any

    def __init__(self, spec: Any, queue: Queue):
        self.spec = spec
        self.id = spec.id
        self.queue = queue
        self.prio = spec.priority
        self.preemptible = spec.preemptible
        self.tasks = spec.tasks
        self.nodes = spec.nodes
        self.tpn = spec.tasks_per_node
        pt = spec.per_task
        g = pt.get(GPU, 0)
        self.untyped = g if g.__class__ is int else int(math.ceil(g - 1e-9))
        if len(pt) > 3 or not _PLAIN.issuperset(pt):
            self.typed = sorted((k[len(TYPED):], int(math.ceil(v - 1e-9)))
                                for k, v in pt.items() if k.startswith(TYPED) and v)
            self.shard = float(pt.get("gres/shard", 0.0))
        self.cpu = pt.get("cpu", 0.0)
        self.mem = pt.get("mem", 0.0)
        self.running = spec.state in ACTIVE_STATES
        self.user = spec.user
        self.time_limit = spec.time_limit_s
        jid = spec.id
        self.idk = (0, jid, "") if jid.__class__ is int else (1, 0, str(jid))
        if spec.partition_nodes is not None:
            self.allowed = spec.partition_nodes
        if spec.exclusive:
            self.exclusive = True
        raw = spec.raw
        if "array_max_running" in raw:
            m = raw["array_max_running"]
            if m.__class__ is int and m > 0 and raw.get("array_job_id") is not None:
                self.array, self.array_max = raw["array_job_id"], m

    def __repr__(self) -> str:
        return f"Job({self.id})"


def id_key(jid: Any) -> tuple:
    return (0, jid, "") if isinstance(jid, int) else (1, 0, str(jid))
