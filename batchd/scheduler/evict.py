"""Reclaim (across accounts) and preempt (inside one account): KAI's victim solver.

For a pending job J (popped in queue order), victims are added one at a time in victim order
(ordering.VictimPicker); after each addition the *scenario* (all victims so far) is tried on a
checkpoint of the session:

1. evict the victims (their resources become releasing);
2. re-allocate J and the victims in the normal allocation order: a victim that allocation
   prefers to J takes its place back first (it is not evicted); then J must fit on idle plus
   releasing resources, else the scenario fails; a victim whose devices J did not take stays
   where it was (not evicted); one that fits elsewhere on idle resources is *relocated*
   (preempted and started again at once); the others stay preempted;
3. reclaim only: the victims must pass KAI's strategies, checked before each victim is
   subtracted (MaintainFairShare: the victim's account is above its allocatable share in some
   resource; or GuaranteeDeservedQuota: J's account stays within quota with J and the victim's
   account is above quota in some resource; with `quota_reclaim_by_priority`, also a strictly
   higher-priority account within its quota), then the sibling saturation guard.

The first valid scenario is committed; J starts `after` the victims whose resources it uses.

Reclaim is about GPUs (DESIGN.md section 5): only a job asking for GPUs reclaims, and only jobs
holding GPUs are its victims (KAI would also trade CPU-only jobs, as CPU quotas are unlimited).
Who may reclaim: J's account must stay within its fair share with J in every resource, and a
non-preemptible J within its quota. Victims: preemptible running jobs of other accounts that
pass the coarse per-account filter (on the pair of accounts where the two paths diverge).
Preempt: victims are preemptible running jobs of J's own account with strictly lower QOS
priority; a non-preemptible J must fit in its account's quota.
"""

from __future__ import annotations

from typing import Any

from .allocate import OK, Failures, after_of, gpu_options, try_place
from .fairshare import UNLIMITED, Queue
from .job import EPS, GPU, JobRT
from .ordering import PendingPicker, QueueOrder, VictimPicker, _cmpq, victim_job_order
from .placement import choose, give_back, per_task_vector
from .state import Session


def _le_all(a: dict[str, float], b: dict[str, float], res: list[str]) -> bool:
    return all(_cmpq(a.get(r, 0.0), b[r]) <= 0 for r in res)


def leveled(qa: Queue, qb: Queue) -> tuple[Queue, Queue]:
    pa, pb = qa.path, qb.path
    a, b = pa[0], pb[0]
    for i in range(min(len(pa), len(pb))):
        a, b = pa[i], pb[i]
        if a is not b:
            break
    return a, b


def _plus(q_alloc: dict[str, float], R: dict[str, float]) -> dict[str, float]:
    out = dict(q_alloc)
    for r, v in R.items():
        out[r] = out.get(r, 0.0) + v
    return out


def _allocatable(q: Queue, res: list[str]) -> dict[str, float]:
    return {r: q.allocatable(r) for r in res}


def can_reclaim(s: Session, j: JobRT) -> bool:
    q = j.queue
    for r in s.res:
        if q.alloc[r] + j.R.get(r, 0.0) > q.fs[r] + EPS:
            return False
    if not j.preemptible:
        for r in s.res:
            d = q.deserved[r]
            if d != UNLIMITED and q.alloc_np[r] + j.R.get(r, 0.0) > d + EPS:
                return False
    return True


def victim_filter(s: Session, j: JobRT, vq_leaf: Queue) -> bool:
    rq, vq = leveled(j.queue, vq_leaf)
    if not _le_all(_plus(rq.alloc, j.R), rq.deserved, s.res):
        return not _le_all(vq.alloc, _allocatable(vq, s.res), s.res)
    if s.policy.get("quota_reclaim_by_priority") and rq.priority > vq.priority:
        return True
    under = False
    for r in s.res:
        if j.R.get(r, 0.0) <= 0:
            continue
        d = vq.deserved[r]
        if d == UNLIMITED:
            continue
        if vq.alloc[r] > d:
            return True
        if vq.alloc[r] < d:
            under = True
    return not under


