"""The scheduler's input: a snapshot of the cluster, parsed and validated.

The format is the one of docs/snapshot.md (`"version": 1`). `load_snapshot` turns the
JSON dict into typed objects and raises `ValueError` naming the offending key
(`jobs[3].per_task.cpu: must be a number >= 0, got "x"`). Nothing here mutates the input.

Defaults chosen here (docs/architecture.md, "Accounts", where it speaks, KAI's where it does not):

- An account resource given without `limit` gets `limit = quota` (no borrowing); `-1` means
  unlimited for both. A resource an account does not list at all is unlimited for it (quota
  and limit -1, weight 1): KAI's convention, needed so that its victim order comes out the
  same. Hence the KAI cases spell `"limit": -1` explicitly.
- `over_quota_weight` defaults to 1; `priority` to 100; `lending_limit` to none.
- A job's `per_task.cpu` defaults to 1, `mem` to 0; `tasks` to 1; `preemptible` to true;
  `priority` (QOS priority) to 0. A fractional GPU count is rounded up to whole GPUs.
- Node `state` IDLE, MIXED, ALLOCATED (or COMPLETING) takes new jobs; any other state, or a
  DRAIN/DOWN/FAIL/MAINT flag (`IDLE+DRAIN`), takes none (running jobs there still count).
- Running jobs (RUNNING, COMPLETING, CONFIGURING, SUSPENDED) must carry `allocation`; its
  `gpus` are device indices (ints) or `"<gpu index>:<mig uuid>"` for MIG instances.
  Optional per node: `cpu_ids` (the CPU ids the job holds; without them its CPUs are held
  by count only, no particular ids; ids held twice or outside `0..cpus-1` are ignored),
  `shards` with `shard_gpus: [index]` (the card they are on; the older `shard_gpu: index`
  is read too; without either, the shards are put on a card as a new job's would be).

Extensions of the documented format, all optional:

- `jobs[].eligible` (bool, default true) with `jobs[].reason`: a PENDING job with
  `"eligible": false` (held, waiting on a dependency or a begin time) is not considered by any
  pass and keeps its `reason` (`Dependency`, `BeginTime`, `JobHeldUser`, `JobHeldAdmin`,
  `DependencyNeverSatisfied`; default `Dependency`).
- `jobs[].qos` (str) and top-level `qos: [{"name", "max_gpus_per_user"}]`: a QOS limit on the
  GPUs (`gres/gpu`) one user may hold in that QOS (`-1` none); a job over it pends with
  `QOSMaxGRESPerUser`.
- `nodes[].shards` (int, default 0): `gres/shard` units the node offers, split evenly over
  its whole (non-MIG) GPUs; a job's shards on a node come from one card.
- Decisions: each node of a started job's allocation carries `cpu_ids` (ascending; absent on
  a node without CPUs) and, for shards, `shard_gpus: [index]`; each start carries `charge`,
  what the allocation is charged for by the GPU model (batchd/slurm/gres.py, docs/gpu-model.md).
- `jobs[].charge` (on a running job, optional): its stored charge in record form (priority's
  TRES of the job; the scheduler itself counts the allocation).
- `nodes[].gpus[]` devices may carry `"slices"`: the number of compute slices of a MIG-capable
  GPU (default 4 for RTX PRO / A30 class types, whose type name contains `rtx` or `a30`, else 7);
  a MIG instance counts its profile's compute slices over them (`1c.3g.40gb`: 1), batchd/slurm/gres.py.
- `accounts[].resources[r].lending_limit` (Kueue's lendingLimit).
- `jobs[].array_job_id` with `jobs[].array_max_running` (int > 0): a task of a job array with
  Slurm's `%N` throttle; at most N tasks of the array run, counting those running and those
  this cycle starts (the others pend with `JobArrayTaskLimit`).
- `jobs[].partition_nodes` (list of node names): the job may only run on these nodes (its
  partition); `jobs[].exclusive` (bool): the job takes whole nodes (all their idle GPUs,
  CPUs and memory) and only nodes nothing else runs on.
- `accounts[].policy` preemption keys (`within_account`, `reclaim_within_cohort`,
  `borrow_within_cohort`, `min_runtime_reclaim_s`, `min_runtime_preempt_s`) and `qos[]`'s
  `min_runtime_reclaim_s` / `min_runtime_preempt_s`: who may preempt whom (victims.py).
- `jobs[].preempting_for` (job id, on a running job): an earlier cycle preempted this job for
  that pending job and it is still ending (grace time); its devices are reserved for that job
  (no other job is placed on them, nobody chooses it as a victim again) while the job is
  pending and eligible. `jobs[].preemptor` (bool, on a pending job): victims were preempted
  for this job; it is placed first on what they hold or freed (see held.py).
"""

