"""Where a gang fits: per-node capacity in tasks, node choice, and concrete devices.

A job is `tasks` identical tasks; each task needs, on one node, `cpu` CPUs, `mem` MiB,
`shard` gres/shard units and GPUs given as `needs`: `[(gpu_type, count)]` (an untyped request
is turned into one whole-GPU type by the caller). A gang is placed all or nothing:

- `tasks_per_node` given: every node used gets that many tasks (the last one the rest);
- `nodes` given: exactly that many nodes, each with at least one task;
- neither: one node if one can hold the whole gang, else as few nodes as hold it.

`placement` is `"pack"` (default: the fullest node that fits, best fit) or `"spread"` (the
emptiest). Node order (snapshot order) breaks ties. Devices on a node: idle ones before
releasing ones (those of jobs being preempted in this cycle); among idle whole GPUs the best
connected set (`topology.best_set`: NVLink, then PCIe distance, then NUMA), else lowest
index first.

Shards on cards and CPU ids: see cards.py.
"""

from __future__ import annotations

from typing import Any

from .cards import (
    CARDLESS,
    EPS,
    gpu_cpu_map,
    hold_card,
    shard_caps,
    sync_card,
    take_cpu_ids,
    take_shards,
)
from .cards import insert_slot as _insert
from .topology import best_set

BIG = 1 << 30
class NodeRT:
    """A node during one cycle. `free`/`rel` map a GPU type to idle/releasing slots (in device
    order); `cpu`/`mem` are idle amounts, `*_rel` amounts being released. Shards per card:
    `card_cap` (static), `card_free` (idle shards of the cards not held whole), `card_rel`
    (shards being released) and `card_owners` (the jobs releasing them). `cpu_ids` /
    `cpu_ids_rel`: idle / releasing CPU ids, ascending."""

    __slots__ = ("name", "idx", "usable", "spec", "free", "rel", "rel_owner", "cpu", "mem",
                 "cpu_rel", "mem_rel", "rel_jobs", "slots", "whole_types", "card_cap", "card_free",
                 "card_rel", "card_owners", "shard_full", "cpu_ids", "cpu_ids_rel", "gpu_cpus")

    def __init__(self, spec: Any):
        self.name: str = spec.name
        self.idx: int = spec.index
        self.usable: bool = spec.usable
        self.spec = spec
        self.slots = {s.key: s for s in spec.slots}
        self.free: dict[str, list] = {}
        self.rel: dict[str, list] = {}
        self.rel_owner: dict[Any, Any] = {}
        for s in spec.slots:
            self.free.setdefault(s.type, []).append(s)
        self.whole_types = {s.type for s in spec.slots if s.whole}
        self.cpu = float(spec.cpus)
        self.mem = float(spec.memory_mb)
        self.cpu_rel = 0.0
        self.mem_rel = 0.0
        self.rel_jobs: list = []
        self.card_cap = shard_caps(spec)
        self.card_free = dict(self.card_cap)
        self.card_rel: dict[int, float] = {}
        self.card_owners: dict[int, list] = {}
        self.shard_full = max(self.card_cap.values(), default=0.0)
        self.cpu_ids = list(range(spec.cpus))
        self.cpu_ids_rel: list[int] = []
        self.gpu_cpus = gpu_cpu_map(spec.raw_gpus, spec.cpus) if spec.raw_gpus else {}

    def shard_room(self, allow_rel: bool) -> float:
        """The most shards one card can give now (a job's shards on a node come from one card)."""
        best = 0.0
        rel = self.card_rel
        for k, f in self.card_free.items():
            if allow_rel and rel:
                f += rel.get(k, 0.0)
            if f > best:
                best = f
        return best

    def idle_shards(self) -> float:
        return sum(f for f in self.card_free.values() if f > 0)

    def avail_gpus(self, gtype: str, allow_rel: bool) -> int:
        n = len(self.free.get(gtype, ()))
        if allow_rel:
            n += len(self.rel.get(gtype, ()))
        return n

    def caps(self, allow_rel: bool) -> dict[str, float]:
        """Count vector of what this node can give now: `gpu:TYPE` counts, `cpu`, `mem`, `shard`."""
        out: dict[str, float] = {}
        for t, lst in self.free.items():
            out["gpu:" + t] = float(len(lst))
        if allow_rel:
            for t, lst in self.rel.items():
                out["gpu:" + t] = out.get("gpu:" + t, 0.0) + len(lst)
        out["cpu"] = self.cpu + (self.cpu_rel if allow_rel else 0.0)
        out["mem"] = self.mem + (self.mem_rel if allow_rel else 0.0)
        out["shard"] = self.shard_room(allow_rel) if self.card_cap else 0.0
        return out


def per_task_vector(needs: list[tuple[str, int]], cpu: float, mem: float, shard: float) -> dict[str, float]:
    vec: dict[str, float] = {}
    for t, c in needs:
        vec["gpu:" + t] = vec.get("gpu:" + t, 0.0) + c
    if cpu:
        vec["cpu"] = cpu
    if mem:
        vec["mem"] = mem
    if shard:
        vec["shard"] = shard
    return vec


