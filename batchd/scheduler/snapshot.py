"""The scheduler's input: a snapshot of the cluster, parsed and validated.

The format is the one of DESIGN.md section 5 (`"version": 1`). `load_snapshot` turns the
JSON dict into typed objects and raises `ValueError` naming the offending key
(`jobs[3].per_task.cpu: must be a number >= 0, got "x"`). Nothing here mutates the input.

Defaults chosen here (DESIGN.md section 4 where it speaks, KAI's where it does not):

- An account resource given without `limit` gets `limit = quota` (no borrowing); `-1` means
  unlimited for both. A resource an account does not list at all is unlimited for it (quota
  and limit -1, weight 1): KAI's convention, needed so that its victim order comes out the
  same (see kai_semantics.md section 7). Hence the KAI cases spell `"limit": -1` explicitly.
- `over_quota_weight` defaults to 1; `priority` to 100; `lending_limit` to none.
- A job's `per_task.cpu` defaults to 1, `mem` to 0; `tasks` to 1; `preemptible` to true;
  `priority` (QOS priority) to 0. A fractional GPU count is rounded up to whole GPUs.
- Node `state` IDLE, MIXED, ALLOCATED (or COMPLETING) takes new jobs; any other state, or a
  DRAIN/DOWN/FAIL/MAINT flag (`IDLE+DRAIN`), takes none (running jobs there still count).
- Running jobs (RUNNING, COMPLETING, CONFIGURING, SUSPENDED) must carry `allocation`; its
  `gpus` are device indices (ints) or `"<gpu index>:<mig uuid>"` for MIG instances.

Extensions of the documented format, all optional:

- `jobs[].eligible` (bool, default true) with `jobs[].reason`: a PENDING job with
  `"eligible": false` (held, waiting on a dependency or a begin time) is not considered by any
  pass and keeps its `reason` (`Dependency`, `BeginTime`, `JobHeldUser`, `JobHeldAdmin`,
  `DependencyNeverSatisfied`; default `Dependency`).
- `jobs[].qos` (str) and top-level `qos: [{"name", "max_gpus_per_user"}]`: a QOS limit on the
  GPUs (`gres/gpu`) one user may hold in that QOS (`-1` none); a job over it pends with
  `QOSMaxGRESPerUser`.
- `nodes[].shards` (int, default 0): `gres/shard` units the node offers.
- `nodes[].gpus[]` devices may carry `"slices"`: the number of compute slices of a MIG-capable
  GPU (default 4 for RTX PRO / A30 class types, whose type name contains `rtx` or `a30`, else 7).
- `accounts[].resources[r].lending_limit` (Kueue's lendingLimit).
- `jobs[].partition_nodes` (list of node names): the job may only run on these nodes (its
  partition); `jobs[].exclusive` (bool): the job takes whole nodes (all their idle GPUs,
  CPUs and memory) and only nodes nothing else runs on.
"""

from __future__ import annotations

import copy
import gc
import math
import re
from dataclasses import dataclass, field
from typing import Any

UNLIMITED = -1.0
INELIGIBLE_REASONS = ("Dependency", "BeginTime", "JobHeldUser", "JobHeldAdmin", "DependencyNeverSatisfied")
USABLE_NODE_STATES = frozenset({"IDLE", "MIXED", "MIX", "ALLOCATED", "ALLOC", "COMPLETING", "COMP"})
BAD_NODE_FLAGS = ("DRAIN", "DOWN", "FAIL", "MAINT", "POWERED_DOWN", "NOT_RESPONDING")
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"})
PENDING_STATES = frozenset({"PENDING", "REQUEUED"})
_PROFILE_SLICES = re.compile(r"(?:^|\.)(\d+)g\.")


def _err(path: str, msg: str, value: Any = None) -> ValueError:
    shown = "" if value is None else f", got {value!r}"
    return ValueError(f"{path}: {msg}{shown}")


def _num(d: dict, key: str, path: str, default: float | None = None, *, minimum: float | None = 0.0,
         allow_unlimited: bool = False, required: bool = False) -> float | None:
    if key not in d or d[key] is None:
        if required:
            raise _err(f"{path}.{key}", "is required")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and math.isnan(v)):
        raise _err(f"{path}.{key}", "must be a number", v)
    v = float(v)
    if allow_unlimited and v == UNLIMITED:
        return v
    if minimum is not None and v < minimum:
        raise _err(f"{path}.{key}", f"must be >= {minimum:g}" + (" or -1 (unlimited)" if allow_unlimited else ""), v)
    return v