from __future__ import annotations

import copy
import gc
from typing import Any

from batchd.slurm.gres import card_slices, instance_share, parse_node_gpus

from .fields import (
    check_resource_key,
    field_error,
    get_int,
    get_num,
    get_str,
    is_num,
    req_str,
)
from .limits import partition_max_times
from .model import Account, Job, Node, Resource, Slot, Snapshot

INELIGIBLE_REASONS = ("Dependency", "BeginTime", "JobHeldUser", "JobHeldAdmin", "DependencyNeverSatisfied")
USABLE_NODE_STATES = frozenset({"IDLE", "MIXED", "MIX", "ALLOCATED", "ALLOC", "COMPLETING", "COMP"})
BAD_NODE_FLAGS = ("DRAIN", "DOWN", "FAIL", "MAINT", "POWERED_DOWN", "NOT_RESPONDING")
ACTIVE_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"})
PENDING_STATES = frozenset({"PENDING", "REQUEUED"})




def node_usable(state: str) -> bool:
    s = state.upper().rstrip("*~#!%$@^-")
    parts = s.split("+")
    if parts[0] not in USABLE_NODE_STATES:
        return False
    return not any(flag in p for p in parts[1:] for flag in BAD_NODE_FLAGS)


def _parse_gpus(gpus: Any, path: str) -> list[Slot]:
    """The node's allocatable slots, validated with their paths; shares by batchd.slurm.gres."""
    if gpus is None:
        return []
    if not isinstance(gpus, list):
        raise field_error(path, "must be a list", gpus)
    slots: list[Slot] = []
    nxt = 0
    seen: set[int] = set()
    for i, g in enumerate(gpus):
        p = f"{path}[{i}]"
        if not isinstance(g, dict):
            raise field_error(p, "must be an object", g)
        gtype = req_str(g, "type", p)
        if "count" in g and "index" not in g:
            count = get_int(g, "count", p, 0)
            for _ in range(count or 0):
                slots.append(Slot(nxt, gtype, 1.0, True, len(slots), nxt, gtype))
                seen.add(nxt)
                nxt += 1
            continue
        idx = get_int(g, "index", p)
        if idx is None:
            idx = nxt
        if idx in seen:
            raise field_error(f"{p}.index", "duplicate GPU index", idx)
        seen.add(idx)
        nxt = max(nxt, idx + 1)
        mig = g.get("mig") or []
        if not isinstance(mig, list):
            raise field_error(f"{p}.mig", "must be a list", mig)
        if not mig:
            slots.append(Slot(idx, gtype, 1.0, True, len(slots), idx, gtype))
            continue
        total = card_slices(gtype, get_int(g, "slices", p))
        for k, m in enumerate(mig):
            mp = f"{p}.mig[{k}]"
            if not isinstance(m, dict):
                raise field_error(mp, "must be an object", m)
            prof = req_str(m, "profile", mp)
            uuid = req_str(m, "uuid", mp)
            slots.append(Slot(f"{idx}:{uuid}", prof, instance_share(prof, total), False, len(slots), idx, gtype))
    return slots


