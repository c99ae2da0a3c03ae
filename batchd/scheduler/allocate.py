"""The allocate pass (and backfill), and the placement attempt shared with reclaim/preempt.

Allocate pops pending jobs in queue order (ordering.py) and starts each one whose whole gang
fits now, within every limit, as KAI's allocate does: a job that does not fit does not stop
lower ones. With backfill on (the `backfill` pass runs and policy `backfill` is not false),
a job blocked for resources gets a reservation and lower jobs may start only if they do not
delay it (backfill.py).

An untyped GPU request (`gres/gpu`) is served by whole GPUs of one type the account may use
(not by MIG instances); types are tried by the account's remaining typed quota, then node order.

Pending reasons (Slurm's codes): `Resources` (the first job waiting for a pool of resources),
`Priority` (a higher job waits for the same pool, or holds a reservation on it),
`AssocGrpGRES` / `AssocGrpCpuLimit` / `AssocGrpMemLimit` (an account limit on the job's account
or an ancestor; also a non-preemptible job beyond its account's quota), `QOSMaxGRESPerUser`,
`ReqNodeNotAvail` (fits only on nodes that are down or drained), `BadConstraints` (fits nowhere),
`JobArrayTaskLimit` (its array's `%N` throttle is reached by the tasks running and those this
cycle started).
A job no easier than one that already failed in its account in this pass gets that job's
outcome without a new search (KAI's scheduling signatures).
"""

from __future__ import annotations

from typing import Any

from .backfill import Backfill
from .job import GPU, TYPED, JobRT
from .ordering import PendingPicker
from .placement import NodeRT, Take, choose, eligible_nodes, give_back, per_task_vector, take
from .state import Session

OK, LIMIT, CAPACITY = "ok", "limit", "capacity"


def limit_reason(key: str) -> str:
    if key == "qos":
        return "QOSMaxGRESPerUser"
    if key == "array":
        return "JobArrayTaskLimit"
    if key.startswith("assoc:"):  # an association limit (assoclimits.py) names its reason
        return key[6:]
    key = key.removeprefix("np:")
    if key == "cpu":
        return "AssocGrpCpuLimit"
    if key == "mem":
        return "AssocGrpMemLimit"
    return "AssocGrpGRES"


def gpu_options(s: Session, j: JobRT) -> list[list[tuple[str, int]]]:
    """The per-task GPU needs to try, as [(type, count)] lists; [] when none is possible."""
    if not j.untyped:
        return [list(j.typed)]
    q = j.queue
    types = [t for t in s.whole_types if s.may_use_type(q, t)]

    def room(t: str) -> float:
        key = TYPED + t
        d = q.deserved.get(key)
        if d is None or d < 0:
            return 0.0
        return d - q.alloc[key]

    types.sort(key=lambda t: (-room(t), s.whole_types.index(t)))
    out = []
    for t in types:
        needs: dict[str, int] = {t: j.untyped}
        for tt, c in j.typed:
            needs[tt] = needs.get(tt, 0) + c
        out.append(sorted(needs.items()))
    return out