def tasks_fit(cap: dict[str, float], vec: dict[str, float]) -> int:
    """How many tasks with per-task `vec` fit into count vector `cap`."""
    n = BIG
    for k, v in vec.items():
        if v > 0:
            m = int(cap.get(k, 0.0) // v + 1e-9) if cap.get(k, 0.0) >= v else 0
            if m < n:
                n = m
                if n == 0:
                    return 0
    return n


def choose(caps: list[tuple[Any, dict[str, float]]], vec: dict[str, float], tasks: int, nodes: int | None,
           tpn: int | None, placement: str) -> list[tuple[Any, int]] | None:
    """Pick nodes and tasks per node for a gang, from `caps` = [(node, count vector)] in node
    order. Returns [(node, ntasks)] or None when the gang does not fit."""
    per = [(n, tasks_fit(c, vec), c) for n, c in caps]
    per = [p for p in per if p[1] > 0]
    if not per:
        return None
    gpu_keys = [k for k in vec if k.startswith("gpu:")]

    def room(p: tuple[Any, int, dict[str, float]]) -> tuple[float, float]:
        c = p[2]
        return (sum(c.get(k, 0.0) for k in gpu_keys), c.get("cpu", 0.0))

    spread = placement == "spread"

    def pref(p: tuple[Any, int, dict[str, float]]) -> tuple:
        g, c = room(p)
        return ((-g, -c) if spread else (g, c))

    if tpn is not None:
        k = nodes if nodes is not None else -(-tasks // tpn)
        need_each = min(tpn, tasks)
        cand = [p for p in per if p[1] >= need_each]
        if len(cand) < k or k * tpn < tasks:
            return None
        cand.sort(key=pref)
        out = []
        left = tasks
        for p in cand[:k]:
            t = min(tpn, left)
            out.append((p[0], t))
            left -= t
        return out if left == 0 and all(t > 0 for _, t in out) else None
    if nodes is not None:
        if len(per) < nodes:
            return None
        cand = sorted(per, key=lambda p: (-min(p[1], tasks),) + pref(p))[:nodes]
        if sum(min(p[1], tasks) for p in cand) < tasks:
            return None
        cand.sort(key=pref)
        alloc = [1] * nodes
        left = tasks - nodes
        for i, p in enumerate(cand):
            extra = min(min(p[1], tasks) - 1, left)
            alloc[i] += extra
            left -= extra
        return [(p[0], alloc[i]) for i, p in enumerate(cand)]
    single = [p for p in per if p[1] >= tasks]
    if single:
        best = min(single, key=pref)
        return [(best[0], tasks)]
    cand = sorted(per, key=lambda p: (-p[1],) + pref(p))
    out = []
    left = tasks
    for p in cand:
        t = min(p[1], left)
        out.append((p[0], t))
        left -= t
        if left == 0:
            return out
    return None


class Take:
    """What one job took on one node (for the decision and for undo). `shard_card`: the card
    its shards are on (None: no shards, or shards of a stored allocation that no card could
    hold); `cards`: [(card, idle shards, releasing shards, owners)] of the cards it took whole
    (their shard state, restored by `give_back`); `short`: its shards found no card."""

    __slots__ = ("node", "tasks", "idle_slots", "rel_slots", "cpu", "cpu_rel", "mem", "mem_rel", "shard",
                 "shard_rel", "rel_jobs", "shard_card", "cards", "cpu_ids", "cpu_ids_rel", "short")

    def __init__(self, node: NodeRT, tasks: int):
        self.node = node
        self.tasks = tasks
        self.idle_slots: list = []
        self.rel_slots: list = []       # [(slot, owner job)]
        self.cpu = self.cpu_rel = self.mem = self.mem_rel = self.shard = self.shard_rel = 0.0
        self.rel_jobs: list = []        # owners whose releasing cpu/mem/shard was used
        self.shard_card: int | None = None
        self.cards: list = []
        self.cpu_ids: list[int] = []
        self.cpu_ids_rel: list[int] = []
        self.short = False

    def slots(self) -> list:
        return sorted(self.idle_slots + [s for s, _ in self.rel_slots], key=lambda s: s.order)

    def as_allocation(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tasks": self.tasks, "gpus": [s.key for s in self.slots()],
                               "cpus": _num_out(self.cpu + self.cpu_rel),
                               "memory_mb": _num_out(self.mem + self.mem_rel)}
        if self.cpu_ids or self.cpu_ids_rel:
            out["cpu_ids"] = sorted(self.cpu_ids + self.cpu_ids_rel)
        if self.shard + self.shard_rel:
            out["shards"] = _num_out(self.shard + self.shard_rel)
            if self.shard_card is not None and self.shard_card != CARDLESS:
                out["shard_gpus"] = [self.shard_card]
        return out


def _num_out(x: float) -> int | float:
    return int(x) if x == int(x) else x


def node_empty(node: NodeRT) -> bool:
    """Nothing runs or is being released on the node (for exclusive jobs)."""
    if node.rel_owner or node.cpu_rel or node.mem_rel:
        return False
    if sum(len(lst) for lst in node.free.values()) != len(node.slots):
        return False
    if node.card_cap and (node.card_rel or any(node.card_free.get(k, 0.0) < c - EPS
                                               for k, c in node.card_cap.items())):
        return False
    return node.cpu >= node.spec.cpus and node.mem >= node.spec.memory_mb


def eligible_nodes(nodes: list[NodeRT], job: Any) -> list[NodeRT]:
    """Usable nodes the job may run on: its partition's, and empty ones for an exclusive job."""
    allowed = job.allowed
    out = [n for n in nodes if n.usable and (allowed is None or n.name in allowed)]
    if job.exclusive:
        out = [n for n in out if node_empty(n)]
    return out


def take(node: NodeRT, tasks: int, needs: list[tuple[str, int]], cpu: float, mem: float, shard: float,
         allow_rel: bool, exclusive: bool = False) -> Take:
    """Take the devices and amounts for `tasks` tasks on `node` (the caller checked they fit
    by counts; `short` is set when no single card holds the shards, and the caller gives the
    take back); `exclusive`: then also every other idle CPU, GPU and shard of the node (not its
    memory: the job holds what it asked)."""
    if exclusive:
        tk = take(node, tasks, needs, cpu, mem, shard, allow_rel)
        for lst in node.free.values():
            for s in lst:
                hold_card(node, tk, s)
            tk.idle_slots.extend(lst)
            del lst[:]
        # every CPU and GPU, but only the memory it asked (as Slurm: --exclusive without --mem
        # gets DefMemPerCPU x the node's CPUs; nothing else can start on the node anyway)
        tk.cpu += node.cpu
        node.cpu = 0.0
        k = tk.shard_card
        if k is not None and node.card_free.get(k, 0.0) > 0:
            tk.shard += node.card_free[k]
            node.card_free[k] = 0.0
        tk.cpu_ids = sorted(tk.cpu_ids + node.cpu_ids)
        node.cpu_ids.clear()
        return tk
    tk = Take(node, tasks)
    for t, c in needs:
        want = c * tasks
        lst = node.free.get(t, [])
        if t in node.whole_types and 1 < want < len(lst):
            got = best_set(lst, want, node.spec.raw_gpus)
            chosen = {id(s) for s in got}
            lst[:] = [s for s in lst if id(s) not in chosen]
        else:
            got = lst[:want]
            del lst[:len(got)]
        tk.idle_slots.extend(got)
        if node.card_cap:
            for s in got:
                hold_card(node, tk, s)
        want -= len(got)
        if want > 0 and allow_rel:
            rl = node.rel.get(t, [])
            if want < len(rl):
                # the devices of the victims evicted first (the victim order), then by device
                # order: which of two equal victims is spared must not follow GPU indices
                owner = node.rel_owner
                more = sorted(rl, key=lambda s: (getattr(owner.get(s.key), "evict_seq", -1), s.order))[:want]
                chosen = {id(s) for s in more}
                rl[:] = [s for s in rl if id(s) not in chosen]
                more.sort(key=lambda s: s.order)
            else:
                more = rl[:want]
                del rl[:len(more)]
            for s in more:
                tk.rel_slots.append((s, node.rel_owner.pop(s.key)))
                if node.card_cap:
                    hold_card(node, tk, s)
    for attr, amount in (("cpu", cpu * tasks), ("mem", mem * tasks)):
        if not amount:
            continue
        idle = getattr(node, attr)
        use = min(idle, amount)
        setattr(node, attr, idle - use)
        setattr(tk, attr, use)
        rest = amount - use
        if rest > 1e-9 and allow_rel:
            setattr(node, attr + "_rel", getattr(node, attr + "_rel") - rest)
            setattr(tk, attr + "_rel", rest)
            for j in node.rel_jobs:
                if j not in tk.rel_jobs:
                    tk.rel_jobs.append(j)
    if shard:
        take_shards(node, tk, shard * tasks, allow_rel)
    take_cpu_ids(node, tk)
    return tk


def give_back(tk: Take) -> None:
    """Undo `take` exactly."""
    node = tk.node
    for s in tk.idle_slots:
        _insert(node.free.setdefault(s.type, []), s)
    for s, owner in tk.rel_slots:
        _insert(node.rel.setdefault(s.type, []), s)
        node.rel_owner[s.key] = owner
    for k, f, r, owners in tk.cards:
        node.card_free[k] = f
        if r:
            node.card_rel[k] = r
        if owners:
            node.card_owners[k] = owners
    node.cpu += tk.cpu
    node.mem += tk.mem
    node.cpu_rel += tk.cpu_rel
    node.mem_rel += tk.mem_rel
    k = tk.shard_card
    if k is not None and k in node.card_free:
        node.card_free[k] += tk.shard
        if tk.shard_rel:
            node.card_rel[k] = node.card_rel.get(k, 0.0) + tk.shard_rel
        sync_card(node, k)
    if tk.cpu_ids:
        node.cpu_ids.extend(tk.cpu_ids)
        node.cpu_ids.sort()
    if tk.cpu_ids_rel:
        node.cpu_ids_rel.extend(tk.cpu_ids_rel)
        node.cpu_ids_rel.sort()