def _parse_node(d: Any, i: int) -> Node:
    p = f"nodes[{i}]"
    if not isinstance(d, dict):
        raise field_error(p, "must be an object", d)
    name = get_str(d, "name", p, required=True)
    assert name is not None
    state = get_str(d, "state", p, "IDLE") or "IDLE"
    shards = get_int(d, "shards", p, 0) or 0
    slots = _parse_gpus(d.get("gpus"), f"{p}.gpus")
    try:
        inventory = parse_node_gpus(d.get("gpus"), shards)
    except ValueError as e:
        raise field_error(f"{p}.{str(e).split(':', 1)[0]}", str(e).split(": ", 1)[-1], d.get("gpus")) from None
    return Node(name=name, cpus=get_int(d, "cpus", p, 0) or 0, memory_mb=get_int(d, "memory_mb", p, 0) or 0,
                state=state, usable=node_usable(state), shards=shards, slots=slots,
                raw_gpus=copy.deepcopy(d.get("gpus") or []), index=i, inventory=inventory)


def _parse_account(d: Any, i: int) -> Account:
    p = f"accounts[{i}]"
    if not isinstance(d, dict):
        raise field_error(p, "must be an object", d)
    name = get_str(d, "name", p, required=True)
    assert name is not None
    parent = get_str(d, "parent", p)
    prio = get_num(d, "priority", p, 100.0, minimum=None)
    res_raw = d.get("resources") or {}
    if not isinstance(res_raw, dict):
        raise field_error(f"{p}.resources", "must be an object", res_raw)
    resources: dict[str, Resource] = {}
    for key, r in res_raw.items():
        rp = f"{p}.resources.{key}"
        check_resource_key(key, rp)
        if not isinstance(r, dict):
            raise field_error(rp, "must be an object", r)
        quota = get_num(r, "quota", rp, 0.0, allow_unlimited=True)
        limit = get_num(r, "limit", rp, None, allow_unlimited=True)
        assert quota is not None
        if limit is None:
            limit = quota  # docs/snapshot.md: limit unset = quota (no borrowing)
        weight = get_num(r, "over_quota_weight", rp, 1.0)
        lending = get_num(r, "lending_limit", rp, None)
        assert weight is not None
        resources[key] = Resource(quota, limit, weight, lending, dict(r))
    return Account(name=name, parent=parent, priority=int(prio or 0), shares=d.get("shares", 1),
                   resources=resources, order=i, raw=d)


_KNOWN_PT = frozenset({"gres/gpu", "cpu", "mem", "gres/shard"})


