"""Fair-share division per account and resource: KAI's `proportion` plugin, restated.

For every resource key independently (`gres/gpu`, `gres/gpu:TYPE`, `cpu`, `mem`, ...), the
accounts that share a parent divide the parent's fair share (the cluster total at the top):

1. *deserved*: each account gets `min(quota, requestable)`; `-1` quota counts as the whole
   pool; not capped by capacity (the sum may exceed the pool, as in KAI).
   Kueue's `lending_limit`: the part of an account's unused quota above its lending limit is
   taken out of the pool before phase 2 (it is never lent).
2. *over quota*, one priority bucket at a time (highest first): rounds in which each
   unsatisfied account is offered `pool * w'` (w' its normalised over-quota weight, lowered by
   decayed usage with `fairshare_k_value`); it takes its whole remaining request when that fits
   in the offer, else only the whole units of the offer (`floor`), remembering the fraction.
3. *leftovers*, after all buckets, walking the buckets again from the highest priority: one
   unit (or what is left) to each account holding a remembered fraction, largest fraction
   first, then creation order, then name (KAI's rule; KAI's later versions hand out a
   bucket's leftovers before the next bucket's rounds, which this deliberately does not).

`requestable = min(request, limit)`; `request` = allocated plus pending demand. The result is
written into each `Queue.fs`. Pure functions; floats in the same operation order as KAI so
that roundings agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

UNLIMITED = -1.0
_MAX_ROUNDS = 10_000


class Queue:
    """An account during one cycle: configuration plus per-resource accounting.

    All per-resource dicts are keyed by resource key. `deserved`/`limit` use -1 for unlimited.
    `alloc` counts running jobs and jobs started in this cycle; `request` adds pending demand;
    `alloc_np` counts only non-preemptible jobs. `fs` is the fair share (never -1)."""

    __slots__ = ("name", "parent", "children", "priority", "order", "depth", "deserved", "limit", "weight",
                 "lending", "fs", "alloc", "alloc_np", "request", "usage", "path", "leaf")

    def __init__(self, name: str, priority: int, order: int):
        self.name = name
        self.parent: Queue | None = None
        self.children: list[Queue] = []
        self.priority = priority
        self.order = order
        self.depth = 0
        self.deserved: dict[str, float] = {}
        self.limit: dict[str, float] = {}
        self.weight: dict[str, float] = {}
        self.lending: dict[str, float | None] = {}
        self.fs: dict[str, float] = {}
        self.alloc: dict[str, float] = {}
        self.alloc_np: dict[str, float] = {}
        self.request: dict[str, float] = {}
        self.usage = 0.0
        self.path: list[Queue] = []     # root ... self
        self.leaf = True

    def requestable(self, r: str) -> float:
        lim = self.limit[r]
        req = self.request[r]
        return req if lim == UNLIMITED else min(lim, req)

    def allocatable(self, r: str) -> float:
        """KAI's allocatable share: min(limit, max(quota, fair share)); the limit when the quota
        is unlimited (so possibly -1)."""
        d = self.deserved[r]
        lim = self.limit[r]
        if d == UNLIMITED:
            return lim
        a = max(d, self.fs[r])
        return a if lim == UNLIMITED else min(lim, a)

    def __repr__(self) -> str:
        return f"Queue({self.name})"


def _satisfied(q: Queue, r: str) -> bool:
    if q.request[r] <= q.fs[r]:
        return True
    lim = q.limit[r]
    return lim != UNLIMITED and lim <= q.fs[r]


def _remaining_requested(q: Queue, r: str) -> float:
    req = q.requestable(r)
    fs = q.fs[r]
    return 0.0 if req < fs else req - fs


def _share_weights(queues: list[Queue], r: str, k: float) -> tuple[dict[Queue, float], float]:
    total_w = 0.0
    for q in queues:
        if _remaining_requested(q, r) > 0:
            total_w += q.weight[r]
    if total_w == 0:
        return {}, 0.0
    weights: dict[Queue, float] = {}
    wsum = 0.0
    for q in queues:
        if _satisfied(q, r):
            continue
        nw = q.weight[r] / total_w
        sw = max(0.0, nw + k * (nw - q.usage))
        weights[q] = sw
        wsum += sw
    return weights, wsum


def _up_to_fair_share(pool: float, queues: list[Queue], r: str, k: float) -> tuple[float, dict[Queue, float]]:
    remainders: dict[Queue, float] = {}
    for _ in range(_MAX_ROUNDS):
        another = False
        round_pool = pool
        weights, wsum = _share_weights(queues, r, k)
        if wsum == 0:
            break
        for q in queues:
            if pool <= 0:
                break
            if _satisfied(q, r):
                continue
            requested = _remaining_requested(q, r)
            if q.weight[r] == 0:
                continue
            offer = round_pool * (weights[q] / wsum)
            give = 0.0
            if requested <= offer:
                give = requested
                remainders.pop(q, None)
            else:
                whole = math.floor(offer)
                if whole > 0:
                    give = float(whole)
                if offer - give > 0:
                    remainders[q] = offer - give
            if give == 0:
                continue
            q.fs[r] += give
            pool -= give
            another = another or requested < offer
        if not another or pool == 0:
            break
    return pool, remainders


def _divide_remaining(pool: float, remainders: dict[Queue, float], r: str) -> float:
    for q in sorted(remainders, key=lambda q: (-remainders[q], q.order, q.name)):
        if pool <= 0:
            break
        give = min(1.0, pool)
        q.fs[r] += give
        pool -= give
    return pool


def divide(total: float, queues: list[Queue], r: str, k: float) -> float:
    """Divide `total` of resource `r` among sibling `queues` (in creation order); add the shares
    to `q.fs[r]`. Returns what is left undivided."""
    pool = total
    for q in queues:
        d = q.deserved[r]
        if d == UNLIMITED:
            d = total
        amount = min(d, q.requestable(r))
        q.fs[r] += amount
        pool -= amount
    for q in queues:
        lend = q.lending.get(r)
        d = q.deserved[r]
        if lend is not None and d != UNLIMITED:
            unused = max(0.0, d - q.fs[r])
            pool -= max(0.0, unused - lend)
    if pool <= 0:
        return 0.0
    prios = sorted({q.priority for q in queues}, reverse=True)
    leftovers: list[dict[Queue, float]] = []
    for prio in prios:
        bucket = [q for q in queues if q.priority == prio]
        pool, remainders = _up_to_fair_share(pool, bucket, r, k)
        leftovers.append(remainders)
    for remainders in leftovers:
        if pool <= 0:
            break
        if remainders:
            pool = _divide_remaining(pool, remainders, r)
    return pool


def compute_fair_shares(top: list[Queue], totals: dict[str, float], resources: Iterable[str], k: float) -> None:
    """Fill `fs` for the whole tree: top-level accounts share `totals`, then each account's
    children share its fair share (a sibling group's split needs its parent's share alone,
    so the groups may be taken in any order once their parent's is done)."""
    res = list(resources)
    todo: list[tuple[list[Queue], dict[str, float]]] = [(top, totals)]
    while todo:
        siblings, pool = todo.pop()
        if not siblings:
            continue
        for r in res:
            divide(pool[r], siblings, r, k)
        for q in siblings:
            if q.children:
                todo.append((q.children, {r: q.fs[r] for r in res}))


def normalise_usage(queues: list[Queue], usage: dict[str, float]) -> None:
    """Set `q.usage` to the account's share of its siblings' decayed usage (0..1)."""
    groups: dict[Queue | None, list[Queue]] = {}
    for q in queues:
        groups.setdefault(q.parent, []).append(q)
    for sibs in groups.values():
        tot = sum(max(0.0, float(usage.get(q.name, 0.0))) for q in sibs)
        for q in sibs:
            q.usage = (max(0.0, float(usage.get(q.name, 0.0))) / tot) if tot > 0 else 0.0