def try_place(s: Session, j: JobRT, allow_rel: bool, bf: Backfill | None = None
              ) -> tuple[str, Any, dict[NodeRT, dict[str, float]] | None]:
    """Try to place the whole gang now. Returns (OK, takes, usage) with the devices already
    taken (the caller starts the job or gives them back), (LIMIT, key, None) or (CAPACITY, None,
    None). Does not change account accounting."""
    key = s.over_limit(j, j.R)
    if key is not None:
        return LIMIT, key, None
    options = gpu_options(s, j)
    if not options:
        return LIMIT, GPU, None
    nodes = s.nodes if j.allowed is None and not j.exclusive else eligible_nodes(s.nodes, j)
    if j.gpus_total:
        free = 0
        for n in nodes:
            if n.usable:
                for lst in n.free.values():
                    free += len(lst)
                if allow_rel:
                    for lst in n.rel.values():
                        free += len(lst)
        if free < j.gpus_total:
            return CAPACITY, None, None
    placement = s.policy.get("placement", "pack")
    base_caps = [(n, n.caps(allow_rel)) for n in nodes if n.usable]
    end = bf.end_of(j) if bf is not None else 0.0
    caps = bf.constrain(base_caps, end) if bf is not None else base_caps
    outcome: tuple[str, Any, Any] = (CAPACITY, None, None)
    for needs in options:
        vec = per_task_vector(needs, j.cpu, j.mem, j.shard)
        plan = choose(caps, vec, j.tasks, j.nodes, j.tpn, placement)
        if plan is None:
            continue
        extra: dict[str, float] = {}
        gpu = 0.0
        for t, c in needs:
            gpu += c * s.type_share.get(t, 1.0)
            if TYPED + t in s.res:
                extra[TYPED + t] = extra.get(TYPED + t, 0.0) + c * j.tasks
        if j.untyped:
            k2 = s.over_limit(j, extra)
            if k2 is not None:
                outcome = (LIMIT, k2, None)
                continue
        full = dict(j.R)
        full.update(extra)
        full[GPU] = gpu * j.tasks + j.shard * j.tasks * s.shard_share  # shards: their card share
        if s.lending_blocked(j, full):
            continue
        takes = [take(node, k, needs, j.cpu, j.mem, j.shard, allow_rel, j.exclusive) for node, k in plan]
        if j.shard and any(tk.short for tk in takes):  # its GPUs took the one card its shards fit
            for tk in reversed(takes):
                give_back(tk)
            continue
        usage = {node: {kk: v * k for kk, v in vec.items()} for node, k in plan}
        return OK, takes, usage
    return outcome


def after_of(takes: list[Take]) -> list:
    """Ids of the preempted jobs whose releasing resources these takes use."""
    owners: list[JobRT] = []
    for tk in takes:
        for _, o in tk.rel_slots:
            if o not in owners:
                owners.append(o)
        for o in tk.rel_jobs:
            if o not in owners:
                owners.append(o)
    return [o.id for o in owners]


def _pools_overlap(a: frozenset, b: set) -> bool:
    if a & b:
        return True
    gpu_a = bool(a - {"cpu"})
    gpu_b = bool(b - {"cpu"})
    return ("*" in a and gpu_b) or ("*" in b and gpu_a)


class Failures:
    """Per-account signatures of jobs that failed in a pass, for pruning and reasons."""

    def __init__(self, use_time: bool = False) -> None:
        self.sigs: dict[tuple, list[tuple[tuple, float, str]]] = {}
        self.use_time = use_time
        self.known: dict[tuple, str] = {}   # positive answers stay true: signatures only grow

    def dominated(self, j: JobRT) -> str | None:
        key = (j.queue, j.shape, j.amounts, j.time_limit_key)
        r = self.known.get(key)
        if r is None:
            r = self._dominated(j)
            if r is not None:
                self.known[key] = r
        return r

    def _dominated(self, j: JobRT) -> str | None:
        lst = self.sigs.get((j.queue, j.shape))
        if not lst:
            return None
        mine = j.amounts
        tl = j.time_limit_key
        use_time = self.use_time
        for amounts, ftl, reason in lst:
            if use_time and tl < ftl:
                continue
            for x, y in zip(mine, amounts, strict=True):
                if x < y:
                    break
            else:
                return reason
        return None

    def add(self, j: JobRT, reason: str) -> None:
        lst = self.sigs.setdefault((j.queue, j.shape), [])
        if len(lst) < 8:
            lst.append((j.amounts, j.time_limit_key, reason))


