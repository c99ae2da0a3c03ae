"""Reclaim (across accounts) and preempt (inside one account): KAI's victim solver, with
Kueue's minimal victim sets, combined sets and per-account policies.

For a pending job J (popped in queue order), victims are added one at a time in victim order
(other accounts' first, in ordering.VictimPicker's order; then J's own account's, lowest QOS
priority first, then newest); after each addition the *scenario* (all victims so far) is tried
on a checkpoint of the session:

1. evict the victims (their resources become releasing);
2. re-allocate J and the victims in the normal allocation order: a victim that allocation
   prefers to J takes its place back first (it is not evicted); then J must fit on idle plus
   releasing resources, else the scenario fails; a victim whose devices J did not take stays
   where it was (not evicted) unless J needs it under its account's limit; one that fits
   elsewhere on idle resources is *relocated* (preempted and started again at once); the
   others stay preempted;
3. victims of other accounts must pass KAI's reclaim validation and the preemptor account's
   policy (reclaimcheck.py, victims.py).

The first valid scenario is then *minimised* (Kueue): walking its victims in reverse, each one
whose removal still leaves a valid scenario is dropped, so no victim of the final set can be
spared, whatever the GPU numbering. J starts `after` the victims whose resources it uses, and
after its own account's victims when it was held by its account's limit.

Who may preempt, and whom (victims.py for the policies and the minimum runtime):
- reclaim pass: a job asking for GPUs, within its account's fair share with J in every
  resource (a non-preemptible J within its quota), takes preemptible GPU jobs of other
  accounts that pass the coarse per-account filter and its account's `reclaim_within_cohort`
  (J within quota) or `borrow_within_cohort` (J above quota).
- preempt pass: a job takes preemptible jobs of its own leaf account allowed by
  `within_account` (default: strictly lower QOS priority), when the nodes are full *or* when
  its account's (or an ancestor's) limit holds it while cards are idle elsewhere; failing
  that, one combined set of its own account's victims and other accounts' (Kueue), its own
  counted as freed for the reclaim rules. A non-preemptible J over its quota, association
  limits, QOS per-user limits and array throttles never preempt.
- a running job younger than its minimum runtime is nobody's victim; a job that could start
  only with such victims gets the pending reason `Reclaim pending: protected for N more
  minutes` (or `Preemption pending: ...`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .allocate import OK, Failures, after_of, gpu_options, try_place
from .fairshare import Queue
from .job import EPS, GPU, JobRT
from .ordering import PendingPicker, QueueOrder, VictimPicker, victim_job_order
from .placement import choose, give_back, per_task_vector
from .reclaimcheck import Reclaimable, can_reclaim, in_quota, leveled, victim_filter
from .state import Session
from .victims import PREEMPT, RECLAIM, Victims


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


def _order(s: Session, cross: list[JobRT], own: list[JobRT]) -> Iterator[JobRT]:
    """Victim order: other accounts' candidates (KAI's account order), then J's own account's."""
    if cross:
        if len({v.queue for v in cross}) == 1:
            yield from victim_job_order(cross)
        else:
            vp = VictimPicker(s, cross)
            while (v := vp.next()) is not None:
                yield v
    yield from victim_job_order(own)


class Solver:
    """`idle_ok`: J may start on idle resources alone (only when the allocate pass did not run;
    otherwise allocate already refused it those, e.g. for a backfill reservation)."""

    def __init__(self, s: Session, vic: Victims, idle_ok: bool):
        self.s = s
        self.vic = vic
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

    def solve(self, j: JobRT, cross: list[JobRT], own: list[JobRT], tries: int | None = None) -> bool:
        """Start J by preempting some of `cross` (other accounts') and `own` (its account's)
        candidates: the smallest set in Kueue's sense. True when J started. `tries`: at most
        that many scenarios are tried (None: no bound)."""
        s = self.s
        if not cross and not own:
            return False
        key = s.over_limit(j, j.R)
        blocked = key is not None
        if key is not None and (key.startswith(("np:", "assoc:")) or key in ("qos", "array") or not own):
            return False
        if not self.idle_ok and not blocked and self._may_fit(j, [], False):
            return False
        check = Reclaimable(s, j, self.vic) if cross else None
        # its own victims may free room under its account's limit or fair share, not only devices
        self._bound = blocked or bool(own and cross and not can_reclaim(s, j))
        acc: list[JobRT] = []
        room = _room(s)
        self._room0 = room[:]
        need = [float(j.gpus_total), j.cpu * j.tasks, j.mem * j.tasks]
        for v in _order(s, cross, own):
            acc.append(v)
            held = _held(v)
            for i in range(3):
                room[i] += held[i]
            if any(room[i] + EPS < need[i] for i in range(3)):
                continue
            if not self._may_fit(j, acc):
                continue
            cp = s.checkpoint()
            used = self._attempt(j, acc, check, blocked)
            if used is not None:
                self._minimise(j, used, check, blocked, cp)
                return True
            if tries is not None:
                tries -= 1
                if tries <= 0:
                    return False
        return False

    def protected(self, j: JobRT, cross: list[JobRT], own: list[JobRT], young: list[JobRT],
                  tries: int | None = None) -> str | None:
        """When J could start only by taking some of `young` (protected by their minimum
        runtime) too: its pending reason. Changes nothing."""
        s = self.s
        cp = s.checkpoint()
        n = len(s.preempts)
        young_set = set(young)
        try:
            if not self.solve(j, cross, own, tries):
                return None
            taken = [e[0] for e in s.preempts[n:] if e[0] in young_set]
            return self.vic.protected_reason(j, taken)
        finally:
            s.rollback(cp)

    def _minimise(self, j: JobRT, used: list[JobRT], check: Reclaimable | None, blocked: bool, cp: int) -> None:
        """Drop, walking the victims backwards, every one J can do without (down to none, when
        J can start on what other preemptions already free); leaves the final scenario
        committed. Every attempt starts from the same state (`cp`), and a set `_attempt`
        returned is valid again when given back to it (no victim of it goes before J, see
        `_scenario`), so the result does not depend on where a previous attempt put J."""
        s = self.s
        best = list(used)
        current = True  # the session holds the scenario of `best`
        need = [float(j.gpus_total), j.cpu * j.tasks, j.mem * j.tasks]
        for v in reversed(used):
            if v not in best:
                continue
            fewer = [x for x in best if x is not v]
            if not blocked:  # cheap necessary tests first (counts, then a count-only placement)
                room = self._room0[:]
                for x in fewer:
                    held = _held(x)
                    for i in range(3):
                        room[i] += held[i]
                if any(room[i] + EPS < need[i] for i in range(3)):
                    continue
            if current:
                s.rollback(cp)
                current = False
            if not self._may_fit(j, fewer):
                continue
            got = self._attempt(j, fewer, check, blocked)
            current = got is not None
            if got is not None:
                best = got
        if not current:
            s.rollback(cp)
            got = self._attempt(j, best, check, blocked)
            assert got is not None, "a scenario that was valid must stay valid"

    def _evict_all(self, j: JobRT, victims: list[JobRT]) -> None:
        for v in victims:
            self.s.evict(v, PREEMPT if v.queue is j.queue else RECLAIM, j)

    def _attempt(self, j: JobRT, acc: list[JobRT], check: Reclaimable | None, blocked: bool) -> list[JobRT] | None:
        """Try the scenario of candidate victims `acc`. On success the session holds it (J
        started, its victims evicted or relocated) and the evicted victims are returned; else
        the session is as before and None is returned. Victims allocation prefers to J are not
        evicted; the scenario without the victims whose devices J did not take is tried first,
        then, when J's own account holds it back (its limit, or its fair share for a combined
        set), with them."""
        s = self.s
        cp = s.checkpoint()
        self._evict_all(j, acc)
        first = [v for v in acc if self._before(v, j)]  # they take their place back first
        rest = [v for v in acc if v not in first]
        if first:
            s.rollback(cp)
            self._evict_all(j, rest)
        status, takes, _ = try_place(s, j, True)
        if status != OK:
            s.rollback(cp)
            return None
        unneeded = [v for v in rest if _back_in_place(v)]
        if not unneeded:  # go on from here: the same scenario (`first` was found on exactly it)
            return rest if self._scenario(j, rest, check, blocked, (cp, takes), not first) else None
        for tk in reversed(takes):
            give_back(tk)
        s.rollback(cp)
        options = [[v for v in rest if v not in unneeded]]
        if self._bound:
            options.append(rest)
        for victims in options:
            if self._scenario(j, victims, check, blocked):
                return victims
        return None

    def _scenario(self, j: JobRT, rest: list[JobRT], check: Reclaimable | None, blocked: bool,
                  placed: tuple[int, Any] | None = None, ordered: bool = False) -> bool:
        """Evict `rest`, place and start J, relocate the victims that fit elsewhere, validate.
        The session holds it when True, is unchanged when False. `placed`: (checkpoint, takes)
        when `rest` are evicted and J placed already (since that checkpoint); `ordered`: none
        of `rest` goes before J with exactly them evicted (known already)."""
        s = self.s
        if placed is None:
            cp = s.checkpoint()
            self._evict_all(j, rest)
            takes = None
        else:
            cp, takes = placed
        n0 = len(s.preempts) - len(rest)  # the entries of these evictions (the last ones)
        if not ordered and any(self._before(v, j) for v in rest):  # with exactly these evicted, one goes first
            if takes is not None:
                for tk in reversed(takes):
                    give_back(tk)
            s.rollback(cp)
            return False
        if takes is None:
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
        if blocked:  # the victims free its account's limit: it starts once they have ended
            after.extend(v.id for v in final if v.queue is j.queue and v.id not in after)
        iq = check.in_quota if check is not None else True
        for i in range(n0, len(s.preempts)):
            v, reason, fj, _ = s.preempts[i]
            if fj is j:
                s.preempts[i] = (v, reason, fj, self.vic.label(j, v, iq))
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

def _running_victims(s: Session) -> list[JobRT]:
    """Possible victims: preemptible RUNNING jobs (not COMPLETING/SUSPENDED ones, not jobs
    started in this cycle)."""
    return [v for v in s.running if v.preemptible and not v.evicted and not v.started and v.takes
            and v.spec.state == "RUNNING"]


def _cross_candidates(s: Session, vic: Victims, j: JobRT, base: list[JobRT]) -> list[JobRT]:
    """Other accounts' jobs J may reclaim by KAI's per-account filter and J's account's policy."""
    iq = in_quota(s, j)
    return [v for v in base if not v.evicted and v.queue is not j.queue and v.charge.get(GPU)
            and victim_filter(s, j, v.queue) and vic.cross_allows(j, v, iq)]


def _always() -> bool:
    """The pickers' `skip` here is Failures.dominated alone (PendingPicker's `by_key`)."""
    return True


def reclaim_pass(s: Session, jobs: list[JobRT], reasons: dict[Any, str], idle_ok: bool) -> None:
    failures = Failures()
    vic = Victims(s)
    solver = Solver(s, vic, idle_ok)
    never = {q: vic.queue_reclaims_never(q) for q in s.queues.values()}
    cands = []
    min_gpu: dict[Queue, float] = {}
    for x in jobs:
        g = x.R.get(GPU)
        if g and not x.started and not never[x.queue]:
            cands.append(x)
            q = x.queue
            m = min_gpu.get(q)
            if m is None or g < m:
                min_gpu[q] = g

    def queue_ok(q: Queue) -> bool:
        # necessary for can_reclaim: room under the fair share for the smallest GPU request
        return q.alloc[GPU] + min_gpu.get(q, 0.0) <= q.fs[GPU] + EPS

    if not any(queue_ok(q) for q in min_gpu):
        return  # no account has room under its fair share: nothing can change in this pass
    picker = PendingPicker(s, cands, skip=lambda j: failures.dominated(j) is not None, queue_ok=queue_ok,
                           presorted=jobs is s.pending, by_key=_always)
    base = _running_victims(s)
    while True:
        j = picker.pop()
        if j is None:
            break
        if not can_reclaim(s, j):
            continue
        ok, young = vic.split(j, _cross_candidates(s, vic, j, base))
        if solver.solve(j, ok, []):
            reasons.pop(j.id, None)
            picker.invalidate_all()
            continue
        why = solver.protected(j, ok + young, [], young) if young else None
        if why is not None:
            reasons[j.id] = why
        failures.add(j, "x")


def preempt_pass(s: Session, jobs: list[JobRT], reasons: dict[Any, str], idle_ok: bool) -> None:
    failures = Failures()
    vic = Victims(s)
    solver = Solver(s, vic, idle_ok)
    base = _running_victims(s)
    by_queue: dict[Queue, list[JobRT]] = {}
    for v in base:
        by_queue.setdefault(v.queue, []).append(v)
    lowest = {q: min(v.prio for v in vs) for q, vs in by_queue.items()}

    def wants(j: JobRT) -> bool:
        q = j.queue
        low = lowest[q]
        return low < j.prio or (low == j.prio and vic.may_preempt_equal(q))

    # only accounts with running jobs whose rule is not `never` (a lookup per account, not per job)
    open_q = {q for q in lowest if not vic.within_never(q)}
    picker = PendingPicker(s, [j for j in jobs if j.queue in open_q and not j.started and wants(j)],
                           skip=lambda j: failures.dominated(j) is not None, presorted=jobs is s.pending,
                           by_key=_always)
    while True:
        j = picker.pop()
        if j is None:
            break
        own_all = [v for v in by_queue.get(j.queue, ()) if not v.evicted and vic.own_allows(j, v)]
        own, young_own = vic.split(j, own_all)
        if solver.solve(j, [], own) or _combined(s, vic, solver, j, own, base):
            reasons.pop(j.id, None)
            picker.invalidate_all()
            continue
        if vic.timed:
            why = _protected(s, vic, solver, j, own_all, young_own, base)
            if why is not None:
                reasons[j.id] = why
        failures.add(j, "x")


def _cross_with_own_freed(s: Session, vic: Victims, j: JobRT, own: list[JobRT], base: list[JobRT]) -> list[JobRT]:
    """Other accounts' candidates for a combined set: judged as if J's `own` victims had all
    been preempted (the set's validation then checks the victims it really takes)."""
    if not own or vic.reclaims_never(j) or not j.R.get(GPU):
        return []
    freed: dict[str, float] = {}
    for v in own:
        for r, x in v.charge.items():
            freed[r] = freed.get(r, 0.0) + x
    path = j.queue.path
    for q in path:  # J's account as if its own candidates were preempted (restored below)
        for r, x in freed.items():
            q.alloc[r] -= x
    try:
        if not can_reclaim(s, j):
            return []
        return _cross_candidates(s, vic, j, base)
    finally:
        for q in path:
            for r, x in freed.items():
                q.alloc[r] += x


# scenarios tried per job for a combined set (a fallback after reclaim and preempt each failed;
# KAI bounds its consolidation search the same way)
COMBINED_TRIES = 8


def _combined(s: Session, vic: Victims, solver: Solver, j: JobRT, own: list[JobRT], base: list[JobRT]) -> bool:
    cross, _ = vic.split(j, _cross_with_own_freed(s, vic, j, own, base))
    return bool(cross) and solver.solve(j, cross, own, COMBINED_TRIES)


def _protected(s: Session, vic: Victims, solver: Solver, j: JobRT, own_all: list[JobRT], young_own: list[JobRT],
               base: list[JobRT]) -> str | None:
    cross_all = _cross_with_own_freed(s, vic, j, own_all, base)
    young = young_own + [v for v in cross_all if vic.protected_for(v, RECLAIM) > 0]
    if not young:
        return None
    if young_own:
        why = solver.protected(j, [], own_all, young)
        if why is not None:
            return why
    return solver.protected(j, cross_all, own_all, young, COMBINED_TRIES) if cross_all else None
