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

    # set from the spec (`_static`), and the cycle's account queue
    spec: Any
    queue: Queue
    id: Any
    prio: int
    preemptible: bool
    tasks: int
    nodes: int | None
    tpn: int | None
    untyped: int
    cpu: float
    mem: float
    running: bool
    user: str
    time_limit: int | None
    idk: tuple
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
    sid = ""                  # str(id): its key in the cycle's priorities
    preemptor = False         # victims were preempted for it (snapshot `preemptor`: held.py)
    partition: Any = None     # its snapshot `partition` (limits.py)
    time_limit_admin = False  # its time limit was set by an operator (limits.py)
    rkey: tuple = ()          # its request's key but for account and user, interned (Session._job_request)

    def __init__(self, spec: Any, queue: Queue):
        d = spec.rt
        if d is None:
            d = spec.rt = {**_static(spec), **_PER_CYCLE}
        # a copy of a dict that already holds every key the session sets on a job (a copy
        # of a table of the right size, where adding them one by one would grow it twice)
        self.__dict__ = d.copy()
        self.spec = spec
        self.queue = queue

    def __repr__(self) -> str:
        return f"Job({self.id})"


def id_key(jid: Any) -> tuple:
    return (0, jid, "") if isinstance(jid, int) else (1, 0, str(jid))


def _static(spec: Any) -> dict[str, Any]:
    """The fields of a `JobRT` that depend on its spec alone: computed once per spec (a
    snapshot loaded with `reuse` keeps its specs from cycle to cycle) and copied into each
    cycle's JobRT. Nothing here is changed in place by a cycle."""
    d: dict[str, Any] = {"id": spec.id, "prio": spec.priority, "preemptible": spec.preemptible,
                         "tasks": spec.tasks, "nodes": spec.nodes, "tpn": spec.tasks_per_node}
    pt = spec.per_task
    g = pt.get(GPU, 0)
    d["untyped"] = g if g.__class__ is int else int(math.ceil(g - 1e-9))
    if len(pt) > 3 or not _PLAIN.issuperset(pt):
        d["typed"] = sorted((k[len(TYPED):], int(math.ceil(v - 1e-9)))
                            for k, v in pt.items() if k.startswith(TYPED) and v)
        d["shard"] = float(pt.get("gres/shard", 0.0))
    d["cpu"] = pt.get("cpu", 0.0)
    d["mem"] = pt.get("mem", 0.0)
    d["running"] = spec.state in ACTIVE_STATES
    d["user"] = spec.user
    d["time_limit"] = spec.time_limit_s
    jid = spec.id
    raw = spec.raw
    d["idk"] = (0, jid, "") if jid.__class__ is int else (1, 0, str(jid))
    d["sid"] = str(jid)
    if raw.get("preemptor") is True:
        d["preemptor"] = True
    part = raw.get("partition")
    if part is not None:
        d["partition"] = part
    if raw.get("time_limit_admin") is True:
        d["time_limit_admin"] = True
    if spec.partition_nodes is not None:
        d["allowed"] = spec.partition_nodes
    if spec.exclusive:
        d["exclusive"] = True
    if "array_max_running" in raw:
        m = raw["array_max_running"]
        if m.__class__ is int and m > 0 and raw.get("array_job_id") is not None:
            d["array"], d["array_max"] = raw["array_job_id"], m
    # what identifies its request apart from its account and user (Session._job_request)
    key = (tuple(pt.items()), spec.tasks, spec.nodes, spec.tasks_per_node, spec.preemptible, spec.priority,
           spec.time_limit_s, d.get("allowed"), d.get("exclusive", False), d.get("array"))
    if len(_KEYS) >= _KEYS_MAX:
        _KEYS.clear()  # a key interned before and one after are equal but not one object: a cache miss only
    d["rkey"] = _KEYS.setdefault(key, key)
    return d


#: the fields `Session` sets on every job of a cycle, at their class defaults until then
_PER_CYCLE: dict[str, Any] = {"spec": None, "queue": None, **{k: getattr(JobRT, k) for k in (
    "sort_key", "qos_max", "assoc", "R", "gpus_total", "pools", "shape", "amounts", "time_limit_key")}}

#: request keys, interned: equal keys of the specs made since the last clear are one object,
#: so a cycle's request cache (Session._job_request) is keyed by its id, not its hash
_KEYS: dict[tuple, tuple] = {}
_KEYS_MAX = 50_000