def _int(d: dict, key: str, path: str, default: int | None = None, *, minimum: int = 0) -> int | None:
    v = _num(d, key, path, None, minimum=minimum)
    if v is None:
        return default
    if v != int(v):
        raise _err(f"{path}.{key}", "must be an integer", d[key])
    return int(v)


def _str(d: dict, key: str, path: str, default: str | None = None, *, required: bool = False) -> str | None:
    v = d.get(key)
    if v is None:
        if required:
            raise _err(f"{path}.{key}", "is required")
        return default
    if not isinstance(v, str) or (required and not v):
        raise _err(f"{path}.{key}", "must be a non-empty string", v)
    return v


def _rstr(d: dict, key: str, path: str) -> str:
    v = _str(d, key, path, required=True)
    assert v is not None
    return v


def mig_profile_slices(profile: str) -> int:
    """Compute slices of a MIG profile name (`1g.24gb` -> 1, `1c.3g.40gb` -> 3); 1 when unknown."""
    m = _PROFILE_SLICES.search(profile)
    return int(m.group(1)) if m else 1


def gpu_total_slices(gpu_type: str) -> int:
    t = gpu_type.lower()
    return 4 if ("rtx" in t or "a30" in t) else 7


@dataclass
class Slot:
    """One allocatable GPU unit of a node: a whole GPU (`key` = its index, an int) or a MIG
    instance (`key` = `"<gpu index>:<mig uuid>"`). `share` is what it counts toward
    `gres/gpu` (1.0 for a whole GPU, slices/total for a MIG instance)."""
    key: int | str
    type: str
    share: float
    whole: bool
    order: int


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


def node_usable(state: str) -> bool:
    s = state.upper().rstrip("*~#!%$@^-")
    parts = s.split("+")
    if parts[0] not in USABLE_NODE_STATES:
        return False
    return not any(flag in p for p in parts[1:] for flag in BAD_NODE_FLAGS)


def _parse_gpus(gpus: Any, path: str) -> list[Slot]:
    if gpus is None:
        return []
    if not isinstance(gpus, list):
        raise _err(path, "must be a list", gpus)
    slots: list[Slot] = []
    nxt = 0
    seen: set[int] = set()
    for i, g in enumerate(gpus):
        p = f"{path}[{i}]"
        if not isinstance(g, dict):
            raise _err(p, "must be an object", g)
        gtype = _rstr(g, "type", p)
        if "count" in g and "index" not in g:
            count = _int(g, "count", p, 0)
            for _ in range(count or 0):
                slots.append(Slot(nxt, gtype, 1.0, True, len(slots)))
                seen.add(nxt)
                nxt += 1
            continue
        idx = _int(g, "index", p)
        if idx is None:
            idx = nxt
        if idx in seen:
            raise _err(f"{p}.index", "duplicate GPU index", idx)
        seen.add(idx)
        nxt = max(nxt, idx + 1)
        mig = g.get("mig") or []
        if not isinstance(mig, list):
            raise _err(f"{p}.mig", "must be a list", mig)
        if not mig:
            slots.append(Slot(idx, gtype, 1.0, True, len(slots)))
            continue
        total = _int(g, "slices", p) or gpu_total_slices(gtype)
        for k, m in enumerate(mig):
            mp = f"{p}.mig[{k}]"
            if not isinstance(m, dict):
                raise _err(mp, "must be an object", m)
            prof = _rstr(m, "profile", mp)
            uuid = _rstr(m, "uuid", mp)
            share = min(1.0, mig_profile_slices(prof) / total)
            slots.append(Slot(f"{idx}:{uuid}", prof, share, False, len(slots)))
    return slots


def _parse_node(d: Any, i: int) -> Node:
    p = f"nodes[{i}]"
    if not isinstance(d, dict):
        raise _err(p, "must be an object", d)
    name = _str(d, "name", p, required=True)
    assert name is not None
    state = _str(d, "state", p, "IDLE") or "IDLE"
    return Node(name=name, cpus=_int(d, "cpus", p, 0) or 0, memory_mb=_int(d, "memory_mb", p, 0) or 0,
                state=state, usable=node_usable(state), shards=_int(d, "shards", p, 0) or 0,
                slots=_parse_gpus(d.get("gpus"), f"{p}.gpus"), raw_gpus=copy.deepcopy(d.get("gpus") or []),
                index=i)


