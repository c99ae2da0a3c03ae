"""Which pending job goes next, and which running job is evicted first (KAI's queue order).

Inside a leaf account jobs are ordered by QOS priority (higher first), then Slurm multifactor
priority (higher first), then submit time, then id. Across accounts the tree is descended level
by level: at each level, among the children that still hold jobs, the one whose best job
compares smallest wins, comparing in this order (KAI `queue_order`):

1. not over-utilised (fair share < allocated in *every* resource) first;
2. would stay within its quota with the job first;
3. higher account priority first;
4. an account whose allocatable share is 0 in a resource the job would use goes last;
5. smaller dominant-resource share counting the job (minus victims already taken);
6. smaller dominant-resource share without it;
7. the account whose allocatable share is smaller in one resource and not larger in any;
8. older account (snapshot list order).

Victims are taken in the reverse order: the account allocation would serve last gives first;
inside it, lowest job priority first, then the newest job.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter

from .fairshare import UNLIMITED, Queue
from .job import EPS, JobRT, id_key
from .state import Session

Key = tuple
#: jobs skipped one by one before `PendingPicker` (given `by_key`) looks by signature
GROUP_AFTER = 16


def skip_key(j: JobRT) -> tuple:
    """What `Failures.dominated` (allocate.py) judges a job by, its account apart."""
    return (j.shape, j.amounts, j.time_limit_key)


def _cmpq(a: float, b: float) -> int:
    if a == UNLIMITED:
        return 0 if b == UNLIMITED else 1
    if b == UNLIMITED:
        return -1
    if a > b + EPS:
        return 1
    if b > a + EPS:
        return -1
    return 0


class QueueOrder:
    """Comparison of accounts for a candidate job (or victims), per KAI."""

    def __init__(self, s: Session):
        self.s = s
        self.res = s.res
        self.totals = s.totals

    def key(self, q: Queue, R: dict[str, float], V: dict[str, float] | None = None) -> Key:
        res = self.res
        fs = q.fs
        al = q.alloc
        over = True
        for r in res:
            if fs[r] >= al[r]:
                over = False
                break
        within = True
        dz = q.deserved
        for r in res:
            d = dz[r]
            if d != UNLIMITED and al[r] + R.get(r, 0.0) > d + EPS:
                within = False
                break
        zero = False
        drf_with = 0.0
        drf_without = 0.0
        for r in res:
            a = q.allocatable(r)
            used = al[r] + R.get(r, 0.0)
            if a == 0 and used > 0:
                zero = True
            if a == UNLIMITED:
                a = self.totals[r]
            v = used - (V.get(r, 0.0) if V else 0.0)
            if a == 0:
                x, y = v * 1000.0, al[r] * 1000.0
            else:
                x, y = v / a, al[r] / a
            if x > drf_with:
                drf_with = x
            if y > drf_without:
                drf_without = y
        return (over, not within, -q.priority, zero, drf_with, drf_without)

    def before(self, qa: Queue, ka: Key, qb: Queue, kb: Key) -> bool:
        """True when account `qa` (key `ka`) is served before `qb` (key `kb`)."""
        if ka != kb:
            return ka < kb
        la = [qa.allocatable(r) for r in self.res]
        lb = [qb.allocatable(r) for r in self.res]
        if _less_somewhere(la, lb) and _less_equal(la, lb):
            return True
        if _less_somewhere(lb, la) and _less_equal(lb, la):
            return False
        return qa.order < qb.order


def _less_equal(a: list[float], b: list[float]) -> bool:
    return all(_cmpq(x, y) <= 0 for x, y in zip(a, b, strict=True))


def _less_somewhere(a: list[float], b: list[float]) -> bool:
    return not _less_equal(b, a)


class PendingPicker:
    """Pops pending jobs in KAI's hierarchical queue order. After a pop the caller changes
    the state (or not); keys are recomputed only along the popped account's path (call
    `invalidate_all` after evictions, which touch other accounts)."""

    def __init__(self, s: Session, jobs: list[JobRT], skip: Callable[[JobRT], bool] | None = None,
                 queue_ok: Callable[[Queue], bool] | None = None, presorted: bool = False,
                 by_key: Callable[[], bool] | None = None):
        """`presorted`: `jobs` is in job order already (a part of `Session.pending`, which
        is sorted), so each account's list need not be sorted again.

        `by_key`: while it returns true, `skip` is taken to be a function of a job's request
        signature (`skip_key`) that, once true for a signature, stays true, and to have no
        other effect that matters: then, past a long run of skipped jobs, an account's next
        job is found among the first jobs of its signatures (a signature skipped is passed
        over whole), not job by job. It finds the job the walk would have found."""
        self.order = QueueOrder(s)
        self.skip = skip
        self.queue_ok = queue_ok
        self.by_key = by_key
        # leaf -> {signature: [its positions in the leaf's list, in order; the next one to look at]}
        self.groups: dict[Queue, dict[tuple, list]] = {}
        by_leaf: dict[Queue, list[JobRT]] = {}
        for j in jobs:
            by_leaf.setdefault(j.queue, []).append(j)
        if not presorted:
            key = attrgetter("sort_key")
            for lst in by_leaf.values():
                lst.sort(key=key)
        self.lists = by_leaf
        self.pos = dict.fromkeys(self.lists, 0)
        self.cache: dict[Queue, tuple | None] = {}
        self.top = [q for q in s.top if self._has_jobs(q)]
        self.children = {q: [c for c in q.children if self._has_jobs(c)] for q in s.queues.values()}

    def _has_jobs(self, q: Queue) -> bool:
        return q in self.lists or any(self._has_jobs(c) for c in q.children)

    def _head(self, leaf: Queue) -> JobRT | None:
        lst = self.lists.get(leaf)
        if lst is None:
            return None
        i = self.pos[leaf]
        skip = self.skip
        walked = 0
        while i < len(lst):
            j = lst[i]
            if j.started or (skip is not None and skip(j)):
                i += 1
                walked += 1
                if walked >= GROUP_AFTER and self.by_key is not None and self.by_key():
                    i = self._by_signature(leaf, lst, i)
                    break
                continue
            break
        self.pos[leaf] = i
        return lst[i] if i < len(lst) else None

    def _by_signature(self, leaf: Queue, lst: list[JobRT], i: int) -> int:
        """The position of the first job from `i` on that is neither started nor skipped
        (len(lst) if none), looked for among the first jobs of each request signature."""
        groups = self.groups.get(leaf)
        if groups is None:
            groups = self.groups[leaf] = {}
            for k in range(len(lst)):
                g = groups.get(key := skip_key(lst[k]))
                if g is None:
                    groups[key] = [[k], 0]
                else:
                    g[0].append(k)
        skip = self.skip
        assert skip is not None
        best = len(lst)
        dead = []
        for key, g in groups.items():
            where, at = g
            n = len(where)
            while at < n and (where[at] < i or lst[where[at]].started):
                at += 1
            g[1] = at
            if at == n:
                dead.append(key)
                continue
            k = where[at]
            if k < best:
                if skip(lst[k]):
                    dead.append(key)  # the signature is skipped: all its jobs, now and later
                else:
                    best = k
        for key in dead:
            del groups[key]
        return best

    def _best(self, q: Queue) -> tuple | None:
        """(leaf, job, key of q for that job) or None."""
        if q in self.cache:
            return self.cache[q]
        out: tuple | None = None
        if q in self.lists and (self.queue_ok is None or self.queue_ok(q)):
            j = self._head(q)
            if j is not None:
                out = (q, j, self.order.key(q, j.R))
        if out is None and self.children.get(q):
            best = self._pick(self.children[q])
            if best is not None:
                _, leaf, j = best
                out = (leaf, j, self.order.key(q, j.R))
        self.cache[q] = out
        return out

    def _pick(self, qs: list[Queue]) -> tuple | None:
        cache = self.cache
        best_key = None
        ties: list = []
        for q in qs:
            b = cache[q] if q in cache else self._best(q)
            if b is None:
                continue
            k = b[2]
            if best_key is None or k < best_key:
                best_key = k
                ties = [(q, b)]
            elif k == best_key:
                ties.append((q, b))
        if not ties:
            return None
        q, b = ties[0]
        for q2, b2 in ties[1:]:
            if self.order.before(q2, b2[2], q, b[2]):
                q, b = q2, b2
        return (q, b[0], b[1])

    def pop(self) -> JobRT | None:
        best = self._pick(self.top)
        if best is None:
            return None
        _, leaf, j = best
        self.pos[leaf] += 1
        for q in leaf.path:
            self.cache.pop(q, None)
        return j

    def invalidate_all(self) -> None:
        self.cache.clear()


def victim_job_order(jobs: list[JobRT]) -> list[JobRT]:
    """Inside one account: lowest priority first, then newest (latest submit, highest id)."""
    out = sorted(jobs, key=lambda j: id_key(j.id), reverse=True)
    out.sort(key=lambda j: (j.prio, -j.spec.submit_time))
    return out


class VictimPicker:
    """Yields candidate victims one at a time in KAI's victim order, recomputed after each
    victim (counting the victims already taken from each account in its dominant share)."""

    def __init__(self, s: Session, victims: list[JobRT]):
        self.order = QueueOrder(s)
        self.s = s
        by_leaf: dict[Queue, list[JobRT]] = {}
        for j in victims:
            by_leaf.setdefault(j.queue, []).append(j)
        self.lists = {q: victim_job_order(lst) for q, lst in by_leaf.items()}
        self.pos = dict.fromkeys(self.lists, 0)
        self.taken: dict[Queue, dict[str, float]] = {}

    def _has(self, q: Queue) -> bool:
        if q in self.lists and self.pos[q] < len(self.lists[q]):
            return True
        return any(self._has(c) for c in q.children)

    def _last(self, qs: list[Queue]) -> Queue | None:
        worst: tuple | None = None
        for q in qs:
            if not self._has(q):
                continue
            k = self.order.key(q, {}, self.taken.get(q))
            if worst is None or self.order.before(worst[0], worst[1], q, k):
                worst = (q, k)
        return None if worst is None else worst[0]

    def next(self) -> JobRT | None:
        q = self._last(self.s.top)
        while q is not None and not (q in self.lists and self.pos[q] < len(self.lists[q])):
            q = self._last(q.children)
        if q is None:
            return None
        j = self.lists[q][self.pos[q]]
        self.pos[q] += 1
        for a in q.path:
            t = self.taken.setdefault(a, {})
            for r, v in j.charge.items():
                t[r] = t.get(r, 0.0) + v
        return j
