"""EASY backfill: reservations for blocked jobs, from the time limits of running jobs.

When a job cannot start for lack of resources, it gets a *reservation*: the earliest time T at
which it fits once running jobs end (`start_time + time_limit_s`; a job without a time limit
never ends) while earlier reservations hold theirs (from their T for their time limit) and
without delaying them. A lower job may then start
now only if it does not delay any reservation: for every reservation with T before the lower
job's own end (now + its time limit, or never), the lower job must fit in what that reservation
leaves spare on each node. T is the job's planned start (`Decisions.planned_start`).
At most `backfill_max_reservations` (policy, default 20) blocked jobs are examined per cycle
(Slurm's bf_max_job_test); the others get no planned start.

Capacities are count vectors per node (`gpu:TYPE`, `cpu`, `mem`, `shard`); see placement.py.
`shard` is the most one card can give now; the shards of a job that ends are added to it
as a count, so a reservation may count on shards spread over several cards (optimistic: the
start itself is placed per card).
"""

from __future__ import annotations

import bisect
from operator import attrgetter
from typing import Any

from .job import JobRT
from .placement import BIG, NodeRT, choose, per_task_vector, tasks_fit
from .state import Session

INF = float("inf")
#: the two prunings of `Backfill.reserve` (a shape's floor, the reservations' bound): they only
#: pass over times where no start can be found; tests turn them off to check that
PRUNE = True


def _sub(a: dict[str, float], b: dict[str, float]) -> None:
    for k, v in b.items():
        a[k] = a.get(k, 0.0) - v


def _add(a: dict[str, float], b: dict[str, float]) -> None:
    for k, v in b.items():
        a[k] = a.get(k, 0.0) + v


def _scale(vec: dict[str, float], n: int) -> dict[str, float]:
    return {k: v * n for k, v in vec.items()}


def _full(n: NodeRT) -> dict[str, float]:
    c: dict[str, float] = {"cpu": float(n.spec.cpus), "mem": float(n.spec.memory_mb), "shard": n.shard_full}
    for sl in n.spec.slots:
        c["gpu:" + sl.type] = c.get("gpu:" + sl.type, 0.0) + 1
    return c


