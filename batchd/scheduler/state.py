"""The working state of one scheduling cycle (KAI's session) and its statement log.

`Session` is built from a `Snapshot` and never touches it again. Every change (start a job,
evict a job) goes through `start`/`evict`, which update nodes, account accounting and the
decision lists together and push an undo step: `checkpoint()` / `rollback(cp)` give KAI's
statement semantics, so an attempt that fails leaves nothing behind.

Resource keys tracked per account (`Session.res`): `gres/gpu`, `cpu`, `mem`, plus every key
some account configures (`gres/gpu:TYPE`, `gres/shard`). A key an account does not configure
is unlimited for it (quota and limit -1, weight 1): as in KAI, it still takes part in the
"over fair share in every resource" test and in dominant-resource shares.
"""

from __future__ import annotations

from operator import attrgetter

from batchd.slurm.gres import SHARD, Charge, shard_card

from .assoclimits import assoc_add, assoc_effective, assoc_over, assoc_setup
from .cards import CARDLESS, place_stored_shards, sync_card
from .fairshare import UNLIMITED, Queue, compute_fair_shares, normalise_usage
from .job import _CPU_POOL, BASE_RES, EPS, GPU, TYPED, JobRT
from .limits import limit_reason, partition_max_times
from .placement import NodeRT, Take, _insert, give_back
from .snapshot import PENDING_STATES, Snapshot

#: pending demand summed per request where that is exact (`_add_demand`); tests turn it off
GROUP_DEMAND = True