class Reclaimable:
    """KAI's scenario validation for reclaim, on the account state before the scenario."""

    def __init__(self, s: Session, j: JobRT):
        self.s = s
        self.j = j
        self.a0 = {q: dict(q.alloc) for q in s.queues.values()}
        self.np0 = {q: dict(q.alloc_np) for q in s.queues.values()}
        self.mult = max(1.0, float(s.policy.get("reclaimer_saturation_multiplier", 1.0)))

    def _fits_strategy(self, rq: Queue, vq: Queue, rem: dict[str, float]) -> bool:
        res = self.s.res
        if not _le_all(rem, _allocatable(vq, res), res):
            return True
        in_quota = _le_all(_plus(self.a0[rq], self.j.R), rq.deserved, res)
        if in_quota and not _le_all(rem, vq.deserved, res):
            return True
        return bool(in_quota and self.s.policy.get("quota_reclaim_by_priority") and rq.priority > vq.priority)

    def valid(self, victims: list[JobRT]) -> bool:
        res = self.s.res
        j = self.j
        remaining: dict[Queue, dict[str, float]] = {}
        involved: dict[Queue, set[str]] = {}
        groups: dict[Queue, list[JobRT]] = {}
        for v in victims:
            groups.setdefault(v.queue, []).append(v)
        for vleaf, group in groups.items():
            rq, vq = leveled(j.queue, vleaf)
            inv = {r for v in group for r, x in v.charge.items() if x > 0 and r in res}
            involved[vleaf] = set(inv)
            if vq not in remaining:
                remaining[vq] = dict(self.a0[vq])
            for v in group:
                if not self._fits_strategy(rq, vq, remaining[vq]):
                    return False
                for q in vleaf.path:
                    rem = remaining.setdefault(q, dict(self.a0[q]))
                    for r, x in v.charge.items():
                        rem[r] = rem.get(r, 0.0) - x
                    involved.setdefault(q, set()).update(inv)
        mine = {r for r, x in j.R.items() if x > 0}
        for rq in reversed(j.queue.path):
            A = _plus(remaining.get(rq, self.a0[rq]), j.R)
            for sib, srem in remaining.items():
                if sib is rq or sib.parent is not rq.parent:
                    continue
                for r in involved.get(sib, set()) | mine:
                    ratio_r = _saturation(A.get(r, 0.0), rq.fs[r])
                    ratio_s = _saturation(srem.get(r, 0.0), sib.fs[r])
                    if ratio_r > 1 and sib.fs[r] > 0 and ratio_r * self.mult >= ratio_s:
                        return False
            if not j.preemptible and not _le_all(_plus(self.np0[rq], j.R), rq.deserved, res):
                return False
        return True


def _saturation(alloc: float, fs: float) -> float:
    if fs == 0:
        return float("inf") if alloc > 0 else 0.0
    return alloc / fs


def _room(s: Session) -> list[float]:
    """[GPU devices, CPUs, MiB] idle or releasing on usable nodes."""
    g = c = m = 0.0
    for node in s.nodes:
        if node.usable:
            g += sum(len(lst) for lst in node.free.values()) + sum(len(lst) for lst in node.rel.values())
            c += node.cpu + node.cpu_rel
            m += node.mem + node.mem_rel
    return [g, c, m]


def _held(v: JobRT) -> list[float]:
    """[GPU devices, CPUs, MiB] a victim would release; a card it shares counts as a device
    (its other users may be victims too: an upper bound)."""
    g = c = m = 0.0
    for tk in v.takes or []:
        if tk.node.usable:
            g += len(tk.idle_slots) + len(tk.rel_slots) + (tk.shard_card is not None and tk.shard_card >= 0)
            c += tk.cpu + tk.cpu_rel
            m += tk.mem + tk.mem_rel
    return [g, c, m]


def _back_in_place(v: JobRT) -> bool:
    """True when nothing of the victim's resources was taken (it can simply stay)."""
    for tk in v.takes or []:
        node = tk.node
        for sl in tk.slots():
            if node.rel_owner.get(sl.key) is not v:
                return False
        if node.cpu_rel + EPS < tk.cpu + tk.cpu_rel or node.mem_rel + EPS < tk.mem + tk.mem_rel:
            return False
        k = tk.shard_card
        if k is not None and (k not in node.card_free  # its card was taken whole
                              or node.card_rel.get(k, 0.0) + EPS < tk.shard + tk.shard_rel):
            return False
    return True