def _parse_account(d: Any, i: int) -> Account:
    p = f"accounts[{i}]"
    if not isinstance(d, dict):
        raise _err(p, "must be an object", d)
    name = _str(d, "name", p, required=True)
    assert name is not None
    parent = _str(d, "parent", p)
    prio = _num(d, "priority", p, 100.0, minimum=None)
    res_raw = d.get("resources") or {}
    if not isinstance(res_raw, dict):
        raise _err(f"{p}.resources", "must be an object", res_raw)
    resources: dict[str, Resource] = {}
    for key, r in res_raw.items():
        rp = f"{p}.resources.{key}"
        check_resource_key(key, rp)
        if not isinstance(r, dict):
            raise _err(rp, "must be an object", r)
        quota = _num(r, "quota", rp, 0.0, allow_unlimited=True)
        limit = _num(r, "limit", rp, None, allow_unlimited=True)
        assert quota is not None
        if limit is None:
            limit = quota  # DESIGN.md: limit unset = quota (no borrowing)
        weight = _num(r, "over_quota_weight", rp, 1.0)
        lending = _num(r, "lending_limit", rp, None)
        assert weight is not None
        resources[key] = Resource(quota, limit, weight, lending, dict(r))
    return Account(name=name, parent=parent, priority=int(prio or 0), shares=d.get("shares", 1),
                   resources=resources, order=i, raw=d)


def check_resource_key(key: str, path: str) -> None:
    if key in ("gres/gpu", "cpu", "mem", "gres/shard"):
        return
    if key.startswith("gres/gpu:") and len(key) > len("gres/gpu:"):
        return
    raise _err(path, "unknown resource (gres/gpu, gres/gpu:TYPE, gres/shard, cpu, mem)")


_KNOWN_PT = frozenset({"gres/gpu", "cpu", "mem", "gres/shard"})


def _is_num(v: Any) -> bool:
    c = v.__class__
    return (c is int or c is float) and v == v


def _parse_job(d: Any, i: int, node_names: set[str], accounts: set[str]) -> Job:
    """One job. Fast checks first; the slow helpers only run to word an error."""
    p = f"jobs[{i}]"
    if not isinstance(d, dict):
        raise _err(p, "must be an object", d)
    get = d.get
    jid = get("id")
    if not (jid.__class__ is int or (jid.__class__ is str and jid)):
        if isinstance(jid, bool) or not isinstance(jid, int | str) or jid == "":
            raise _err(f"{p}.id", "must be an integer or a string", jid)
    account = get("account")
    if account.__class__ is not str:
        account = _str(d, "account", p, required=True)
    if account not in accounts:
        raise _err(f"{p}.account", "unknown account", account)
    state = get("state") or "PENDING"
    if state.__class__ is not str:
        _str(d, "state", p)
    state = state.upper()
    per_task_raw = get("per_task") or {}
    if not isinstance(per_task_raw, dict):
        raise _err(f"{p}.per_task", "must be an object", per_task_raw)
    per_task: dict[str, float] = {}
    for k, v in per_task_raw.items():
        if k not in _KNOWN_PT:
            check_resource_key(k, f"{p}.per_task.{k}")
        if not _is_num(v) or v < 0:
            _num(per_task_raw, k, f"{p}.per_task")
        if v:
            per_task[k] = v
    if "cpu" not in per_task:
        per_task["cpu"] = 1
    tasks = get("tasks", 1)
    if tasks.__class__ is not int or tasks < 1:
        tasks = _int(d, "tasks", p, 1, minimum=1) or 1
    nodes = get("nodes")
    if nodes is not None and (nodes.__class__ is not int or nodes < 1):
        nodes = _int(d, "nodes", p, None, minimum=1)
    tpn = get("tasks_per_node")
    if tpn is not None and (tpn.__class__ is not int or tpn < 1):
        tpn = _int(d, "tasks_per_node", p, None, minimum=1)
    if nodes is not None and nodes > tasks:
        raise _err(f"{p}.nodes", f"must be <= tasks ({tasks})", nodes)
    alloc = get("allocation")
    if state in ACTIVE_STATES:
        if not isinstance(alloc, dict) or not alloc:
            raise _err(f"{p}.allocation", f"is required for a {state} job")
        for nname, a in alloc.items():
            if nname not in node_names:
                raise _err(f"{p}.allocation.{nname}", "unknown node")
            if not isinstance(a, dict):
                raise _err(f"{p}.allocation.{nname}", "must be an object", a)
            if not isinstance(a.get("gpus", []), list):
                raise _err(f"{p}.allocation.{nname}.gpus", "must be a list", a.get("gpus"))
    else:
        alloc = None
    eligible = get("eligible", True)
    if eligible.__class__ is not bool:
        raise _err(f"{p}.eligible", "must be true or false", eligible)
    tl = get("time_limit_s")
    if tl is not None and not _is_num(tl):
        raise _err(f"{p}.time_limit_s", "must be a number of seconds or null", tl)
    preemptible = get("preemptible", True)
    if preemptible.__class__ is not bool:
        raise _err(f"{p}.preemptible", "must be true or false", preemptible)
    pn = get("partition_nodes")
    if pn is not None and (not isinstance(pn, list) or not all(isinstance(x, str) for x in pn)):
        raise _err(f"{p}.partition_nodes", "must be a list of node names or null", pn)
    exclusive = get("exclusive", False)
    if exclusive.__class__ is not bool:
        raise _err(f"{p}.exclusive", "must be true or false", exclusive)
    prio = get("priority", 0)
    if not _is_num(prio):
        prio = _num(d, "priority", p, 0.0, minimum=None) or 0
    submit = get("submit_time", 0.0)
    if not _is_num(submit):
        submit = _num(d, "submit_time", p, 0.0, minimum=None) or 0.0
    start = get("start_time")
    if start is not None and not _is_num(start):
        start = _num(d, "start_time", p, None, minimum=None)
    reason = get("reason")
    if reason is not None and reason.__class__ is not str:
        _str(d, "reason", p)
    qos = get("qos")
    if qos is not None and qos.__class__ is not str:
        _str(d, "qos", p)
    return Job(jid, account, str(get("user") or ""), state, int(prio), preemptible, submit, start,
               None if tl is None or tl < 0 else int(tl), tasks, nodes, tpn, per_task, alloc, eligible,
               reason, qos, i, d, None if pn is None else frozenset(pn), exclusive)