def _parse_job(d: Any, i: int, node_names: set[str], accounts: set[str]) -> Job:
    """One job. Fast checks first; the slow helpers only run to word an error."""
    p = f"jobs[{i}]"
    if not isinstance(d, dict):
        raise field_error(p, "must be an object", d)
    get = d.get
    jid = get("id")
    if not (jid.__class__ is int or (jid.__class__ is str and jid)):
        if isinstance(jid, bool) or not isinstance(jid, int | str) or jid == "":
            raise field_error(f"{p}.id", "must be an integer or a string", jid)
    account = get("account")
    if account.__class__ is not str:
        account = get_str(d, "account", p, required=True)
    if account not in accounts:
        raise field_error(f"{p}.account", "unknown account", account)
    state = get("state") or "PENDING"
    if state.__class__ is not str:
        get_str(d, "state", p)
    state = state.upper()
    per_task_raw = get("per_task") or {}
    if not isinstance(per_task_raw, dict):
        raise field_error(f"{p}.per_task", "must be an object", per_task_raw)
    per_task: dict[str, float] = {}
    for k, v in per_task_raw.items():
        if k not in _KNOWN_PT:
            check_resource_key(k, f"{p}.per_task.{k}")
        if not is_num(v) or v < 0:
            get_num(per_task_raw, k, f"{p}.per_task")
        if v:
            per_task[k] = v
    if "cpu" not in per_task:
        per_task["cpu"] = 1
    tasks = get("tasks", 1)
    if tasks.__class__ is not int or tasks < 1:
        tasks = get_int(d, "tasks", p, 1, minimum=1) or 1
    nodes = get("nodes")
    if nodes is not None and (nodes.__class__ is not int or nodes < 1):
        nodes = get_int(d, "nodes", p, None, minimum=1)
    tpn = get("tasks_per_node")
    if tpn is not None and (tpn.__class__ is not int or tpn < 1):
        tpn = get_int(d, "tasks_per_node", p, None, minimum=1)
    if nodes is not None and nodes > tasks:
        raise field_error(f"{p}.nodes", f"must be <= tasks ({tasks})", nodes)
    alloc = get("allocation")
    if state in ACTIVE_STATES:
        if not isinstance(alloc, dict) or not alloc:
            raise field_error(f"{p}.allocation", f"is required for a {state} job")
        for nname, a in alloc.items():
            if nname not in node_names:
                raise field_error(f"{p}.allocation.{nname}", "unknown node")
            if not isinstance(a, dict):
                raise field_error(f"{p}.allocation.{nname}", "must be an object", a)
            if not isinstance(a.get("gpus", []), list):
                raise field_error(f"{p}.allocation.{nname}.gpus", "must be a list", a.get("gpus"))
            ids = a.get("cpu_ids")
            if ids is not None and (not isinstance(ids, list) or any(c.__class__ is not int for c in ids)):
                raise field_error(f"{p}.allocation.{nname}.cpu_ids", "must be a list of CPU ids", ids)
    else:
        alloc = None
    eligible = get("eligible", True)
    if eligible.__class__ is not bool:
        raise field_error(f"{p}.eligible", "must be true or false", eligible)
    tl = get("time_limit_s")
    if tl is not None and not is_num(tl):
        raise field_error(f"{p}.time_limit_s", "must be a number of seconds or null", tl)
    preemptible = get("preemptible", True)
    if preemptible.__class__ is not bool:
        raise field_error(f"{p}.preemptible", "must be true or false", preemptible)
    pn = get("partition_nodes")
    if pn is not None and (not isinstance(pn, list) or not all(isinstance(x, str) for x in pn)):
        raise field_error(f"{p}.partition_nodes", "must be a list of node names or null", pn)
    exclusive = get("exclusive", False)
    if exclusive.__class__ is not bool:
        raise field_error(f"{p}.exclusive", "must be true or false", exclusive)
    prio = get("priority", 0)
    if not is_num(prio):
        prio = get_num(d, "priority", p, 0.0, minimum=None) or 0
    submit = get("submit_time", 0.0)
    if not is_num(submit):
        submit = get_num(d, "submit_time", p, 0.0, minimum=None) or 0.0
    start = get("start_time")
    if start is not None and not is_num(start):
        start = get_num(d, "start_time", p, None, minimum=None)
    reason = get("reason")
    if reason is not None and reason.__class__ is not str:
        get_str(d, "reason", p)
    qos = get("qos")
    if qos is not None and qos.__class__ is not str:
        get_str(d, "qos", p)
    pf = get("preempting_for")
    if pf is not None and (isinstance(pf, bool) or not isinstance(pf, int | str) or pf == ""):
        raise field_error(f"{p}.preempting_for", "must be a job id or null", pf)
    if get("preemptor", False).__class__ is not bool:
        raise field_error(f"{p}.preemptor", "must be true or false", get("preemptor"))
    return Job(jid, account, str(get("user") or ""), state, int(prio), preemptible, submit, start,
               None if tl is None or tl < 0 else int(tl), tasks, nodes, tpn, per_task, alloc, eligible,
               reason, qos, i, d, None if pn is None else frozenset(pn), exclusive)


def _check_tree(accounts: list[Account]) -> None:
    by_name = {a.name: a for a in accounts}
    for i, a in enumerate(accounts):
        if a.parent is not None and a.parent not in by_name:
            raise field_error(f"accounts[{i}].parent", "unknown account", a.parent)
        seen = {a.name}
        cur = a.parent
        while cur is not None:
            if cur in seen:
                raise field_error(f"accounts[{i}].parent", "makes a cycle in the account tree", a.parent)
            seen.add(cur)
            cur = by_name[cur].parent


def load_job(entry: Any, index: int, snapshot: Snapshot) -> Job:
    """One entry of `jobs`, at `index`, parsed and checked as `load_snapshot` does, against
    the nodes and accounts of `snapshot`: for a caller that keeps its jobs' parses from cycle to
    cycle and loads the rest of each snapshot without jobs (`batchd simulate`). Raises
    `ValueError` naming `jobs[index]`."""
    return _parse_job(entry, index, {n.name for n in snapshot.nodes}, {a.name for a in snapshot.accounts})