class Session:
    """Nodes, accounts and jobs of one cycle, with undoable `start`/`evict`."""

    # association limits and budgets, set by `assoclimits.assoc_setup` (see there)
    assoc_policies: bool
    run_mins: dict[str, dict[str, float]]
    run_used: dict[str, dict[str, float]]
    budget_over: dict[str, str]
    assoc_leaves: set[str]

    def __init__(self, snap: Snapshot, policy: dict, priorities: dict[str, int]):
        self.snap = snap
        self.policy = policy
        self.now = snap.now
        res = list(BASE_RES)
        for a in snap.accounts:
            for k in a.resources:
                if k not in res:
                    res.append(k)
        self.res = res
        self.nodes = [NodeRT(n) for n in snap.nodes]
        self.node_by_name = {n.name: n for n in self.nodes}
        self.type_share: dict[str, float] = {}
        self.whole_types: list[str] = []
        totals = dict.fromkeys(res, 0.0)
        for n in snap.nodes:
            for s in n.slots:
                self.type_share.setdefault(s.type, s.share)
                if s.whole and s.type not in self.whole_types:
                    self.whole_types.append(s.type)
                if n.usable:
                    totals[GPU] += s.share
                    if TYPED + s.type in totals:
                        totals[TYPED + s.type] += 1
            if n.usable:
                totals["cpu"] += n.cpus
                totals["mem"] += n.memory_mb
                if "gres/shard" in totals:
                    totals["gres/shard"] += n.shards
        self.totals = totals
        # the card share of one shard in a request (before a card is chosen): of the cards
        # with the fewest shards, so that a request never counts less than its start will
        caps = [c.shards for n in snap.nodes for c in n.inventory.cards if c.shards]
        self.shard_share = 1.0 / min(caps) if caps else 0.0
        self._build_queues()
        self.undo: list = []
        self.starts: list[tuple[JobRT, list]] = []
        self.preempts: list[tuple[JobRT, str, JobRT, str]] = []  # (victim, reason, for, policy)
        self.qos_used: dict[tuple[str, str], float] = {}
        qos_limits = {}
        for q in snap.qos:
            if isinstance(q, dict) and q.get("name") is not None:
                m = q.get("max_gpus_per_user", -1)
                if isinstance(m, int | float) and not isinstance(m, bool) and m >= 0:
                    qos_limits[q["name"]] = float(m)
        self._req_cache: dict[tuple, tuple] = {}
        self._assoc_setup()
        self.jobs: list[JobRT] = []
        self.pending: list[JobRT] = []
        self.ineligible: list[JobRT] = []
        # eligible pending jobs held by a partition limit (limits.py): id -> reason
        self.limit_reasons: dict[object, str] = {}
        max_times = partition_max_times(snap.raw)
        self.running: list[JobRT] = []
        queues = self.queues
        self._shard_claims: list[tuple[Take, int | None]] = []
        self._cpu_held: dict[NodeRT, set[int]] = {}
        # tasks running per throttled array (`%N`): those running and those this cycle starts
        self.array_running: dict[object, int] = {}
        self.any_preemptor = False  # a pending job is marked `preemptor` (held.py)
        # the hot loop of a cycle (a snapshot holds thousands of pending jobs): lookups bound
        # to locals, the cache of _job_request looked up here
        req_cache = self._req_cache
        assoc_policies = self.assoc_policies
        all_jobs = self.jobs
        for spec in snap.jobs:
            j = JobRT(spec, queues[spec.account])
            q = j.queue
            mf = priorities.get(j.sid, 0) if priorities else 0
            j.sort_key = (-j.prio, -mf, spec.submit_time, j.idk)
            if spec.qos in qos_limits:
                j.qos_max = qos_limits[spec.qos]
            if assoc_policies:
                j.assoc = assoc_effective(self, j)
            # its request: one result per account, request (`rkey` is interned, job.py, and alive
            # while j is) and, where a per-user limit applies, user
            key = (q, id(j.rkey), j.user if j.qos_max is not None or j.assoc is not None else None)
            hit = req_cache.get(key)
            if hit is None:
                self._job_request(j, key)
            else:
                j.R, j.gpus_total, j.pools, j.shape, j.amounts, j.time_limit_key = hit
            all_jobs.append(j)
            if j.running:
                self._adopt_running(j)
                self.running.append(j)
                if j.assoc is not None or self.run_mins:
                    assoc_add(self, j, 1.0)
                if j.array_max is not None:
                    self.array_running[j.array] = self.array_running.get(j.array, 0) + 1
            elif spec.state in PENDING_STATES:
                if j.preemptor:
                    self.any_preemptor = True
                why = limit_reason(j, max_times) if spec.eligible and max_times else None
                if why is not None:
                    self.limit_reasons[j.id] = why
                (self.pending if spec.eligible and why is None else self.ineligible).append(j)
        place_stored_shards(self._shard_claims)
        if self._shard_claims:
            self._recharge_shards()
        self._shard_claims = []
        for node, held in self._cpu_held.items():
            node.cpu_ids = [c for c in node.cpu_ids if c not in held]
        self._add_demand(self.pending)
        self.pending.sort(key=attrgetter("sort_key"))  # job order; pickers keep it
        k_value = float(policy.get("fairshare_k_value", 1.0))
        usage = snap.usage.get("accounts") if isinstance(snap.usage, dict) else None
        if isinstance(usage, dict) and usage:
            normalise_usage(list(self.queues.values()), usage)
        compute_fair_shares(self.top, self.totals, self.res, max(0.0, k_value))
        self.lending_keys = [r for r in res if any(q.lending.get(r) is not None for q in self.queues.values())]

    # -- construction ----------------------------------------------------------------------
    def _build_queues(self) -> None:
        self.queues: dict[str, Queue] = {}
        for a in self.snap.accounts:
            q = Queue(a.name, a.priority, a.order)
            for r in self.res:
                spec = a.resources.get(r)
                if spec is None:
                    q.deserved[r], q.limit[r], q.weight[r], q.lending[r] = UNLIMITED, UNLIMITED, 1.0, None
                else:
                    q.deserved[r], q.limit[r] = spec.quota, spec.limit
                    q.weight[r], q.lending[r] = spec.over_quota_weight, spec.lending_limit
                q.fs[r] = q.alloc[r] = q.alloc_np[r] = q.request[r] = 0.0
            self.queues[a.name] = q
        self.top: list[Queue] = []
        for a in self.snap.accounts:
            q = self.queues[a.name]
            if a.parent is None:
                self.top.append(q)
            else:
                p = self.queues[a.parent]
                q.parent = p
                p.children.append(q)
                p.leaf = False
        for q in self.queues.values():
            path = []
            cur: Queue | None = q
            while cur is not None:
                path.append(cur)
                cur = cur.parent
            q.path = path[::-1]
            q.depth = len(path) - 1

    def _assoc_setup(self) -> None:
        """Association limits (batchd.slurm.assocpolicy) from the snapshot's `accounts[].policy`,
        `users[].policy` and `accounts[].budget_used` (see assoclimits.py)."""
        assoc_setup(self)

    def may_use_type(self, q: Queue, gtype: str) -> bool:
        key = TYPED + gtype
        if key not in q.limit:
            return True
        return all(a.limit[key] != 0 for a in q.path)

    def _job_request(self, j: JobRT, key: tuple) -> None:
        """Fill R, gpus_total, pools, shape, amounts (a miss of `_req_cache`, keyed by `key`:
        identical requests share one read-only result; most snapshots hold many jobs of few
        shapes)."""
        self._compute_request(j)
        self._req_cache[key] = (j.R, j.gpus_total, j.pools, j.shape, j.amounts, j.time_limit_key)

    def _compute_request(self, j: JobRT) -> None:
        tasks = j.tasks
        R = {"cpu": j.cpu * tasks, "mem": j.mem * tasks}
        gpu = float(j.untyped)
        count = j.untyped
        pools = {"*"} if j.untyped else set()
        if j.typed:
            limits = j.queue.limit
            for t, c in j.typed:
                gpu += c * self.type_share.get(t, 1.0)
                count += c
                pools.add(t)
                if TYPED + t in limits:
                    R[TYPED + t] = R.get(TYPED + t, 0.0) + c * tasks
        R[GPU] = gpu * tasks
        if j.shard:
            # a shard is its share of a card toward gres/gpu (batchd.slurm.gres), as once placed
            R[GPU] += j.shard * tasks * self.shard_share
            if "gres/shard" in j.queue.limit:
                R["gres/shard"] = j.shard * tasks
        j.R = R
        j.gpus_total = count * tasks
        j.pools = frozenset(pools) if pools else _CPU_POOL
        pt = j.spec.per_task
        tl = j.time_limit
        j.shape = (tuple(pt), j.nodes, j.tpn, j.preemptible,
                   j.user if j.qos_max is not None or j.assoc is not None else None,
                   j.allowed, j.exclusive, j.array)  # a throttled array's tasks fail together, no other job
        j.amounts = (tasks, -j.prio, *pt.values())
        j.time_limit_key = float("inf") if tl is None else float(tl)

    def _add_demand(self, jobs: list[JobRT]) -> None:
        """Add pending demand to `request`, per leaf first, then up the tree."""
        per_leaf: dict[Queue, dict[str, float]] = {}
        typed_res = [r for r in self.res if r.startswith(TYPED)]
        # Jobs of one request share one R (`_job_request`): when every amount is a whole
        # number (and their total far below 2**53), the sums are exact in any order, so each
        # request is added once, times its number of jobs: the same floats as job by job.
        groups: dict[int, list] = {}  # id(R) -> [a job with that R, count] (one R per account and request)
        for j in jobs:
            g = groups.get(id(j.R))
            if g is None:
                groups[id(j.R)] = [j, 1]
            else:
                g[1] += 1
        whole = all(float(v).is_integer() for j, _ in groups.values() for v in j.R.values())
        grouped = GROUP_DEMAND and whole and sum(abs(v) * n for j, n in groups.values() for v in j.R.values()) < 2 ** 52
        # else job by job, in order (v * 1 is v)
        for j, n in (groups.values() if grouped else ((j, 1) for j in jobs)):
            acc = per_leaf.get(j.queue)
            if acc is None:
                acc = per_leaf[j.queue] = {}
            for r, v in j.R.items():
                acc[r] = acc.get(r, 0.0) + v * n
            if j.untyped and typed_res:
                for r in typed_res:
                    if self.may_use_type(j.queue, r[len(TYPED):]):
                        acc[r] = acc.get(r, 0.0) + j.untyped * j.tasks * n
        for leaf, acc in per_leaf.items():
            for q in leaf.path:
                for r, v in acc.items():
                    q.request[r] += v

    def _adopt_running(self, j: JobRT) -> None:
        spec = j.spec
        takes = []
        for nname, a in spec.allocation.items():
            node = self.node_by_name[nname]
            tk = Take(node, int(a.get("tasks", 1) or 1))
            for g in a.get("gpus", []) or []:
                key = int(g) if isinstance(g, str) and g.isascii() and g.isdigit() else g
                slot = node.slots.get(key)
                lst = node.free.get(slot.type, []) if slot is not None else []
                if slot is None or slot not in lst:
                    why = "unknown GPU" if slot is None else "GPU allocated twice"
                    raise ValueError(f"jobs[{spec.index}].allocation.{nname}.gpus: {why} {g!r}")
                lst.remove(slot)
                tk.idle_slots.append(slot)
                if slot.key in node.card_free:  # a card held whole offers no shards
                    del node.card_free[slot.key]
            tk.cpu = float(a.get("cpus", j.cpu * tk.tasks) or 0)
            tk.mem = float(a.get("memory_mb", j.mem * tk.tasks) or 0)
            tk.shard = float(a.get("shards", 0) or 0)
            node.cpu -= tk.cpu
            node.mem -= tk.mem
            if tk.shard:
                self._shard_claims.append((tk, shard_card(a)))
            ids = a.get("cpu_ids")
            if ids:
                held = self._cpu_held.setdefault(node, set())
                n = node.spec.cpus
                mine = sorted({c for c in ids if c.__class__ is int and 0 <= c < n and c not in held})
                held.update(mine)
                tk.cpu_ids = mine
            takes.append(tk)
        j.takes = takes
        j.charge = self.charge_of(takes)
        self._account(j, j.charge, 1.0)
        for q in j.queue.path:
            for r, v in j.charge.items():
                q.request[r] += v
        self._qos_add(j, 1.0)
        if spec.time_limit_s is not None and spec.time_limit_s > 0:
            start = spec.start_time if spec.start_time is not None else self.now
            j.end_time = max(self.now, start + spec.time_limit_s)

    def _recharge_shards(self) -> None:
        """Running jobs' shards count their card share only once their cards are known
        (`place_stored_shards`, after every running job is adopted): add the difference."""
        for j in self.running:
            if not any(tk.shard for tk in j.takes or ()):
                continue
            new = self.charge_of(j.takes or [])
            delta = {r: v - j.charge.get(r, 0.0) for r, v in new.items() if v != j.charge.get(r, 0.0)}
            if not delta:
                continue
            self._qos_add(j, -1.0)
            self._account(j, delta, 1.0)
            for q in j.queue.path:
                for r, v in delta.items():
                    q.request[r] += v
            j.charge = new
            self._qos_add(j, 1.0)

    def charge_of(self, takes: list[Take]) -> dict[str, float]:
        """What `takes` hold on the tracked resource keys (quota and limit accounting): the
        same amounts as their `gres_charge` (a MIG instance and a card's shards count their
        card share toward gres/gpu)."""
        c = dict.fromkeys(self.res, 0.0)
        for tk in takes:
            for s in tk.slots():
                c[GPU] += s.share
                k = TYPED + s.type
                if k in c:
                    c[k] += 1
            c["cpu"] += tk.cpu + tk.cpu_rel
            c["mem"] += tk.mem + tk.mem_rel
            n = tk.shard + tk.shard_rel
            if n:
                c[GPU] += n * _shard_share(tk)
                if "gres/shard" in c:
                    c["gres/shard"] += n
        return c

    def gres_charge(self, takes: list[Take]) -> Charge:
        """The charge of a start (batchd.slurm.gres): its TRES and one part per kind of device."""
        ch = Charge()
        t = ch.tres
        for tk in takes:
            t["cpu"] = t.get("cpu", 0.0) + tk.cpu + tk.cpu_rel
            t["mem"] = t.get("mem", 0.0) + tk.mem + tk.mem_rel
            t["node"] = t.get("node", 0.0) + 1
            for s in tk.slots():
                ch.add_part(TYPED + s.type, 1.0, s.card_type or s.type, s.share)
            n = tk.shard + tk.shard_rel
            if n:
                card = tk.node.slots.get(tk.shard_card) if tk.shard_card is not None else None
                ch.add_part(SHARD, n, card.card_type if card is not None else "", n * _shard_share(tk))
        return ch

    # -- accounting --------------------------------------------------------------------------
    def _account(self, j: JobRT, vec: dict[str, float], sign: float) -> None:
        np_ = not j.preemptible
        for q in j.queue.path:
            a = q.alloc
            for r, v in vec.items():
                a[r] += sign * v
            if np_:
                b = q.alloc_np
                for r, v in vec.items():
                    b[r] += sign * v

    def _qos_add(self, j: JobRT, sign: float) -> None:
        if j.qos_max is not None:
            k = (j.spec.qos, j.user)
            self.qos_used[k] = self.qos_used.get(k, 0.0) + sign * j.charge.get(GPU, 0.0)

    def over_limit(self, j: JobRT, vec: dict[str, float]) -> str | None:
        """The first resource key whose limit (or, for a non-preemptible job, quota) `vec`
        would exceed on the account or an ancestor; "np:<key>" for the quota case."""
        for q in j.queue.path:
            lim = q.limit
            al = q.alloc
            for r, v in vec.items():
                if v > 0:
                    li = lim[r]
                    if li != UNLIMITED and al[r] + v > li + EPS:
                        return r
        if not j.preemptible:
            for q in j.queue.path:
                for r, v in vec.items():
                    d = q.deserved[r]
                    if v > 0 and d != UNLIMITED and q.alloc_np[r] + v > d + EPS:
                        return "np:" + r
        if j.qos_max is not None:
            used = self.qos_used.get((j.spec.qos, j.user), 0.0)
            if used + vec.get(GPU, 0.0) > j.qos_max + EPS:
                return "qos"
        if j.array_max is not None and self.array_running.get(j.array, 0) >= j.array_max:
            return "array"
        if j.assoc is not None or j.queue.name in self.assoc_leaves:
            return assoc_over(self, j, vec)
        return None

    def lending_blocked(self, j: JobRT, vec: dict[str, float]) -> bool:
        """Kueue lending limits: the idle capacity that other accounts keep for themselves
        (unused quota above their lending limit) may not be taken."""
        if not self.lending_keys:
            return False
        path = set(j.queue.path)
        for r in self.lending_keys:
            v = vec.get(r, 0.0)
            if v <= 0:
                continue
            kept = 0.0
            for q in self.queues.values():
                lend = q.lending.get(r)
                if lend is None or q in path or q.deserved[r] == UNLIMITED:
                    continue
                kept += max(0.0, max(0.0, q.deserved[r] - q.alloc[r]) - lend)
            if kept > 0 and self.cluster_free(r) - v < kept - EPS:
                return True
        return False

    def cluster_free(self, r: str) -> float:
        tot = 0.0
        for n in self.nodes:
            if not n.usable:
                continue
            if r == GPU:
                tot += sum(s.share for lst in n.free.values() for s in lst)
            elif r.startswith(TYPED):
                tot += len(n.free.get(r[len(TYPED):], ()))
            elif r == "cpu":
                tot += n.cpu
            elif r == "mem":
                tot += n.mem
            elif r == "gres/shard":
                tot += n.idle_shards()
        return tot

    def close(self) -> None:
        """Drop the links that make the cycle's objects a reference cycle (each undo step
        holds the session; an account holds its parent, its children and its path, which
        names it; a node the jobs releasing its resources, which hold their takes of it),
        so that they are freed as soon as the session is, not later by the cyclic collector
        with all they reach (decide calls it once its decisions are out). The session is
        not to be used afterwards."""
        self.undo.clear()
        for q in self.queues.values():
            q.parent = None
            q.children = []
            q.path = []
        for n in self.nodes:
            n.rel_owner = {}
            n.rel_jobs = []
            n.card_owners = {}

    # -- statement ---------------------------------------------------------------------------
    def checkpoint(self) -> int:
        return len(self.undo)

    def rollback(self, cp: int) -> None:
        while len(self.undo) > cp:
            self.undo.pop()()

    def start(self, j: JobRT, takes: list[Take], after: list) -> None:
        prev = (j.takes, j.charge, j.end_time)
        j.takes = takes
        j.started = True
        j.charge = self.charge_of(takes)
        self._account(j, j.charge, 1.0)
        self._qos_add(j, 1.0)
        if j.array_max is not None:
            self.array_running[j.array] = self.array_running.get(j.array, 0) + 1
        if j.assoc is not None or self.run_mins:
            assoc_add(self, j, 1.0)
        self.starts.append((j, after))
        if j.time_limit is not None and j.time_limit > 0:
            j.end_time = self.now + j.time_limit

        def undo() -> None:
            self.starts.pop()
            if j.array_max is not None:
                self.array_running[j.array] -= 1
            if j.assoc is not None or self.run_mins:
                assoc_add(self, j, -1.0)
            self._qos_add(j, -1.0)
            self._account(j, j.charge, -1.0)
            for tk in reversed(takes):
                give_back(tk)
            j.takes, j.charge, j.end_time = prev
            j.started = False
        self.undo.append(undo)

    def evict(self, j: JobRT, reason: str, for_job: JobRT, policy: str = "") -> None:
        """Mark a running job preempted: its devices and amounts become *releasing* (usable by
        the job it is evicted for, which then starts after it). `policy`: the rule that allowed
        it (victims.py), for the decision."""
        takes = j.takes
        assert takes is not None
        for tk in takes:
            node = tk.node
            for s in tk.slots():
                _insert(node.rel.setdefault(s.type, []), s)
                node.rel_owner[s.key] = j
            node.cpu_rel += tk.cpu + tk.cpu_rel
            node.mem_rel += tk.mem + tk.mem_rel
            node.rel_jobs.append(j)
            if tk.cpu_ids or tk.cpu_ids_rel:
                node.cpu_ids_rel.extend(tk.cpu_ids + tk.cpu_ids_rel)
                node.cpu_ids_rel.sort()
            k = tk.shard_card
            if k is not None and k in node.card_free:  # the shards go back to their card
                node.card_rel[k] = node.card_rel.get(k, 0.0) + tk.shard + tk.shard_rel
                node.card_owners.setdefault(k, []).append(j)
                sync_card(node, k)
        self._account(j, j.charge, -1.0)
        self._qos_add(j, -1.0)
        if j.assoc is not None or self.run_mins:
            assoc_add(self, j, -1.0)
        j.evicted = True
        j.evict_seq = len(self.preempts)  # its place in this cycle's evictions (placement.take)
        self.preempts.append((j, reason, for_job, policy))

        def undo() -> None:
            self.preempts.pop()
            j.evicted = False
            if j.assoc is not None or self.run_mins:
                assoc_add(self, j, 1.0)
            self._qos_add(j, 1.0)
            self._account(j, j.charge, 1.0)
            for tk in reversed(takes):
                node = tk.node
                node.rel_jobs.remove(j)
                node.cpu_rel -= tk.cpu + tk.cpu_rel
                node.mem_rel -= tk.mem + tk.mem_rel
                if tk.cpu_ids or tk.cpu_ids_rel:
                    mine = set(tk.cpu_ids) | set(tk.cpu_ids_rel)
                    node.cpu_ids_rel[:] = [c for c in node.cpu_ids_rel if c not in mine]
                k = tk.shard_card
                if k is not None and k in node.card_free:
                    left = node.card_rel[k] - tk.shard - tk.shard_rel
                    if left > EPS:
                        node.card_rel[k] = left
                    else:
                        del node.card_rel[k]
                    owners = node.card_owners[k]
                    owners.remove(j)
                    if not owners:
                        del node.card_owners[k]
                    sync_card(node, k)
                for s in tk.slots():
                    node.rel[s.type].remove(s)
                    del node.rel_owner[s.key]
        self.undo.append(undo)


def _shard_share(tk: Take) -> float:
    """The card share of one shard of `tk`: 1 / its card's shards; 0 for shards on no card."""
    k = tk.shard_card
    if k is None or k == CARDLESS:
        return 0.0
    cap = tk.node.card_cap.get(k, 0.0)
    return 1.0 / cap if cap > 0 else 0.0
