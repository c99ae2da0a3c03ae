"""The event loop of `batchd simulate`: a trace replayed in virtual time through the cycle
the controller runs (`batchd.scheduler.decide` on a snapshot of docs/snapshot.md, with
Slurm's multifactor priorities from `batchd.priority.job_priorities` and fair-share usage
decayed by `batchd.priority.usage.advance_usage`), so that quotas, limits, over-quota
weights, reclaim with its grace time, backfill, gangs and time limits act as they do on a
cluster.

Events, in virtual seconds: a job's submission, a run's end (its work done, or its time
limit), and the end of a preempted run's grace time. After every instant at which
something happened, one cycle runs (the controller's cycle runs when something changes,
too; the periodic tick only reorders by age). A start the scheduler makes wait for its
victims (`after`) is taken by a later cycle, as the controller does.

- **Preemption.** A preempted run goes on for the grace time (its QOS's, else
  `[scheduler] grace_time_s`; or less, `term_exit_s`, for jobs that exit at SIGTERM
  sooner: a `sleep` exits at once), then ends and its job is requeued as the daemon requeues it:
  submitted anew (its age restarts) and held for REQUEUE_HOLD_S (BeginTime). It keeps the work up to
  its last checkpoint (the job's `checkpoint_s`, else its QOS's in `qos_checkpoint_s`, else
  `checkpoint_s` of the run's options; 0 = none, the job starts again from the start). The
  rest is counted as lost GPU-seconds.
- **Time limits.** A run that would outlast its time limit ends at it (TIMEOUT) and is not
  run again.
- **Budgets.** An account's GrpTRESMins (`grp_tres_mins`, `budget_period`) is counted as the
  controller counts it (batchd.accounting.budget: the TRES-minutes of its subtree's runs in
  the period, running ones up to now), every `[scheduler] budget_recount_s`, and given to the
  scheduler as the account's `budget_used`.
- **Fair share.** Usage is charged to "account/user" in billing units per second (the
  start's charge under `[accounting] tres_billing_weights`) and decayed with
  `[priority] decay_half_life_s`, every `[priority] calc_period_s` (Slurm's
  PriorityCalcPeriod, default 300 s) as the controller does; the fair-share factors are
  computed again only when the usage was.

Jobs ask for `gpus` whole cards and one CPU; a job larger than the largest node is a gang
of one-GPU tasks on as few nodes as can hold them (8 GPUs on 4-GPU nodes: 2 nodes). A job
with a `gres` asks for MIG instances, shards or cards of a type instead, and one with a
share of a card (`gpu_fraction`) for shards where the cluster has them (`resolve`).
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Any

from batchd.priority import fairshare_factors, merge_policy
from batchd.priority.multifactor import (
    PriorityContext,
    PriorityTerms,
    priority_at,
    priority_context,
    priority_horizon,
    priority_terms,
    with_fairshare_factor,
)
from batchd.priority.usage import Charge as UsageCharge
from batchd.priority.usage import advance_usage
from batchd.scheduler import decide, load_snapshot
from batchd.scheduler.snapshot import load_job
from batchd.sim.trace import TraceJob
from batchd.slurm.gres import GPU, SHARD, TYPED, Charge, is_profile, parse_node_gpus, whole_cards
from batchd.slurm.tres import billing, parse_billing_weights

END, GRACE_END, SUBMIT, BEGIN = 0, 1, 2, 3  # the order of events at one instant
#: a requeued job may not start again for this long (batchd/node/runs.py's REQUEUE_HOLD_S,
#: as slurmctld: reason BeginTime); tests/sim holds the two equal
REQUEUE_HOLD_S = 120


@dataclass(slots=True)
class SimJob:
    t: TraceJob
    account: str                  # the account it is scheduled in
    team: str = ""                # the design's account it belongs to (what the measures group by)
    state: str = "PENDING"        # PENDING, RUNNING, COMPLETED, TIMEOUT
    saved_s: float = 0.0          # work kept (checkpoints) from earlier runs
    start: float | None = None    # the current run's start
    first_start: float | None = None
    end: float | None = None
    alloc: dict[str, Any] = field(default_factory=dict)
    charge: dict[str, Any] | None = None
    gpu_share: float = 0.0        # the run's gres/gpu (a card's share for MIG and shards)
    bill: float = 0.0
    run_seq: int = 0              # numbers the runs: an end event of an earlier run is stale
    preempting_for: int | None = None
    submitted: float | None = None  # its submit time as the scheduler sees it (a requeue submits it anew)
    eligible_at: float = 0.0      # not before (the hold-off after a requeue)
    preemptor: bool = False
    never: bool = False           # larger than its account's GPU limit or the cluster: it can never start
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    gpu_s: float = 0.0            # GPU-seconds of all its runs
    runs: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, gpu share)
    entry: dict[str, Any] | None = None  # its snapshot entry (None: to be built again)
    entry_held: bool = False      # `entry` was built while the job was held off (BeginTime)
    spec: Any = None              # `entry` parsed (batchd.scheduler.snapshot.load_job)
    terms: PriorityTerms | None = None  # its priority terms, for `entry` under the current fair share
    tres: dict[str, float] = field(default_factory=dict)  # the current run's charged TRES
    charges: list[tuple[float, float, dict[str, float], float]] = field(default_factory=list)
    # (start, end, TRES, billing) of each run: what the bill prices
    key: str = ""                 # str(its id): its key in the snapshot's priorities
    prio: int = 0                 # its priority under `terms`, the same until `prio_until`
    prio_until: float = -math.inf  # (once checked there: `prio_checked`)
    prio_checked: bool = False
    fs_key: str = ""              # "account/user": its key in the fair-share factors
    req_key: str = GPU            # what one task asks for: gres/gpu, gres/gpu:TYPE (a card type or
    req_n: int = 0                # a MIG profile) or gres/shard, and how many (Simulation.resolve)
    per_node_n: int = 0           # the most of `req_key` one node offers (a gang beyond it)
    may_gang: bool = True         # whole cards may span nodes; MIG instances and shards are one node's
    demand: float = 0.0           # the GPUs (gres/gpu, card shares) it asks for: quotas and measures

    def __post_init__(self) -> None:
        self.key = str(self.t.id)
        self.fs_key = f"{self.account}/{self.t.user}"


@dataclass(slots=True)
class Sample:
    """The cluster between two instants: from `t` on, until the next sample."""
    t: float
    alloc: dict[str, float]       # account -> GPUs allocated (gres/gpu)
    demand: dict[str, float]      # account -> GPUs allocated + asked by its eligible pending jobs


@dataclass(slots=True)
class Result:
    jobs: list[SimJob]
    samples: list[Sample]
    accounts: list[dict[str, Any]]  # the design's accounts (their quotas are what the measures compare with)
    capacity_gpus: float
    end_s: float
    cycles: int
    preemptions: list[tuple[float, int, int, str]]  # (time, victim, for, reason)
    settings: dict[str, Any]
    prices: list[Any] = field(default_factory=list)  # the accounts file's [[price]] (batchd.model.Price)


class Simulation:
    def __init__(self, cfg: Any, accounts: list[dict[str, Any]], users: list[dict[str, Any]],
                 policy: dict[str, Any] | None = None, checkpoint_s: float = 0.0,
                 design: list[dict[str, Any]] | None = None, account_of: dict[str, str] | None = None,
                 term_exit_s: float | None = None, qos_checkpoint_s: dict[str, float] | None = None):
        """`accounts`/`users`/`policy` are what the scheduler is given; `design` the
        accounts the measures compare with (default `accounts`); `account_of` maps a team
        to the account its jobs are scheduled in (default: the team's own)."""
        self.cfg = cfg
        self.accounts = accounts
        self.design = design if design is not None else accounts
        self.account_of = account_of or {}
        self.users = users
        self.checkpoint_s = checkpoint_s
        self.qos_checkpoint_s: dict[str, float] = dict(qos_checkpoint_s or {})  # QOS -> its jobs' interval
        self.prices: list[Any] = []  # the design's prices, for the bill (from_files reads them)
        self.term_exit_s = term_exit_s  # how long a victim takes to exit after SIGTERM (None: all its grace time)
        self.policy = {**cfg.scheduler, **cfg.priority, "tres_billing_weights": cfg.tres_billing_weights,
                       **(policy or {})}
        self.weights = parse_billing_weights(cfg.tres_billing_weights)
        part = next((p for p in cfg.partitions if p.default), cfg.partitions[0] if cfg.partitions else None)
        self.partition = part.name if part else "batch"
        # a job without a time limit: the partition's DefaultTime, else its MaxTime (as sbatch and
        # the controller give it); None = unlimited
        dflt = (part.default_time_s or part.max_time_s) if part else None
        self.default_limit = None if dflt is None or dflt < 0 else float(dflt)
        self.default_qos = {a["name"]: (a.get("policy") or {}).get("default_qos") for a in accounts}
        self.part_nodes = list(part.nodes) if part else [n.name for n in cfg.nodes]
        self.nodes = []
        per_node = 0
        capacity = 0
        # each node's offer in charge keys, and a MIG profile's share of its card, for the
        # requests of MIG and shard jobs (resolve)
        self._offers: list[dict[str, float]] = []
        self._profile_share: dict[str, float] = {}
        for n in cfg.nodes:
            gpus = n.gpus if isinstance(n.gpus, list) else []
            cards = whole_cards(gpus)
            per_node = max(per_node, cards)
            inv = parse_node_gpus(gpus, cfg.shard_per_gpu * cards)
            capacity += len(inv.cards)
            self._offers.append(inv.capacity())
            for c in inv.cards:
                for m in c.mig:
                    self._profile_share.setdefault(m.profile, m.share)
            self.nodes.append({"name": n.name, "cpus": n.cpus, "memory_mb": n.memory_mb, "state": "IDLE",
                               "gpus": gpus, "shards": cfg.shard_per_gpu * cards})
        self.shard_per_gpu = cfg.shard_per_gpu
        self.per_node = max(per_node, 1)
        self.capacity = float(capacity)
        self.qos = {q.name: q for q in cfg.qos}
        # the snapshot's partitions and QOS (the configuration's: the same every cycle)
        self._partitions = [{"name": p.name, "default": p.default, "priority_job_factor": p.priority_job_factor,
                             "max_time_s": p.max_time_s} for p in cfg.partitions]
        self._qos_entries = [{"name": q.name, "priority": q.priority, "preemptible": q.preemptible,
                              "max_gpus_per_user": q.max_gpus_per_user, "usage_factor": q.usage_factor,
                              "min_runtime_reclaim_s": q.min_runtime_reclaim_s,
                              "min_runtime_preempt_s": q.min_runtime_preempt_s} for q in cfg.qos]
        self.grace = float(cfg.scheduler.get("grace_time_s", 60))
        self.half_life = float(cfg.priority.get("decay_half_life_s", 604800))
        self.default_account = next((a["account"] for a in users if a.get("is_default")), None)
        self.calc_period = float(cfg.priority.get("calc_period_s", 300))
        self._fs: dict[str, float] | None = None  # the fair-share factors of the current usage
        self._prio_ctx: PriorityContext | None = None
        # str(id) -> priority of each job pending or running: the snapshot's `priorities`,
        # kept from cycle to cycle (a job's is set again when computed again, removed at its end)
        self._prios: dict[str, int] = {}
        self._last_loaded: Any = None  # the last cycle's Snapshot (its parsed jobs are reused)
        self._jobs: dict[int, SimJob] = {}  # the run's jobs by id
        self._pend_gpus: dict[str, int] = {}  # team -> GPUs its pending jobs of whole cards ask for (_pend_add)
        self._pend_parts = 0  # pending jobs that ask for a share of a card (MIG, shards)
        # GrpTRESMins budgets: account -> (its TRES-minute limits, its period, the accounts of
        # its subtree); counted every `[scheduler] budget_recount_s` as the controller does
        self.budgets: dict[str, tuple[dict[str, float], str, set[str]]] = {}
        if any((a.get("policy") or {}).get("grp_tres_mins") for a in accounts):
            from types import SimpleNamespace

            from batchd.accounting.budget import subtree

            tree = [SimpleNamespace(name=a["name"], parent=a.get("parent")) for a in accounts]
            for a in accounts:
                pol = a.get("policy") or {}
                if pol.get("grp_tres_mins"):
                    self.budgets[a["name"]] = (dict(pol["grp_tres_mins"]), str(pol.get("budget_period", "month")),
                                               subtree(tree, a["name"]))
        self.budget_every = float(cfg.scheduler.get("budget_recount_s", 60.0))
        self._budget_at = -math.inf
        self._closed: dict[str, list[tuple[float, float, dict[str, float]]]] = {}  # account -> ended runs' TRES
        # budget -> (its period's start, how many of each account's ended runs are summed, their sum)
        self._closed_sum: dict[str, tuple[float, dict[str, int], dict[str, float]]] = {}
        if self.budgets:
            self.accounts = [dict(a) for a in accounts]  # their budget_used is set on these copies
        by_name = {a["name"]: a for a in self.accounts}
        self._budget_entry = {name: by_name[name] for name in self.budgets}  # where budget_used goes
        self._budgeted = set().union(*(sub for _l, _p, sub in self.budgets.values()))  # accounts counted
        self._period: dict[str, tuple[int, float]] = {}  # period -> (UTC day, its start): it moves at midnights
        self._now = 0.0
        by_name = {a["name"]: a for a in accounts}
        self.gpu_cap: dict[str, float] = {}  # account -> the most GPUs its jobs may hold (its path's limits)
        # account -> the most of a GPU model, MIG profile (gres/gpu:TYPE) or of gres/shard its
        # jobs may hold, where its path limits them
        self.res_cap: dict[str, dict[str, float]] = {}
        for a in accounts:
            cap: float = self.capacity
            caps: dict[str, float] = {}
            cur: dict[str, Any] | None = a
            while cur is not None:
                for key, r in (cur.get("resources") or {}).items():
                    lim = float(r.get("limit", r.get("quota", -1)))  # an unset limit is the quota
                    if lim < 0:
                        continue
                    if key == GPU:
                        cap = min(cap, lim)
                    elif key.startswith(TYPED) or key == SHARD:
                        caps[key] = min(caps.get(key, math.inf), lim)
                cur = by_name.get(cur.get("parent") or "")
            self.gpu_cap[a["name"]] = cap
            self.res_cap[a["name"]] = caps

    # ------------------------------------------------------------------ snapshot
    def resolve(self, j: SimJob) -> None:
        """Set what `j` asks for (`req_key`, `req_n`, `per_node_n`, `demand`) and whether it
        can never start (`never`: more GPUs than its account's limits, or a request no node
        of the cluster offers, or more of a GPU model, MIG profile or shards than its account's
        limit of them). Whole cards: its `gpus`. Its `gres`: MIG instances count
        their card's share (batchd.slurm.gres), shards one card's `shard_per_gpu`-th each,
        typed cards one each. A share of a card (`gpu_fraction`) is that share of a card's
        shards where the cluster has shards, else a whole card."""
        t = j.t
        if t.gres:
            from batchd.sim.trace import split_gres

            name, typ, n = split_gres(t.gres)
            key = SHARD if name == "shard" else (TYPED + typ if typ else GPU)
        elif t.gpu_fraction < 1.0 and self.shard_per_gpu > 0:
            key, n = SHARD, max(1, math.ceil(t.gpu_fraction * self.shard_per_gpu - 1e-9))
        else:
            key, n = GPU, t.gpus
        j.req_key, j.req_n = key, n
        if key == GPU:
            j.per_node_n, j.demand, fits = self.per_node, float(n), True
        else:
            j.per_node_n = int(max((o.get(key, 0.0) for o in self._offers), default=0.0))
            whole = j.may_gang = key.startswith(TYPED) and not is_profile(key[len(TYPED):])
            fits = (sum(o.get(key, 0.0) for o in self._offers) if whole else j.per_node_n) >= n > 0
            if key == SHARD:
                j.demand = n / self.shard_per_gpu if self.shard_per_gpu else 0.0
            elif whole:
                j.demand = float(n)
            else:
                j.demand = n * self._profile_share.get(key[len(TYPED):], 1.0)
        over = key != GPU and n > self.res_cap.get(j.account, {}).get(key, math.inf) + 1e-9
        j.never = not fits or over or j.demand > self.gpu_cap.get(j.account, self.capacity) + 1e-9

    def _request(self, j: SimJob) -> dict[str, Any]:
        g, key = j.req_n, j.req_key
        if g <= j.per_node_n or not j.may_gang:
            return {"tasks": 1, "nodes": None, "per_task": {key: g, "cpu": 1}}
        # more than a node holds: one task a GPU on as few nodes as can hold them, a gang
        return {"tasks": g, "nodes": math.ceil(g / max(j.per_node_n, 1)), "per_task": {key: 1, "cpu": 1}}

    def qos_of(self, j: SimJob) -> str | None:
        """The job's QOS: the trace's, else its account's default, else `normal` where the
        config has it."""
        return j.t.qos or self.default_qos.get(j.account) or ("normal" if "normal" in self.qos else None)

    def limit_of(self, j: SimJob) -> float | None:
        return j.t.time_limit_s if j.t.time_limit_s is not None else self.default_limit

    def _entry(self, j: SimJob) -> dict[str, Any]:
        q = self.qos.get(self.qos_of(j) or "")
        limit = self.limit_of(j)
        d: dict[str, Any] = {
            "id": j.t.id, "account": j.account, "user": j.t.user, "state": j.state,
            "priority": q.priority if q else 0, "preemptible": q.preemptible if q else True,
            "submit_time": j.t.submit_s if j.submitted is None else j.submitted,
            "eligible_time": max(j.t.submit_s if j.submitted is None else j.submitted, j.eligible_at),
            "time_limit_s": None if limit is None else int(math.ceil(limit)),
            "partition": self.partition, "partition_nodes": self.part_nodes,
            **self._request(j),
        }
        if self.qos_of(j):
            d["qos"] = self.qos_of(j)
        if j.state == "RUNNING":
            d["start_time"] = j.start
            d["allocation"] = j.alloc
            if j.charge:
                d["charge"] = j.charge
            if j.preempting_for is not None:
                d["preempting_for"] = j.preempting_for
        else:
            if j.preemptor:
                d["preemptor"] = True
            if j.eligible_at > self._now:
                d["eligible"] = False
                d["reason"] = "BeginTime"
        return d

    def snapshot(self, now: float, usage: dict[str, float]) -> dict[str, Any]:
        """The snapshot of `now` but for its `jobs` (the cycle fills them: `_cycle`)."""
        self._now = now
        return {
            "version": 1, "now": now, "policy": self.policy, "cluster": self.cfg.cluster_name,
            "partitions": self._partitions, "nodes": self.nodes, "accounts": self.accounts, "users": self.users,
            "usage": {"accounts": {}, "users": dict(usage)}, "jobs": [], "qos": self._qos_entries,
        }

    # ------------------------------------------------------------------ the loop
    def run(self, trace: list[TraceJob], until: float | None = None) -> Result:
        known = {a["name"] for a in self.design}
        jobs: dict[int, SimJob] = {}
        for t in trace:
            team = t.team if t.team in known else (self.default_account or "default")
            j = jobs[t.id] = SimJob(t, self.account_of.get(team, team), team)
            self.resolve(j)
        events: list[tuple[float, int, int, int, int]] = []  # (time, kind, order, job, run_seq)
        order = 0
        for t in trace:
            heapq.heappush(events, (t.submit_s, SUBMIT, order, t.id, 0))
            order += 1
        pending: dict[int, SimJob] = {}
        running: dict[int, SimJob] = {}
        self._jobs = jobs
        self._prios = {}
        self._pend_gpus = {}
        self._pend_parts = 0
        self._active: list[int] = []  # the ids of the jobs pending or running, in order
        usage: dict[str, float] = {}
        ended_runs: list[UsageCharge] = []
        last_accrual = trace[0].submit_s if trace else 0.0
        samples: list[Sample] = []
        preemptions: list[tuple[float, int, int, str]] = []
        cycles = 0
        now = last_accrual
        while events:
            now = events[0][0]
            if until is not None and now > until:
                now = until
                break
            while events and events[0][0] == now:
                _t, kind, _o, jid, seq = heapq.heappop(events)
                j = jobs[jid]
                if kind == SUBMIT:
                    pending[jid] = j
                    self._pend_add(j, 1)
                    bisect.insort(self._active, jid)
                elif kind == END and j.state == "RUNNING" and j.run_seq == seq:
                    done = j.saved_s + (now - _start(j, now))
                    j.state = "COMPLETED" if done + 1e-6 >= j.t.duration_s else "TIMEOUT"
                    self._close_run(j, now, ended_runs)
                    j.end = now
                    j.entry = j.spec = j.terms = None  # it is in no snapshot again
                    self._prios.pop(j.key, None)
                    del running[jid]
                    del self._active[bisect.bisect_left(self._active, jid)]
                elif kind == GRACE_END and j.state == "RUNNING" and j.run_seq == seq:
                    worked = now - _start(j, now)
                    ck = j.t.checkpoint_s or self.qos_checkpoint_s.get(self.qos_of(j) or "", self.checkpoint_s)
                    kept = math.floor(worked / ck) * ck if ck > 0 else 0.0
                    j.lost_gpu_s += (worked - kept) * j.gpu_share
                    j.saved_s += kept
                    self._close_run(j, now, ended_runs)
                    j.state = "PENDING"
                    j.preempting_for = None
                    j.submitted = now
                    j.eligible_at = now + REQUEUE_HOLD_S
                    j.entry = None
                    del running[jid]
                    pending[jid] = j
                    self._pend_add(j, 1)
                    heapq.heappush(events, (j.eligible_at, BEGIN, order, jid, 0))
                    order += 1
            # usage up to now every calc period (the controller's usage cycle), then one cycle
            if now - last_accrual >= self.calc_period:
                charges = ended_runs + [UsageCharge(f"{j.account}/{j.t.user}", j.bill, j.start, None,
                                                    self._usage_factor(j)) for j in running.values()]
                usage = advance_usage(usage, charges, last_accrual, now, self.half_life)
                last_accrual = now
                ended_runs = []
                self._fs = None
            if pending:
                cycles += 1
                order = self._cycle(now, pending, running, usage, events, order, preemptions)
            samples.append(self._sample(now, pending, running))
        end = now
        for j in list(running.values()):  # cut at --until: the runs so far count
            self._close_run(j, end, [])
        return Result(list(jobs.values()), samples, self.design, self.capacity, end, cycles, preemptions,
                      {"policy": self.policy, "checkpoint_s": self.checkpoint_s,
                       "qos_checkpoint_s": dict(self.qos_checkpoint_s)}, list(self.prices))

    def _usage_factor(self, j: SimJob) -> float:
        q = self.qos.get(self.qos_of(j) or "")
        return q.usage_factor if q else 1.0

    def _close_run(self, j: SimJob, now: float, ended: list[UsageCharge]) -> None:
        start = _start(j, now)
        j.runs.append((start, now, j.gpu_share))
        j.charges.append((start, now, j.tres, j.bill))
        j.gpu_s += (now - start) * j.gpu_share
        if self.budgets:
            if j.account in self._budgeted:
                self._closed.setdefault(j.account, []).append((start, now, {**j.tres, "billing": j.bill}))
        ended.append(UsageCharge(f"{j.account}/{j.t.user}", j.bill, start, now, self._usage_factor(j)))
        j.run_seq += 1

    def _cycle(self, now: float, pending: dict[int, SimJob], running: dict[int, SimJob], usage: dict[str, float],
               events: list[tuple[float, int, int, int, int]], order: int,
               preemptions: list[tuple[float, int, int, str]]) -> int:
        active = [self._jobs[i] for i in self._active]  # running and pending, by id
        if self.budgets and now - self._budget_at >= self.budget_every:
            self._count_budgets(now, running)
        snap = self.snapshot(now, usage)
        fs_new = self._fs is None
        if fs_new:
            merged = merge_policy(None, snap)
            self._fs = fairshare_factors(snap) if merged["weight_fairshare"] else {}
            # the maxima and totals of the context come from the configuration alone (the
            # simulator's entries carry no per-job partition, QOS or association factors)
            if self._prio_ctx is None:
                self._prio_ctx = priority_context(snap, merged, [self._entry(x) for x in active])
        ctx = self._prio_ctx
        fs = self._fs
        assert ctx is not None and fs is not None
        # the snapshot but for its jobs, validated and parsed as always; each job's parse is
        # kept with its entry (`SimJob.spec`) and made again only with it
        base = load_snapshot(snap, self._last_loaded)
        self._last_loaded = base
        entries: list[dict[str, Any]] = snap["jobs"]
        specs = []
        prios = self._prios  # each active job's priority, set where it is computed again
        inf = math.inf
        for i, x in enumerate(active):
            # its entry, built again only when what it shows has changed (whatever changes its
            # state, run, preemption or hold-off sets `entry` to None; a hold-off ends with
            # time): the same dict otherwise, which its parse and priority terms rely on
            e = x.entry
            if e is None or (x.entry_held and x.eligible_at <= now):
                e = x.entry = self._entry(x)
                x.entry_held, x.terms, x.spec = x.eligible_at > now, None, None
            entries.append(e)
            sp = x.spec
            if sp is None:
                sp = x.spec = load_job(e, i, base)
            else:
                sp.index = i
            specs.append(sp)
            terms = x.terms
            if terms is None:
                terms = x.terms = priority_terms(ctx, e, fs)
                x.prio_until = -inf
            elif fs_new:
                n_fs = fs.get(x.fs_key, 0.0)
                if n_fs != terms.norm[1]:  # an equal factor gives equal terms: they stand
                    terms = x.terms = with_fairshare_factor(ctx, terms, n_fs)
                    x.prio_until = -inf
            # computed again only once it may have changed: it is the same at the horizon
            # (checked when first relied on) and hence until then (priority_horizon)
            if now > x.prio_until or not (x.prio_checked or priority_at(ctx, terms, x.prio_until) == x.prio):
                x.prio, x.prio_until = priority_horizon(ctx, terms, now)
                x.prio_checked = x.prio_until == inf
                prios[x.key] = x.prio
            else:
                x.prio_checked = True
        snap["priorities"] = prios
        loaded = replace(base, jobs=specs)
        dec = decide(loaded, explain=False)
        for st in dec.start:
            if st.get("after"):
                continue  # waits for its victims' devices: a later cycle starts it
            jid = int(st["job"])
            if jid not in pending:
                # a victim of this cycle's reclaim placed again elsewhere: the controller's
                # start is conditional on PENDING, so it is not moved; it ends its grace time
                # and is requeued like the others
                continue
            j = pending.pop(jid)
            self._pend_add(j, -1)
            ch = Charge.from_json(st["charge"])
            j.state, j.start, j.alloc, j.charge = "RUNNING", now, st["allocation"], ch.record()
            j.gpu_share = float(ch.tres.get("gres/gpu", j.demand))
            j.bill = billing(self.weights, ch.tres, parts=ch.billing_parts())
            j.tres = dict(ch.tres)
            j.preemptor = False
            j.entry = None
            if j.first_start is None:
                j.first_start = now
            left = max(0.0, j.t.duration_s - j.saved_s)
            limit = self.limit_of(j)
            run_for = left if limit is None else min(left, limit)
            running[jid] = j
            heapq.heappush(events, (now + run_for, END, order, jid, j.run_seq))
            order += 1
        for p in dec.preempt:
            v = running.get(int(p["job"]))
            if v is None or v.preempting_for is not None:
                continue
            v.preempting_for = int(p["for"])
            v.entry = None
            v.preemptions += 1
            preemptions.append((now, v.t.id, int(p["for"]), str(p.get("reason") or "")))
            who = pending.get(int(p["for"]))
            if who is not None:
                who.preemptor = True
                who.entry = None
            q = self.qos.get(self.qos_of(v) or "")
            grace = float(q.grace_time_s) if q else self.grace
            if self.term_exit_s is not None:
                grace = min(grace, self.term_exit_s)
            heapq.heappush(events, (now + grace, GRACE_END, order, v.t.id, v.run_seq))
            order += 1
        return order

    def _count_budgets(self, now: float, running: dict[int, SimJob]) -> None:
        """Each budgeted account's `budget_used`: the TRES-minutes its subtree's runs used in
        the budget period holding `now` (batchd.accounting.budget: ended runs and running ones
        up to now, rounded to 3 decimals), put on its account entry for Session."""
        from batchd.accounting.budget import period_start

        self._budget_at = now
        live: dict[str, list[tuple[float, float, dict[str, float]]]] = {}
        for j in running.values():
            if j.account in self._budgeted:
                live.setdefault(j.account, []).append((_start(j, now), now, {**j.tres, "billing": j.bill}))
        day = int(now // 86400)
        for name, (limits, period, sub) in self.budgets.items():
            cached = self._period.get(period)
            if cached is None or cached[0] != day:  # every period starts at a UTC midnight
                cached = self._period[period] = (day, float(period_start(period, now)))
            t0 = cached[1]
            start0, done, closed = self._closed_sum.get(name, (t0, {}, {}))
            if start0 != t0:  # a new period: its ended runs are summed again
                done, closed = {}, {}
            for acct in sub:  # the ended runs not summed yet (an ended run ends before now)
                runs = self._closed.get(acct, [])
                for start, end, tres in runs[done.get(acct, 0):]:
                    _add_tres_s(closed, tres, end - max(start, t0))
                done[acct] = len(runs)
            self._closed_sum[name] = (t0, done, closed)
            used = dict(closed)
            for acct in sub:
                for start, end, tres in live.get(acct, ()):
                    _add_tres_s(used, tres, end - max(start, t0))
            self._budget_entry[name]["budget_used"] = {t: round(used.get(t, 0.0) / 60.0, 3) for t in limits}

    def _pend_add(self, j: SimJob, sign: int) -> None:
        """Count a job joining (+1) or leaving (-1) the pending set in its team's GPUs asked
        (a job that can never start asks for nothing the design could give)."""
        if j.never:
            return
        if j.demand.is_integer():
            self._pend_gpus[j.team] = self._pend_gpus.get(j.team, 0) + sign * int(j.demand)
        else:
            self._pend_parts += sign  # a share of a card: summed job by job (_sample)

    def _sample(self, now: float, pending: dict[int, SimJob], running: dict[int, SimJob]) -> Sample:
        alloc: dict[str, float] = {}
        for j in running.values():
            alloc[j.team] = alloc.get(j.team, 0.0) + j.gpu_share
        if not self._pend_parts and all(v.is_integer() for v in alloc.values()):
            # whole cards: the pending jobs' (whole) GPUs added at once are the same sum as
            # added job by job
            demand = dict(alloc)
            for team, g in self._pend_gpus.items():
                if g:
                    demand[team] = demand.get(team, 0.0) + g
            return Sample(now, alloc, demand)
        demand = dict(alloc)
        for j in pending.values():
            if not j.never:  # a job that can never start asks for nothing the design could give
                demand[j.team] = demand.get(j.team, 0.0) + j.demand
        return Sample(now, alloc, demand)


def _add_tres_s(acc: dict[str, float], tres: dict[str, float], secs: float) -> None:
    if secs > 0:
        for k, v in tres.items():
            acc[k] = acc.get(k, 0.0) + v * secs


def _start(j: SimJob, now: float) -> float:
    return float(j.start) if j.start is not None else now


def from_files(config_path: str, accounts_path: str | None, trace: list[TraceJob],
               policy: dict[str, Any] | None = None, checkpoint_s: float = 0.0, design: str = "batchd",
               lending_fraction: float = 0.5, term_exit_s: float | None = None,
               qos_checkpoint_s: dict[str, float] | None = None) -> Simulation:
    """A Simulation of the cluster of `config_path` (its nodes, partitions, QOS, scheduler,
    priority and billing settings) with the accounts of `accounts_path` (`batchd apply`'s
    file) under the policy `design` (batchd.sim.policies). Each (team, user) of the trace
    is a user association of the team's account; a team that is no account runs in
    `default`."""
    import tomllib

    from batchd.config import load_config
    from batchd.model import Node
    from batchd.server.accounts import cluster_gpu_types, config_names, parse_accounts
    from batchd.sim.policies import apply_policy

    cfg = load_config(config_path, dev=True)
    unknown = sorted(set(qos_checkpoint_s or {}) - {q.name for q in cfg.qos})
    if unknown:
        raise ValueError(f"--qos-checkpoint: no QOS named {', '.join(unknown)} in {config_path}")
    doc: dict[str, Any] = {}
    if accounts_path:
        with open(accounts_path, "rb") as f:
            doc = tomllib.load(f)
    nodes = [Node(name=n.name, state="IDLE", cpus=n.cpus, memory_mb=n.memory_mb,
                  gpus=n.gpus if isinstance(n.gpus, list) else [], heartbeat=0.0) for n in cfg.nodes]
    parsed = parse_accounts(doc, cluster_gpu_types(nodes), config_names(cfg))
    accounts = [{"name": a.name, "parent": a.parent, "priority": a.priority, "shares": a.shares,
                 "resources": a.resources, **({"policy": a.policy} if a.policy else {})} for a in parsed.accounts]
    names = {a["name"] for a in accounts}
    if "default" not in names:
        accounts.append({"name": "default", "parent": "root", "priority": 100, "shares": 1, "resources": {}})
        names.add("default")
    users = [{"name": u["user"], "account": u["account"], "shares": "parent" if u.get("shares") is None
              else u["shares"]} for u in parsed.associations]
    have = {(u["account"], u["name"]) for u in users}
    for t in trace:
        account = t.team if t.team in names else "default"
        if (account, t.user) not in have:
            users.append({"name": t.user, "account": account, "shares": 1})
            have.add((account, t.user))
    base = {**cfg.scheduler, **cfg.priority, **(policy or {})}
    sched_accounts, sched_users, sched_policy, account_of = apply_policy(design, accounts, users, base,
                                                                         lending_fraction)
    sim = Simulation(cfg, sched_accounts, sched_users, sched_policy, checkpoint_s, design=accounts,
                     account_of=account_of, term_exit_s=term_exit_s, qos_checkpoint_s=qos_checkpoint_s)
    if doc.get("price") is not None:
        from batchd.accounting.prices import parse_prices

        sim.prices = parse_prices(doc)  # a PriceError (a ValueError) names the bad entry
    return sim