def never_fits(s: Session, j: JobRT, cache: dict) -> str | None:
    """`BadConstraints` when the job fits on no set of nodes even empty, `ReqNodeNotAvail`
    when it fits only counting nodes that are down or drained, else None."""
    ck = (j.queue.name, j.shape, j.amounts)
    if ck in cache:
        return cache[ck]

    def fits(nodes: list[NodeRT]) -> bool:
        caps = []
        for n in nodes:
            c: dict[str, float] = {"cpu": float(n.spec.cpus), "mem": float(n.spec.memory_mb),
                                   "shard": n.shard_full}
            for sl in n.spec.slots:
                c["gpu:" + sl.type] = c.get("gpu:" + sl.type, 0.0) + 1
            caps.append((n, c))
        return any(choose(caps, per_task_vector(nd, j.cpu, j.mem, j.shard), j.tasks, j.nodes, j.tpn, "pack")
                   is not None for nd in gpu_options(s, j))

    mine = [n for n in s.nodes if j.allowed is None or n.name in j.allowed]
    out = None
    if not fits([n for n in mine if n.usable]):
        out = "ReqNodeNotAvail" if fits(mine) else "BadConstraints"
    cache[ck] = out
    return out


def _saturated(s: Session, min_cpu: float) -> bool:
    """No idle GPU anywhere and no node with `min_cpu` idle CPUs: nothing more can start."""
    for n in s.nodes:
        if n.usable:
            if n.cpu + 1e-9 >= min_cpu:
                return False
            for lst in n.free.values():
                if lst:
                    return False
    return True


def allocate_pass(s: Session, jobs: list[JobRT], reasons: dict[Any, str], bf: Backfill | None,
                  explain: bool = True) -> None:
    """Start what fits, in queue order; set a reason for every job left pending.

    Once the cluster is saturated (no idle GPU, and no node with the CPUs of the smallest
    GPU-less task) nothing else can start, so the remaining jobs get their reasons (and
    reservations) in plain job order (QOS priority, multifactor priority, submit time, id)
    without the queue-order walk; without `explain` they are left as they are."""
    failures = Failures(use_time=bf is not None)
    waiting_pools: set = set()
    nf_cache: dict = {}
    cpu_only = [j.cpu for j in jobs if not j.gpus_total and not j.started]
    min_cpu = min(cpu_only) if cpu_only else float("inf")

    def skip(j: JobRT) -> bool:
        r = failures.dominated(j)
        if r is None:
            return False
        capacity = r in ("Resources", "Priority")
        reasons[j.id] = "Priority" if capacity else r
        if capacity and bf is not None and bf.attempts < bf.max:
            bf.reserve(j, gpu_options(s, j))
        return True

    def fail(j: JobRT, status: str, val: Any) -> None:
        nonlocal waiting_pools
        if status == LIMIT:
            reason = limit_reason(val)
        else:
            reason = never_fits(s, j, nf_cache) or ""
            if not reason:
                reason = "Priority" if _pools_overlap(j.pools, waiting_pools) else "Resources"
                waiting_pools |= j.pools
                if bf is not None and bf.attempts < bf.max:
                    bf.reserve(j, gpu_options(s, j))
        reasons[j.id] = reason
        failures.add(j, reason)

    # without `explain` a skipped job's reason is not needed, nor, once the reservations are
    # all made, anything else of `skip` but its answer: a function of the job's signature
    # (Failures), that once true stays true (PendingPicker's `by_key`)
    picker = PendingPicker(s, jobs, skip, presorted=jobs is s.pending,
                           by_key=None if explain else (lambda: bf is None or bf.attempts >= bf.max))
    while True:
        j = picker.pop()
        if j is None:
            return
        status, val, usage = try_place(s, j, False, bf)
        if status == OK:
            s.start(j, val, [])
            reasons.pop(j.id, None)
            if bf is not None:
                bf.started(j, usage)
            continue
        fail(j, status, val)
        if _saturated(s, min_cpu):
            if not explain:
                return
            break
    rest = sorted((j for j in jobs if not j.started and j.id not in reasons), key=lambda j: j.sort_key)
    for j in rest:
        if skip(j):
            continue
        key = s.over_limit(j, j.R)
        fail(j, LIMIT if key is not None else CAPACITY, key)