class _Ordered:
    def __init__(self, jobs: list[JobRT]):
        self.it = iter(jobs)

    def next(self) -> JobRT | None:
        return next(self.it, None)


class Solver:
    """`idle_ok`: J may start on idle resources alone (only when the allocate pass did not run;
    otherwise allocate already refused it those, e.g. for a backfill reservation)."""

    def __init__(self, s: Session, mode: str, idle_ok: bool):
        self.s = s
        self.mode = mode
        self.order = QueueOrder(s)
        self.idle_ok = idle_ok

    def _before(self, a: JobRT, b: JobRT) -> bool:
        qa, qb = leveled(a.queue, b.queue)
        if qa is qb:
            return a.sort_key < b.sort_key
        return self.order.before(qa, self.order.key(qa, a.R), qb, self.order.key(qb, b.R))

    def _first(self, cands: list[JobRT]) -> JobRT:
        best = cands[0]
        for c in cands[1:]:
            if self._before(c, best):
                best = c
        return best

    def solve(self, j: JobRT, candidates: list[JobRT]) -> bool:
        s = self.s
        if not candidates:
            return False
        key = s.over_limit(j, j.R)
        if key is not None and (key.startswith(("np:", "assoc:")) or key in ("qos", "array") or self.mode == "reclaim"):
            return False
        if not self.idle_ok and self._may_fit(j, [], False):
            return False
        check = Reclaimable(s, j) if self.mode == "reclaim" else None
        if len({v.queue for v in candidates}) == 1:
            vp: VictimPicker | _Ordered = _Ordered(victim_job_order(candidates))
        else:
            vp = VictimPicker(s, candidates)
        acc: list[JobRT] = []
        room = _room(s)
        need = [float(j.gpus_total), j.cpu * j.tasks, j.mem * j.tasks]
        while True:
            v = vp.next()
            if v is None:
                return False
            acc.append(v)
            held = _held(v)
            for i in range(3):
                room[i] += held[i]
            if any(room[i] + EPS < need[i] for i in range(3)):
                continue
            if not self._may_fit(j, acc):
                continue
            if self._scenario(j, acc, check):
                return True

    def _may_fit(self, j: JobRT, acc: list[JobRT], allow_rel: bool = True) -> bool:
        """Cheap count-only test: could J fit on idle (+ releasing) + these victims' resources?"""
        caps = {n: n.caps(allow_rel) for n in self.s.nodes
                if n.usable and (j.allowed is None or n.name in j.allowed)}
        shared: set = set()
        for v in acc:
            for tk in v.takes or []:
                c = caps.get(tk.node)
                if c is None:
                    continue
                for sl in tk.slots():
                    c["gpu:" + sl.type] = c.get("gpu:" + sl.type, 0.0) + 1
                c["cpu"] += tk.cpu + tk.cpu_rel
                c["mem"] += tk.mem + tk.mem_rel
                c["shard"] += tk.shard + tk.shard_rel
                k = tk.shard_card
                if k is not None and k >= 0 and (tk.node, k) not in shared:
                    # the card may come free whole once its shard users go (an upper bound)
                    shared.add((tk.node, k))
                    t = tk.node.slots[k].type
                    c["gpu:" + t] = c.get("gpu:" + t, 0.0) + 1
        lst = list(caps.items())
        for needs in gpu_options(self.s, j):
            vec = per_task_vector(needs, j.cpu, j.mem, j.shard)
            if choose(lst, vec, j.tasks, j.nodes, j.tpn, "pack") is not None:
                return True
        return False

    def _scenario(self, j: JobRT, acc: list[JobRT], check: Reclaimable | None) -> bool:
        s = self.s
        cp = s.checkpoint()
        for v in acc:
            s.evict(v, self.mode, j)
        # victims allocation prefers to J take their place back first
        first = [v for v in acc if self._before(v, j)]
        if first:
            s.rollback(cp)
            rest = [v for v in acc if v not in first]
            for v in rest:
                s.evict(v, self.mode, j)
        else:
            rest = list(acc)
        status, takes, _ = try_place(s, j, True)
        if status != OK:
            s.rollback(cp)
            return False
        unneeded = [v for v in rest if _back_in_place(v)]
        if unneeded:
            for tk in reversed(takes):
                give_back(tk)
            s.rollback(cp)
            rest = [v for v in rest if v not in unneeded]
            for v in rest:
                s.evict(v, self.mode, j)
            status, takes, _ = try_place(s, j, True)
            if status != OK:
                s.rollback(cp)
                return False
        after = after_of(takes)
        if not rest and not after and not self.idle_ok:
            for tk in reversed(takes):
                give_back(tk)
            s.rollback(cp)
            return False
        s.start(j, takes, after)
        relocated = []
        pending = list(rest)
        idle_gpus = sum(len(lst) for n in s.nodes if n.usable for lst in n.free.values())
        idle_cpu = max((n.cpu for n in s.nodes if n.usable), default=0.0)
        while pending:
            v = self._first(pending)
            pending.remove(v)
            if v.gpus_total > idle_gpus or v.cpu > idle_cpu + EPS:
                continue  # cannot be relocated onto idle resources
            st, tk2, _ = try_place(s, v, False)
            if st == OK:
                s.start(v, tk2, [])
                relocated.append(v)
        final = [v for v in rest if v not in relocated]
        if check is not None and not check.valid(final):
            s.rollback(cp)
            return False
        return True


