"""Slurm's multifactor job priority, computed from a raw snapshot dict.

Pure: no I/O, no clock (``snapshot["now"]``), no logging.

    priority = W_age*F_age + W_assoc*F_assoc + W_fs*F_fs + W_js*F_js + W_part*F_part
               + W_qos*F_qos + sum_t(W_tres[t]*F_tres[t]) + site - nice

computed as a double; below 1 it becomes 1 (0 is reserved for held jobs, which get
0); then truncated to an integer and capped at 4294967295. A job with an
``admin_priority`` keeps it.

Factors (all in [0, 1] unless a NO_NORMAL_* flag makes them raw):

* age: ``min(1, (now - accrue_time) / max_age_s)``; 0 while the job cannot accrue
  (held, waiting for its begin time or a dependency).
* assoc: the user association's ``assoc_priority`` / the largest one.
* fair-share: the user association's factor (Fair Tree or classic).
* job size: ``(n/N + c/C) / 2`` with N active nodes, C their CPUs, n the job's nodes
  and c its CPUs; with ``favor_small`` ``((N-n)/N + (C-c)/C) / 2``;
  SMALL_RELATIVE_TO_TIME: ``max(c, n*C/N) / time_limit_minutes / C`` (1 minus that
  with ``favor_small``), clamped to [0, 1].
* partition: ``partition_job_factor`` / the largest over the snapshot.
* QOS: ``qos_priority_value`` / the largest over the snapshot.
* TRES: for each TRES of ``weight_tres``, the job's count / the cluster's total.

Snapshot keys read (besides those of ``batchd.priority.tree``)
-------------------------------------------------------------
``now``; ``nodes[].name/cpus/memory_mb/state/gpus`` (totals and the active-node count
of the job-size factor; nodes whose state starts with DOWN or DRAIN are not active);
optional ``partitions[].priority_job_factor`` and ``qos[].priority`` (the maxima of the
partition and QOS factors). Per job: ``id``, ``account``, ``user``, ``state``,
``submit_time``, ``tasks``, ``nodes``, ``per_task``, ``allocation``, ``time_limit_s``,
and the optional ``partition`` (shown by sprio; default the snapshot's default
partition, else "batch"), ``qos`` (default
"normal"), ``nice`` (0), ``site_factor`` (0), ``hold`` (false), ``reason`` (a
``JobHeld*``, ``BeginTime`` or ``Dependency`` reason stops age accrual),
``accrue_time`` / ``eligible_time`` (default ``submit_time``), ``begin_time``,
``partition_job_factor`` (1), ``qos_priority_value`` (0; the job's ``priority`` key is
the KAI queue priority and is not used here), ``assoc_priority`` (0),
``partition_tres`` (``{tres: total}``, default the whole cluster), ``tres``
(``{tres: count}`` or a TRES string; default from the allocation of a running job or
``tasks x per_task`` of a pending one), ``admin_priority``, ``charge`` (a running job's
charge, batchd.slurm.gres record form). A running job's GPU TRES are its charge, else its
allocation's by the GPU model of batchd.slurm.gres (a MIG instance counts 1 toward its
profile's TRES and its card share toward ``gres/gpu``; shards their card share).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from batchd.priority.policy import priority_flags, tres_weights
from batchd.slurm.gres import SHARE_SEP, Charge, charge_of_allocation, node_inventories, parse_node_gpus
from batchd.slurm.tres import normalize_tres_name, parse_tres, tres_sort_key

__all__ = ["JobFactors", "PriorityContext", "PriorityTerms", "job_factors", "job_tres", "job_charge", "cluster_tres",
           "priority_at", "priority_context", "priority_horizon", "priority_terms", "with_fairshare",
           "with_fairshare_factor"]

MAX_PRIORITY = 4294967295
_MIG_SLICES = re.compile(r"(?:^|[_:])(\d+)g\.\d+gb$")
_NO_ACCRUE = ("JobHeldUser", "JobHeldAdmin", "BeginTime", "Dependency", "DependencyNeverSatisfied")
_FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
          "BOOT_FAIL", "DEADLINE")


@dataclass
class JobFactors:
    """The priority of one job and its parts. ``norm`` holds the normalised factors
    (age, assoc, fairshare, jobsize, partition, qos) and ``tres_norm`` the per-TRES
    ones; ``weighted`` and ``tres`` the weighted values (factor x weight). ``priority``
    is the integer Slurm would store (0 held, >= 1 otherwise)."""

    job_id: str
    user: str
    account: str
    partition: str
    qos: str
    state: str
    priority: int
    priority_exact: float
    site: int = 0
    nice: int = 0
    held: bool = False
    admin: bool = False
    norm: dict[str, float] = field(default_factory=dict)
    weighted: dict[str, float] = field(default_factory=dict)
    tres_norm: dict[str, float] = field(default_factory=dict)
    tres: dict[str, float] = field(default_factory=dict)


def _gpu_totals(node: dict) -> dict[str, float]:
    """The node's GPU TRES totals by the GPU model (batchd.slurm.gres): `gres/gpu` cards,
    `gres/gpu:TYPE` whole cards, `gres/gpu:PROFILE` MIG instances, `gres/shard`."""
    try:
        inv = parse_node_gpus(node.get("gpus"), int(node.get("shards") or 0))
    except (ValueError, TypeError):
        return {}
    return {normalize_tres_name(k): v for k, v in inv.capacity().items() if SHARE_SEP not in k}


def _active(node: dict) -> bool:
    st = str(node.get("state") or "IDLE").upper()
    return not (st.startswith("DOWN") or st.startswith("DRAIN"))


def cluster_tres(snapshot: dict) -> tuple[dict[str, float], int, float]:
    """(TRES totals of all nodes, active node count N, active CPUs C)."""
    nodes = snapshot.get("nodes") or []
    tot: dict[str, float] = {"cpu": 0.0, "mem": 0.0, "node": float(len(nodes))}
    for n in nodes:
        tot["cpu"] += float(n.get("cpus", 0) or 0)
        tot["mem"] += float(n.get("memory_mb", 0) or 0)
        for k, v in _gpu_totals(n).items():
            tot[k] = tot.get(k, 0.0) + v
    active = [n for n in nodes if _active(n)] or list(nodes)
    return tot, len(active), float(sum(float(n.get("cpus", 0) or 0) for n in active))


def job_charge(job: dict, nodes: dict[str, dict] | None) -> Charge | None:
    """What a running job is charged for (batchd.slurm.gres): its stored ``charge`` (record form),
    else its ``allocation`` against ``nodes`` (name -> snapshot node); None for a pending
    job, or a running one with neither a charge nor the nodes to read its allocation with."""
    if str(job.get("state", "PENDING")).upper() != "RUNNING" or not job.get("allocation"):
        return None
    rec = job.get("charge")
    if isinstance(rec, dict) and rec:
        return Charge.from_record(rec)
    if not nodes:
        return None
    return charge_of_allocation(job["allocation"], node_inventories(nodes.values()))


def job_tres(job: dict, nodes: dict[str, dict] | None = None) -> dict[str, float]:
    """The job's TRES counts (job totals, mem in MiB), see the module docstring.

    For a running job the allocation gives cpu, mem, node and gres/gpu, and, when
    ``nodes`` (name -> snapshot node) is given, ``gres/gpu:TYPE`` of the allocated
    devices (as Slurm's AllocTRES names the type even for an untyped request)."""
    given = job.get("tres")
    if isinstance(given, str):
        return parse_tres(given)
    if isinstance(given, dict):
        return {normalize_tres_name(k): float(v) for k, v in given.items()}
    tasks = int(job.get("tasks") or 1)
    alloc = job.get("allocation") or {}
    running = str(job.get("state", "PENDING")).upper() == "RUNNING" and alloc
    if not running:
        # pending jobs repeat a few shapes: compute each shape once
        pt = job.get("per_task") or {}
        key = (tasks, job.get("nodes"), tuple(sorted(pt.items())))
        hit = _PENDING_TRES.get(key)
        if hit is None:
            if len(_PENDING_TRES) > 4096:
                _PENDING_TRES.clear()
            hit = _PENDING_TRES[key] = _pending_tres(pt, tasks, job.get("nodes"))
        return dict(hit)
    per = {normalize_tres_name(k): float(v) for k, v in (job.get("per_task") or {}).items()}
    out = {k: v * tasks for k, v in per.items()}
    out.setdefault("cpu", float(tasks))
    ch = job_charge(job, nodes)
    if ch is not None:  # the allocation's charge replaces the request's GPU and node keys
        for k in [k for k in out if k.startswith(("gres/gpu", "gres/shard"))]:
            del out[k]
        out.update({normalize_tres_name(k): v for k, v in ch.tres.items()})
        return out
    out["node"] = float(len(alloc))
    out["cpu"] = float(sum(float(a.get("cpus", 0) or 0) for a in alloc.values()))
    out["mem"] = float(sum(float(a.get("memory_mb", 0) or 0) for a in alloc.values()))
    ngpu = float(sum(len(a.get("gpus") or []) for a in alloc.values()))
    if ngpu or "gres/gpu" in out:
        out["gres/gpu"] = ngpu
    return out


# (tasks, nodes, per_task items) -> TRES of a pending job of that shape
_PENDING_TRES: dict[tuple, dict[str, float]] = {}


def _pending_tres(per_task: dict, tasks: int, nodes: Any) -> dict[str, float]:
    out = {normalize_tres_name(k): float(v) * tasks for k, v in per_task.items()}
    out.setdefault("cpu", float(tasks))
    out["node"] = float(nodes or 1)
    return out


def _age_from(job: dict) -> tuple[float | None, float | None]:
    """(the time the job's age counts from, its begin time): (None, None) when it does not
    accrue age at all (held, or waiting for a dependency)."""
    if str(job.get("reason") or "") in _NO_ACCRUE or job.get("hold"):
        return None, None
    begin = job.get("begin_time")
    t = job.get("accrue_time", job.get("eligible_time", job.get("submit_time")))
    return (None if t is None else float(t)), (None if begin is None else float(begin))


def _age_at(since: tuple[float | None, float | None], now: float, max_age: float) -> float:
    t, begin = since
    if t is None or (begin is not None and begin > now):
        return 0.0
    if max_age <= 0:
        return 1.0
    return min(max(now - t, 0.0) / max_age, 1.0)


def _jobsize(job: dict, tres: dict[str, float], n_active: int, c_active: float, policy: dict,
             flags: set[str]) -> float:
    n = tres.get("node", 1.0)
    c = tres.get("cpu", 1.0)
    if n_active <= 0 or c_active <= 0:
        return 0.0
    small = bool(policy["favor_small"])
    if "SMALL_RELATIVE_TO_TIME" in flags:
        limit = job.get("time_limit_s")
        if not limit or limit < 0:
            return 0.0 if not small else 1.0
        size = max(c, n * c_active / n_active)
        f = size / (float(limit) / 60.0) / c_active
        f = 1.0 - f if small else f
    elif small:
        f = (max(0.0, n_active - n) / n_active + (c_active - c) / c_active) / 2.0
    else:
        f = (n / n_active + c / c_active) / 2.0
    return min(max(f, 0.0), 1.0)


def _max_of(values: list[float]) -> float:
    return max([v for v in values if v > 0], default=0.0)


FACTORS = ("age", "assoc", "fairshare", "jobsize", "partition", "qos")


@dataclass
class PriorityContext:
    """What the priorities of one snapshot share: the policy's weights and flags, the
    cluster's TRES totals and the maxima the partition, QOS and association factors are
    normalised by (over the snapshot's configuration and its active jobs)."""

    now: float
    policy: dict
    flags: set[str]
    totals: dict[str, float]
    n_active: int
    c_active: float
    wt: dict[str, float]
    wt_order: list[str]
    max_part: float
    max_qos: float
    max_assoc: float
    weights: tuple[float, ...]  # age, assoc, fairshare, jobsize, partition, qos
    default_part: str
    by_name: dict[str, dict]
    max_age_s: float


@dataclass
class PriorityTerms:
    """One job's priority apart from its age, which moves with `now` (`priority_at`)."""

    job: dict
    since: tuple[float | None, float | None]  # what the age counts from (`_age_from`)
    rest: tuple[float, ...]       # the weighted assoc, fairshare, jobsize, partition, qos factors
    norm: tuple[float, ...]       # their normalised factors
    tres_norm: dict[str, float]
    tres_w: dict[str, float]
    tres_sum: float
    site: int
    nice: int
    held: bool
    admin: Any


def priority_context(snapshot: dict, policy: dict, jobs: list[dict] | None = None) -> PriorityContext:
    """The shared part of the priorities of `snapshot` (policy merged, see `job_factors`);
    `jobs`: its `active_jobs`, when the caller has them already."""
    if jobs is None:
        jobs = active_jobs(snapshot)
    totals, n_active, c_active = cluster_tres(snapshot)
    wt = tres_weights(policy)
    max_part = _max_of([float(p.get("priority_job_factor", 0) or 0) for p in snapshot.get("partitions") or []]
                       + [float(j.get("partition_job_factor", 1) or 0) for j in jobs])
    max_qos = _max_of([float(q.get("priority", 0) or 0) for q in snapshot.get("qos") or []]
                      + [float(j.get("qos_priority_value", 0) or 0) for j in jobs])
    max_assoc = _max_of([float(u.get("assoc_priority", 0) or 0) for u in snapshot.get("users") or []]
                        + [float(j.get("assoc_priority", 0) or 0) for j in jobs])
    parts = snapshot.get("partitions") or []
    default_part = next((str(p["name"]) for p in parts if p.get("default") and p.get("name")),
                        str(parts[0]["name"]) if parts and parts[0].get("name") else "batch")
    return PriorityContext(
        float(snapshot.get("now") or 0.0), policy, priority_flags(policy), totals, n_active, c_active, wt,
        sorted(wt, key=tres_sort_key), max_part, max_qos, max_assoc,
        tuple(policy["weight_" + k] for k in FACTORS),
        default_part, {str(n.get("name")): n for n in snapshot.get("nodes") or []}, float(policy["max_age_s"]))


def active_jobs(snapshot: dict) -> list[dict]:
    """The jobs of `snapshot` not in a final state, in snapshot order."""
    return [j for j in snapshot.get("jobs") or [] if str(j.get("state", "PENDING")).upper() not in _FINAL]


def priority_terms(ctx: PriorityContext, j: dict, fs_factors: dict[str, float]) -> PriorityTerms:
    """Job `j`'s priority terms under `ctx` and the fair-share factors `fs_factors`."""
    flags = ctx.flags
    tres = job_tres(j, ctx.by_name)
    pj = float(j.get("partition_job_factor", 1) or 0)
    qp = float(j.get("qos_priority_value", 0) or 0)
    ap = float(j.get("assoc_priority", 0) or 0)
    max_part, max_qos, max_assoc = ctx.max_part, ctx.max_qos, ctx.max_assoc
    n_assoc = ap if "NO_NORMAL_ASSOC" in flags else (ap / max_assoc if max_assoc else 0.0)
    n_fs = fs_factors.get(f"{j.get('account')}/{j.get('user')}", 0.0)
    n_js = _jobsize(j, tres, ctx.n_active, ctx.c_active, ctx.policy, flags)
    n_part = pj if "NO_NORMAL_PART" in flags else (pj / max_part if max_part else 0.0)
    n_qos = qp if "NO_NORMAL_QOS" in flags else (qp / max_qos if max_qos else 0.0)
    no_tres = "NO_NORMAL_TRES" in flags
    ptot = j.get("partition_tres")
    ptot = {normalize_tres_name(k): float(v) for k, v in ptot.items()} if isinstance(ptot, dict) else ctx.totals
    tres_norm: dict[str, float] = {}
    tres_w: dict[str, float] = {}
    wt = ctx.wt
    for t in ctx.wt_order:
        cnt = tres.get(t, 0.0)
        if not cnt:
            continue
        f = cnt if no_tres else (cnt / ptot[t] if ptot.get(t) else 0.0)
        if f and wt[t]:
            tres_norm[t] = f
            tres_w[t] = f * wt[t]
    _w_age, w_assoc, w_fs, w_js, w_part, w_qos = ctx.weights
    reason = j.get("reason")
    since = _age_from(j)
    return PriorityTerms(
        j, since,
        (n_assoc * w_assoc, n_fs * w_fs, n_js * w_js, n_part * w_part, n_qos * w_qos),
        (n_assoc, n_fs, n_js, n_part, n_qos), tres_norm, tres_w, sum(tres_w.values()),
        int(j.get("site_factor", 0) or 0), int(j.get("nice", 0) or 0),
        bool(j.get("hold")) or (reason is not None and str(reason).startswith("JobHeld")), j.get("admin_priority"))


def _exact(ctx: PriorityContext, t: PriorityTerms, n_age: float) -> float:
    return sum((n_age * ctx.weights[0], *t.rest)) + t.tres_sum + t.site - t.nice


def _integer(t: PriorityTerms, exact: float) -> int:
    if t.admin is not None:
        return int(t.admin)
    if t.held:
        return 0
    return min(int(math.trunc(max(exact, 1.0))), MAX_PRIORITY)


def priority_at(ctx: PriorityContext, t: PriorityTerms, now: float) -> int:
    """The job's integer priority at `now` (its age factor taken at `now`; the rest as
    when `t` was computed): what `job_factors` gives for a snapshot at `now` whose other
    inputs are those of `t`."""
    return _integer(t, _exact(ctx, t, _age_at(t.since, now, ctx.max_age_s)))


def priority_horizon(ctx: PriorityContext, t: PriorityTerms, now: float) -> tuple[int, float]:
    """`priority_at(ctx, t, now)` and a time after `now` until which it should stay that
    (inf: it never changes), for a caller that asks again and again as time goes by
    (`batchd simulate`). The time is a guess the caller checks: the priority is a
    non-decreasing function of the time (the age factor is zero before the begin time, then
    `min(1, (now - since) / max_age)`, and every later step, float products and sums, `max`,
    truncation, the cap, is monotone, rounding included), so where `priority_at` gives the
    same at `now` and at the horizon, it gives that all the time between. (Python 3.12's
    `sum` of floats is compensated; its result is the correctly rounded sum in all but
    contrived cases, which is monotone too.)"""
    w_age, max_age = ctx.weights[0], ctx.max_age_s
    since, begin = t.since
    exact = _exact(ctx, t, _age_at(t.since, now, max_age))
    p = _integer(t, exact)  # priority_at's arithmetic, its exact sum kept for the horizon
    if t.admin is not None or t.held or since is None or w_age <= 0 or max_age <= 0:
        return p, math.inf  # no age term that moves
    sat = since + max_age
    if begin is not None and begin > now:
        return p, math.nextafter(begin, -math.inf)  # no age before the begin time
    if now >= sat:
        return p, math.inf  # saturated
    # where the age term should take the sum to the next integer, a little before
    step = (math.floor(max(exact, 1.0)) + 1 - exact) * max_age / w_age
    return p, min(now + step * (1 - 1e-9), sat)


def with_fairshare(ctx: PriorityContext, t: PriorityTerms, fs_factors: dict[str, float]) -> PriorityTerms:
    """`t` under other fair-share factors (the rest of the job unchanged): what
    `priority_terms` gives for the same job with `fs_factors`."""
    j = t.job
    return with_fairshare_factor(ctx, t, fs_factors.get(f"{j.get('account')}/{j.get('user')}", 0.0))


def with_fairshare_factor(ctx: PriorityContext, t: PriorityTerms, n_fs: float) -> PriorityTerms:
    """`t` with the fair-share factor `n_fs` (`with_fairshare` for one job's factor)."""
    r, n = t.rest, t.norm
    return PriorityTerms(t.job, t.since, (r[0], n_fs * ctx.weights[2], *r[2:]), (n[0], n_fs, *n[2:]), t.tres_norm,
                         t.tres_w, t.tres_sum, t.site, t.nice, t.held, t.admin)


def job_factors(snapshot: dict, policy: dict, fs_factors: dict[str, float], detail: bool = True) -> list[Any]:
    """Factors of every job of ``snapshot`` not in a final state, in snapshot order.

    ``policy`` must be a merged policy (``merge_policy``); ``fs_factors`` maps
    "account/user" to the fair-share factor (``compute_shares``). With ``detail=False``
    only ``(job id, priority)`` pairs, the same numbers without the per-factor
    dictionaries (the scheduler's hot path)."""
    jobs = active_jobs(snapshot)
    ctx = priority_context(snapshot, policy, jobs)
    out: list[Any] = []
    for j in jobs:
        t = priority_terms(ctx, j, fs_factors)
        n_age = _age_at(t.since, ctx.now, ctx.max_age_s)
        exact = _exact(ctx, t, n_age)
        prio = _integer(t, exact)
        if not detail:
            out.append((str(j.get("id")), prio))
            continue
        norm = dict(zip(FACTORS, (n_age, *t.norm), strict=True))
        weighted = dict(zip(FACTORS, (n_age * ctx.weights[0], *t.rest), strict=True))
        out.append(JobFactors(str(j.get("id")), str(j.get("user", "")), str(j.get("account", "")),
                              str(j.get("partition") or ctx.default_part), str(j.get("qos") or "normal"),
                              str(j.get("state", "PENDING")).upper(), prio, exact, t.site, t.nice, t.held,
                              t.admin is not None, norm, weighted, t.tres_norm, t.tres_w))
    return out
