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
from typing import Any

from .job import JobRT
from .placement import NodeRT, choose, per_task_vector
from .state import Session

INF = float("inf")


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


class Reservation:
    """Resources `used` per node by `job` from `t` until `end` (inf without a time limit);
    `spare` is what each node has left at `t` for jobs that would still run then."""

    __slots__ = ("job", "t", "end", "used", "spare")

    def __init__(self, job: JobRT, t: float, end: float, used: dict[NodeRT, dict[str, float]],
                 spare: dict[NodeRT, dict[str, float]]):
        self.job = job
        self.t = t
        self.end = end
        self.used = used
        self.spare = spare


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
        if self.events is None:
            self.events = []
            for other in s.jobs:
                if (other.running or other.started) and not other.evicted:
                    self._add_events(other)
        events = self.events
        nodes = [n for n in s.nodes if n.usable]
        allowed = [n for n in nodes if j.allowed is None or n.name in j.allowed]
        avail = {n: n.caps(False) for n in nodes}
        gpu_avail = sum(v for c in avail.values() for k, v in c.items() if k.startswith("gpu:"))
        cpu_avail = sum(c.get("cpu", 0.0) for c in avail.values())
        need_cpu = j.cpu * j.tasks
        own = self.end_of(j) - s.now
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
                    gpu_avail += sign * sum(v for k, v in u.items() if k.startswith("gpu:"))
                    cpu_avail += sign * u.get("cpu", 0.0)
                ri += 1
            if gpu_avail < need_gpus or cpu_avail + 1e-9 < need_cpu:
                continue
            later = [r for r in self.res if r.t > t and t + own > r.t]
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
                return
