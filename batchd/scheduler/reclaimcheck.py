"""KAI's reclaim rules: who may reclaim, the coarse per-account victim filter, and the
validation of a scenario's victims (its strategies and the sibling saturation guard), with
the per-account policies of victims.py and the victims of J's own account of a combined set
counted as freed (evict.py runs the search).

A combined set (Kueue's) mixes victims of J's own account with victims of other accounts: its
own victims' resources are subtracted from J's account before the reclaim rules are checked,
so a team that frees part of its quota by preempting its own lower-priority work may take the
rest back from a borrower.
"""

from __future__ import annotations

from .fairshare import UNLIMITED, Queue
from .job import EPS, JobRT
from .ordering import _cmpq
from .state import Session
from .victims import Victims


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
    """KAI's CanReclaimResources on J's leaf account: within its fair share with J in every
    resource, and a non-preemptible J within its quota."""
    return _can_reclaim_from(s, j, j.queue.alloc, j.queue.alloc_np)


def _can_reclaim_from(s: Session, j: JobRT, alloc: dict[str, float], alloc_np: dict[str, float]) -> bool:
    q = j.queue
    for r in s.res:
        if alloc.get(r, 0.0) + j.R.get(r, 0.0) > q.fs[r] + EPS:
            return False
    if not j.preemptible:
        for r in s.res:
            d = q.deserved[r]
            if d != UNLIMITED and alloc_np.get(r, 0.0) + j.R.get(r, 0.0) > d + EPS:
                return False
    return True


def in_quota(s: Session, j: JobRT) -> bool:
    """J's leaf account stays within its quota (deserved) in every resource with J."""
    q = j.queue
    return _le_all(_plus(q.alloc, j.R), q.deserved, s.res)


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

    def __init__(self, s: Session, j: JobRT, victims: Victims):
        self.s = s
        self.j = j
        self.vic = victims
        self.a0 = {q: dict(q.alloc) for q in s.queues.values()}
        self.np0 = {q: dict(q.alloc_np) for q in s.queues.values()}
        self.mult = max(1.0, float(s.policy.get("reclaimer_saturation_multiplier", 1.0)))
        self.in_quota = True  # of the last valid(): J within its account's quota after starting

    def _freed(self, own: list[JobRT]) -> dict[Queue, dict[str, float]]:
        """The account state before the scenario, less J's own victims (a combined set)."""
        if not own:
            return self.a0
        a0 = dict(self.a0)
        for q in self.j.queue.path:
            d = dict(a0[q])
            for v in own:
                for r, x in v.charge.items():
                    d[r] = d.get(r, 0.0) - x
            a0[q] = d
        return a0

    def _fits_strategy(self, a0: dict[Queue, dict[str, float]], rq: Queue, vq: Queue,
                       rem: dict[str, float]) -> bool:
        res = self.s.res
        if not _le_all(rem, _allocatable(vq, res), res):
            return True
        in_quota = _le_all(_plus(a0[rq], self.j.R), rq.deserved, res)
        if in_quota and not _le_all(rem, vq.deserved, res):
            return True
        return bool(in_quota and self.s.policy.get("quota_reclaim_by_priority") and rq.priority > vq.priority)

    def valid(self, victims: list[JobRT]) -> bool:
        res = self.s.res
        j = self.j
        own = [v for v in victims if v.queue is j.queue]
        victims = [v for v in victims if v.queue is not j.queue]
        a0 = self._freed(own)
        jq = j.queue
        self.in_quota = _le_all(_plus(a0[jq], j.R), jq.deserved, res)
        if not victims:
            return True
        if own and not _can_reclaim_from(self.s, j, a0[jq], self.np0[jq]):
            return False
        for v in victims:
            if not self.vic.cross_allows(j, v, self.in_quota):
                return False
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
                remaining[vq] = dict(a0[vq])
            for v in group:
                if not self._fits_strategy(a0, rq, vq, remaining[vq]):
                    return False
                for q in vleaf.path:
                    rem = remaining.setdefault(q, dict(a0[q]))
                    for r, x in v.charge.items():
                        rem[r] = rem.get(r, 0.0) - x
                    involved.setdefault(q, set()).update(inv)
        mine = {r for r, x in j.R.items() if x > 0}
        for rq in reversed(j.queue.path):
            A = _plus(remaining.get(rq, a0[rq]), j.R)
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