def _reservation_bound(later: list[Reservation], allowed: list[NodeRT], vec: dict[str, float], tasks: int,
                       nodes: int | None) -> list[int] | None:
    """The most tasks of `vec` each node can take within the spare room of every reservation
    in `later`; None when even that cannot hold the gang."""
    out = []
    for n in allowed:
        f = BIG
        for r in later:
            sp = r.spare.get(n)
            if sp:
                for k, v in vec.items():
                    if v > 0 and k in sp:  # a key the spare room does not name is not capped by it
                        c = sp[k]
                        m = int(c // v + 1e-9) if c >= v else 0
                        if m < f:
                            f = m
        out.append(f)
    return out if _enough(out, tasks, nodes) else None


def _enough(fits: list[int], tasks: int, nodes: int | None) -> bool:
    """Whether nodes taking these many tasks each can hold `tasks` on `nodes` nodes: a
    necessary condition for `choose` to find a placement."""
    total = 0
    used = 0
    for f in fits:
        if f > 0:
            total += min(f, tasks)
            used += 1
    return total >= tasks and (nodes is None or used >= nodes)


def _may_fit(avail: dict[NodeRT, dict[str, float]], allowed: list[NodeRT], vec: dict[str, float],
             bound: list[int], tasks: int, nodes: int | None) -> bool:
    """Whether the gang could fit in `avail`, each node capped by `bound` (its tasks within
    the later reservations' spare room). A count vector's fit is monotone in every key, so
    the tasks that fit in the element-wise least of several vectors is the least of their
    fits: `choose` on the capped capacities can succeed only when this holds."""
    return _enough([min(tasks_fit(avail[n], vec), b) for n, b in zip(allowed, bound, strict=True)], tasks, nodes)


class Reservation:
    """Resources `used` per node by `job` from `t` until `end` (inf without a time limit);
    `spare` is what each node has left at `t` for jobs that would still run then."""

    __slots__ = ("job", "t", "end", "used", "spare", "gpus", "cpus")

    def __init__(self, job: JobRT, t: float, end: float, used: dict[NodeRT, dict[str, float]],
                 spare: dict[NodeRT, dict[str, float]]):
        self.job = job
        self.t = t
        self.end = end
        self.used = used
        self.spare = spare
        # what it holds in all (`used` does not change once made)
        self.gpus = sum(v for u in used.values() for k, v in u.items() if k.startswith("gpu:"))
        self.cpus = sum(u.get("cpu", 0.0) for u in used.values())


class Backfill:
    """The reservations of one allocate pass."""

    def __init__(self, s: Session, max_reservations: int):
        self.s = s
        self.max = max_reservations
        self.attempts = 0
        self.res: list[Reservation] = []
        self.planned: dict[Any, float] = {}
        self.events: list[tuple[float, int, NodeRT, dict[str, float], float]] | None = None
        self._seq = 0
        # request shape -> the planned start of the last job of that shape (inf: none found).
        # Within one pass room only shrinks (a start takes some until its end, a reservation
        # some from its start, spare room is only taken), so where a job did not fit, a job
        # of the same shape reserving later does not fit either: its search starts there.
        self._floor: dict[tuple, float] = {}

    def end_of(self, j: JobRT) -> float:
        tl = j.time_limit
        return INF if tl is None or tl <= 0 else self.s.now + tl

    def _add_events(self, j: JobRT) -> None:
        assert self.events is not None
        if j.takes is None or j.end_time is None:
            return
        for tk in j.takes:
            if not tk.node.usable:
                continue
            vec = {"cpu": tk.cpu + tk.cpu_rel, "mem": tk.mem + tk.mem_rel, "shard": tk.shard + tk.shard_rel}
            g = 0.0
            for sl in tk.slots():
                vec["gpu:" + sl.type] = vec.get("gpu:" + sl.type, 0.0) + 1
                g += 1
            self._seq += 1
            bisect.insort(self.events, (j.end_time, self._seq, tk.node, vec, g))

    def started(self, j: JobRT, usage: dict[NodeRT, dict[str, float]] | None) -> None:
        """A job started now: it uses spare room of the reservations it overlaps, and its end
        (when known) releases resources for later reservations."""
        end = self.end_of(j)
        if usage is not None:
            for r in self.res:
                if r.t < end:
                    for node, vec in usage.items():
                        if node in r.spare:
                            _sub(r.spare[node], vec)
        if self.events is not None:
            self._add_events(j)

    def constrain(self, caps: list[tuple[NodeRT, dict[str, float]]], end: float) -> list:
        """Cap each node's capacity by the spare room of the reservations a job ending at
        `end` would overlap."""
        active = [r for r in self.res if r.t < end]
        if not active:
            return caps
        out = []
        for node, cap in caps:
            c = dict(cap)
            for r in active:
                sp = r.spare.get(node)
                if sp is None:
                    continue
                for k, v in sp.items():
                    if c.get(k, 0.0) > v:
                        c[k] = v
            out.append((node, c))
        return out

    def reserve(self, j: JobRT, options: list[list[tuple[str, int]]]) -> None:
        """Find the job's planned start and hold the resources it will need then."""
        if self.attempts >= self.max or not options:
            return
        self.attempts += 1
        s = self.s
        own = self.end_of(j) - s.now
        shape = (tuple(tuple(o) for o in options), j.cpu, j.mem, j.shard, j.tasks, j.nodes, j.tpn, own,
                 j.allowed, j.exclusive)
        floor = self._floor.get(shape, -INF) if PRUNE else -INF
        if floor == INF:
            return  # one of its shape found no start: nor can it (room only shrinks)
        self._floor[shape] = INF  # unless a start is found below
        if self.events is None:
            self.events = []
            # the jobs running or started, not evicted, in snapshot order (ties of end times
            # keep it), from the session's lists rather than a walk over all its jobs
            holding = s.running + [o for o, _ in s.starts if not o.running]
            holding.sort(key=attrgetter("spec.index"))
            for other in holding:
                if not other.evicted:
                    self._add_events(other)
        events = self.events
        nodes = [n for n in s.nodes if n.usable]
        allowed = [n for n in nodes if j.allowed is None or n.name in j.allowed]
        avail = {n: n.caps(False) for n in nodes}
        gpu_avail = sum(v for c in avail.values() for k, v in c.items() if k.startswith("gpu:"))
        cpu_avail = sum(c.get("cpu", 0.0) for c in avail.values())
        need_cpu = j.cpu * j.tasks
        full = {n: _full(n) for n in nodes} if j.exclusive else {}
        # reservations hold their resources from t to end: -used at t, +used at end
        steps = sorted([(r.t, 0, -1.0, r) for r in self.res] + [(r.end, 1, 1.0, r) for r in self.res
                                                                if r.end != INF], key=lambda x: (x[0], x[1]))
        times = sorted({s.now} | {e[0] for e in events} | {x[0] for x in steps})
        ei = 0
        ri = 0
        vecs = [per_task_vector(nd, j.cpu, j.mem, j.shard) for nd in options]
        need_gpus = j.gpus_total
        placement = s.policy.get("placement", "pack")
        # How many tasks of each vector a node can take is the least of what its room at t
        # and each overlapping reservation's spare room give (a count vector's fit is
        # monotone in every key), so the reservations' part is counted once here, and a
        # time at which no vector can reach the gang's task count (a necessary condition
        # of `choose`) is passed over without building the constrained capacities.
        check = PRUNE and not j.exclusive
        bounds: dict[tuple, list[list[int] | None]] = {}  # later reservations -> per vector, per node
        for t in times:
            while ei < len(events) and events[ei][0] <= t:
                _add(avail[events[ei][2]], events[ei][3])
                gpu_avail += events[ei][4]
                cpu_avail += events[ei][3].get("cpu", 0.0)
                ei += 1
            while ri < len(steps) and steps[ri][0] <= t:
                sign, r = steps[ri][2], steps[ri][3]
                for node, u in r.used.items():
                    (_add if sign > 0 else _sub)(avail[node], u)
                gpu_avail += sign * r.gpus
                cpu_avail += sign * r.cpus
                ri += 1
            if t < floor or gpu_avail < need_gpus or cpu_avail + 1e-9 < need_cpu:
                continue
            later = [r for r in self.res if r.t > t and t + own > r.t]
            if check:
                key = tuple(map(id, later))
                per_vec = bounds.get(key)
                if per_vec is None:
                    per_vec = bounds[key] = [_reservation_bound(later, allowed, vec, j.tasks, j.nodes)
                                             for vec in vecs]
                if not any(b is not None and _may_fit(avail, allowed, vec, b, j.tasks, j.nodes)
                           for vec, b in zip(vecs, per_vec, strict=True)):
                    continue
            caps = []
            for n in allowed:
                c = dict(avail[n])
                if j.exclusive and any(v < full[n].get(k, 0.0) for k, v in c.items()):
                    continue  # an exclusive job needs the whole node
                for r in later:
                    sp = r.spare.get(n)
                    if sp:
                        for k, v in sp.items():
                            if c.get(k, 0.0) > v:
                                c[k] = v
                caps.append((n, c))
            for vec in vecs:
                plan = choose(caps, vec, j.tasks, j.nodes, j.tpn, placement)
                if plan is None:
                    continue
                used = {node: (dict(avail[node]) if j.exclusive else _scale(vec, k)) for node, k in plan}
                spare = {}
                for n in nodes:
                    sp = dict(avail[n])
                    if n in used:
                        _sub(sp, used[n])
                    spare[n] = sp
                for r in later:
                    for node, u in used.items():
                        if node in r.spare:
                            _sub(r.spare[node], u)
                self.res.append(Reservation(j, t, t + own, used, spare))
                self.planned[j.id] = t
                self._floor[shape] = t
                return