def _check_tree(accounts: list[Account]) -> None:
    by_name = {a.name: a for a in accounts}
    for i, a in enumerate(accounts):
        if a.parent is not None and a.parent not in by_name:
            raise _err(f"accounts[{i}].parent", "unknown account", a.parent)
        seen = {a.name}
        cur = a.parent
        while cur is not None:
            if cur in seen:
                raise _err(f"accounts[{i}].parent", "makes a cycle in the account tree", a.parent)
            seen.add(cur)
            cur = by_name[cur].parent


def load_snapshot(d: dict) -> Snapshot:
    """Validate a snapshot dict (DESIGN.md section 5) and return a `Snapshot`.

    Raises `ValueError` whose message starts with the path of the bad key. The cyclic garbage
    collector is paused while the objects are built (restored on return)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(d)
    finally:
        if was_enabled:
            gc.enable()


def _load(d: dict) -> Snapshot:
    if not isinstance(d, dict):
        raise _err("snapshot", "must be a JSON object", type(d).__name__)
    version = d.get("version", 1)
    if version != 1:
        raise _err("version", "unsupported snapshot version (expected 1)", version)
    for key in ("nodes", "accounts", "jobs"):
        if not isinstance(d.get(key), list):
            raise _err(key, "is required and must be a list", d.get(key))
    policy = d.get("policy") or {}
    if not isinstance(policy, dict):
        raise _err("policy", "must be an object", policy)
    now = _num(d, "now", "snapshot", 0.0, minimum=None) or 0.0
    nodes = [_parse_node(n, i) for i, n in enumerate(d["nodes"])]
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise _err("nodes", "duplicate node name")
    accounts = [_parse_account(a, i) for i, a in enumerate(d["accounts"])]
    anames = [a.name for a in accounts]
    if len(set(anames)) != len(anames):
        raise _err("accounts", "duplicate account name")
    _check_tree(accounts)
    node_names = set(names)
    jobs = [_parse_job(j, i, node_names, set(anames)) for i, j in enumerate(d["jobs"])]
    ids = [str(j.id) for j in jobs]
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise _err("jobs", "duplicate job id", dup)
    qos = d.get("qos") or []
    if not isinstance(qos, list):
        raise _err("qos", "must be a list", qos)
    usage = d.get("usage") or {}
    if not isinstance(usage, dict):
        raise _err("usage", "must be an object", usage)
    return Snapshot(version=1, now=now, policy=dict(policy), nodes=nodes, accounts=accounts, jobs=jobs,
                    users=list(d.get("users") or []), usage=usage, qos=qos, raw=d)