def _running_victims(s: Session) -> list[JobRT]:
    """Possible victims: preemptible RUNNING jobs (not COMPLETING/SUSPENDED ones, not jobs
    started in this cycle)."""
    return [v for v in s.running if v.preemptible and not v.evicted and not v.started and v.takes
            and v.spec.state == "RUNNING"]


def reclaim_pass(s: Session, jobs: list[JobRT], reasons: dict[Any, str], idle_ok: bool) -> None:
    failures = Failures()
    solver = Solver(s, "reclaim", idle_ok)
    cands = [x for x in jobs if not x.started and x.R.get(GPU)]
    min_gpu: dict[Queue, float] = {}
    for x in cands:
        min_gpu[x.queue] = min(min_gpu.get(x.queue, float("inf")), x.R[GPU])

    def queue_ok(q: Queue) -> bool:
        # necessary for can_reclaim: room under the fair share for the smallest GPU request
        return q.alloc[GPU] + min_gpu.get(q, 0.0) <= q.fs[GPU] + EPS

    if not any(queue_ok(q) for q in min_gpu):
        return  # no account has room under its fair share: nothing can change in this pass
    picker = PendingPicker(s, cands, skip=lambda j: failures.dominated(j) is not None, queue_ok=queue_ok)
    base = _running_victims(s)
    while True:
        j = picker.pop()
        if j is None:
            break
        if not can_reclaim(s, j):
            continue
        cands = [v for v in base if not v.evicted and v.queue is not j.queue and v.charge.get(GPU)
                 and victim_filter(s, j, v.queue)]
        if solver.solve(j, cands):
            reasons.pop(j.id, None)
            picker.invalidate_all()
        else:
            failures.add(j, "x")


def preempt_pass(s: Session, jobs: list[JobRT], reasons: dict[Any, str], idle_ok: bool) -> None:
    failures = Failures()
    solver = Solver(s, "preempt", idle_ok)
    by_queue: dict[Queue, list[JobRT]] = {}
    for v in _running_victims(s):
        by_queue.setdefault(v.queue, []).append(v)
    lowest = {q: min(v.prio for v in vs) for q, vs in by_queue.items()}
    picker = PendingPicker(s, [j for j in jobs if not j.started and j.queue in lowest and lowest[j.queue] < j.prio],
                           skip=lambda j: failures.dominated(j) is not None)
    while True:
        j = picker.pop()
        if j is None:
            break
        cands = [v for v in by_queue.get(j.queue, ()) if not v.evicted and v.prio < j.prio]
        if solver.solve(j, cands):
            reasons.pop(j.id, None)
            picker.invalidate_all()
        else:
            failures.add(j, "x")