def load_snapshot(d: dict, reuse: Snapshot | None = None) -> Snapshot:
    """Validate a snapshot dict (docs/snapshot.md) and return a `Snapshot`.

    `reuse`, an earlier snapshot of the same nodes and accounts: a job entry that is the
    very dict object one of its jobs was loaded from is taken from it, not parsed again, and
    so are its nodes when every node entry is the very dict it was loaded from, in the same
    order (a caller that passes `reuse` must not have changed such a dict in place; `batchd
    simulate` builds a new entry whenever a job changes). The jobs taken are moved, not
    copied (their `index` becomes their place in `d`): `reuse` is spent, not to be decided on
    again.

    Raises `ValueError` whose message starts with the path of the bad key. The cyclic garbage
    collector is paused while the objects are built (restored on return)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(d, reuse)
    finally:
        if was_enabled:
            gc.enable()


def _load(d: dict, reuse: Snapshot | None = None) -> Snapshot:
    if not isinstance(d, dict):
        raise field_error("snapshot", "must be a JSON object", type(d).__name__)
    version = d.get("version", 1)
    if version != 1:
        raise field_error("version", "unsupported snapshot version (expected 1)", version)
    for key in ("nodes", "accounts", "jobs"):
        if not isinstance(d.get(key), list):
            raise field_error(key, "is required and must be a list", d.get(key))
    policy = d.get("policy") or {}
    if not isinstance(policy, dict):
        raise field_error("policy", "must be an object", policy)
    now = get_num(d, "now", "snapshot", 0.0, minimum=None) or 0.0
    old_nodes = reuse.raw.get("nodes") if reuse is not None else None
    if (isinstance(old_nodes, list) and len(old_nodes) == len(d["nodes"]) == len(reuse.nodes)  # type: ignore[union-attr]
            and all(a is b for a, b in zip(old_nodes, d["nodes"], strict=True))):
        nodes = list(reuse.nodes)  # type: ignore[union-attr]  # the very same node dicts: their parse holds
    else:
        nodes = [_parse_node(n, i) for i, n in enumerate(d["nodes"])]
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise field_error("nodes", "duplicate node name")
    accounts = [_parse_account(a, i) for i, a in enumerate(d["accounts"])]
    anames = [a.name for a in accounts]
    if len(set(anames)) != len(anames):
        raise field_error("accounts", "duplicate account name")
    _check_tree(accounts)
    node_names = set(names)
    account_names = set(anames)
    prev: list[Job] = []
    if reuse is not None and [n.name for n in reuse.nodes] == names and [a.name for a in reuse.accounts] == anames:
        prev = reuse.jobs
    known: dict[int, Job] | None = None  # id(entry) -> its job in `reuse`, built at the first need
    k = 0  # entries mostly come in the earlier snapshot's order: its next few jobs are tried first
    jobs = []
    for i, j in enumerate(d["jobs"]):
        old = None
        if prev:
            for a in range(k, min(k + 4, len(prev))):  # (those skipped are gone, mostly)
                if prev[a].raw is j:
                    old, k = prev[a], a + 1
                    break
            else:
                if known is None:
                    known = {id(x.raw): x for x in prev}
                old = known.get(id(j))
        if old is not None and old.raw is j:
            old.index = i  # moved here: `reuse` gives its jobs up
            jobs.append(old)
        else:
            jobs.append(_parse_job(j, i, node_names, account_names))
    ids = [j.id for j in jobs]
    if set(map(type, ids)) != {int}:  # ints are equal as strings only when equal: no str() for them
        ids = [str(x) for x in ids]
    if len(set(ids)) != len(ids):
        dup = str(next(x for x in ids if ids.count(x) > 1))
        raise field_error("jobs", "duplicate job id", dup)
    partition_max_times(d)  # validated here; the session reads it (limits.py)
    qos = d.get("qos") or []
    if not isinstance(qos, list):
        raise field_error("qos", "must be a list", qos)
    usage = d.get("usage") or {}
    if not isinstance(usage, dict):
        raise field_error("usage", "must be an object", usage)
    return Snapshot(version=1, now=now, policy=dict(policy), nodes=nodes, accounts=accounts, jobs=jobs,
                    users=list(d.get("users") or []), usage=usage, qos=qos, raw=d)
