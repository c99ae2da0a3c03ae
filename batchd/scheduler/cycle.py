"""`decide(snapshot, policy) -> Decisions`: one scheduling cycle, pure and deterministic.

First, always, the held pass (held.py): a job that earlier cycles preempted victims for is
placed on what they hold or freed before anybody else, and those victims are chosen by no one
again. Then the passes, in this order, as chosen by the policy key `passes` (default all four):
`allocate`, `backfill` (reservations that keep lower jobs from delaying blocked higher ones;
it shapes the allocate pass and is off when policy `backfill` is false), `reclaim`, `preempt`.

Policy keys read here (the snapshot's `policy`, overridden key by key by the `policy` argument):
`passes`, `backfill` (default true), `backfill_max_reservations` (20), `placement`
(`pack` | `spread`), `quota_reclaim_by_priority` (false), `reclaimer_saturation_multiplier`
(1.0), `fairshare_k_value` (1.0: weight of decayed account usage in the over-quota split).
Multifactor priorities come from the snapshot's optional `priorities` ({job id: int}, as the
daemon passes them), else from `batchd.priority.job_priorities(snapshot_dict, policy)` when
that module provides it (else all 0).

`decide(..., explain=False)` makes the same starts and preemptions but leaves `pending`,
`fair_share` and `planned_start` empty: the allocate pass stops at the first job after
which nothing can start (a saturated cluster), where the rest would only get their reasons
and backfill reservations (reservations already made in the walk still shape it). For
callers that need only the actions (`batchd simulate`).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

from .allocate import allocate_pass
from .backfill import Backfill
from .evict import preempt_pass, reclaim_pass
from .held import held_pass, preempting_for
from .job import GPU
from .snapshot import Snapshot
from .state import Session

PASSES = ("allocate", "backfill", "reclaim", "preempt")


@dataclass
class Decisions:
    """What one cycle decided. `start`: [{"job", "allocation", "after", "charge"}] in decision
    order, `charge` being what the allocation is charged for (`batchd.slurm.gres.Charge.to_json`:
    `{"tres": {...}, "parts": [[tres, count, card type, share], ...]}`);
    `preempt`: [{"job", "reason": "reclaim"|"preempt", "for", "policy"}] (`policy`: the rule of
    the preemptor's account that allowed it, e.g. `within_account=lower_priority`, victims.py); `pending`: [{"job", "reason"}]
    ordered by submit time then id; `fair_share`: {account: {resource: share}};
    `planned_start`: {job id: unix seconds} for pending jobs holding a backfill reservation."""
    start: list[dict] = field(default_factory=list)
    preempt: list[dict] = field(default_factory=list)
    pending: list[dict] = field(default_factory=list)
    fair_share: dict[str, dict[str, float]] = field(default_factory=dict)
    planned_start: dict[Any, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The JSON of docs/snapshot.md (plus `planned_start`, keyed by str(job id))."""
        return {"start": [dict(s) for s in self.start], "preempt": [dict(p) for p in self.preempt],
                "pending": [dict(p) for p in self.pending],
                "fair_share": {a: dict(v) for a, v in self.fair_share.items()},
                "planned_start": {str(k): v for k, v in self.planned_start.items()}}


def _priorities(raw: dict, policy: dict) -> dict[str, int]:
    given = raw.get("priorities")
    if isinstance(given, dict):
        # the caller computed them already (the daemon stores them on the jobs too); read
        # as they are when already {str: int} (not changed here)
        if set(map(type, given)) <= {str} and set(map(type, given.values())) <= {int}:
            return given
        return {str(k): int(v) for k, v in given.items()}
    try:
        from batchd.priority import job_priorities
    except ImportError:
        return {}
    out = job_priorities(raw, policy)
    return {str(k): int(v) for k, v in (out or {}).items()}


def merged_policy(snapshot: Snapshot, policy: dict | None) -> dict:
    merged = dict(snapshot.policy)
    if policy:
        merged.update(policy)
    passes = merged.get("passes", list(PASSES))
    if not isinstance(passes, list | tuple) or any(p not in PASSES for p in passes):
        raise ValueError(f"policy.passes: must be a list of {', '.join(PASSES)}, got {passes!r}")
    if merged.get("placement", "pack") not in ("pack", "spread"):
        raise ValueError(f"policy.placement: must be pack or spread, got {merged.get('placement')!r}")
    return merged


def decide(snapshot: Snapshot, policy: dict | None = None, explain: bool = True) -> Decisions:
    """Run one cycle on `snapshot` (never modified) with `policy` overriding `snapshot.policy`.

    The cyclic garbage collector is paused during the cycle (it would otherwise rescan the
    cycle's tens of thousands of short-lived objects many times); it is restored on return."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _decide(snapshot, policy, explain)
    finally:
        if was_enabled:
            gc.enable()


def _decide(snapshot: Snapshot, policy: dict | None, explain: bool = True) -> Decisions:
    pol = merged_policy(snapshot, policy)
    passes = list(pol.get("passes", PASSES))
    s = Session(snapshot, pol, _priorities(snapshot.raw, pol))
    try:
        return _passes(s, snapshot, pol, passes, explain)
    finally:
        s.close()


def _passes(s: Session, snapshot: Snapshot, pol: dict, passes: list[str], explain: bool) -> Decisions:
    reasons: dict[Any, str] = {}
    bf = None
    if "backfill" in passes and pol.get("backfill", True) is not False:
        bf = Backfill(s, int(pol.get("backfill_max_reservations", 20)))
    held_pass(s, reasons)  # what earlier cycles preempted for a job stays its own (held.py)
    if "allocate" in passes:
        allocate_pass(s, s.pending, reasons, bf, explain)
    if "reclaim" in passes:
        reclaim_pass(s, s.pending, reasons, "allocate" not in passes)
    if "preempt" in passes:
        preempt_pass(s, s.pending, reasons, "allocate" not in passes)
    out = Decisions()
    for j, after in s.starts:
        alloc = {tk.node.name: tk.as_allocation() for tk in j.takes or []}
        out.start.append({"job": j.id, "allocation": alloc, "after": list(after),
                          "charge": s.gres_charge(j.takes or []).to_json()})
    for v, reason, for_job, rule in s.preempts:
        if preempting_for(v) == str(for_job.id):
            continue  # already being preempted for this job: no new decision
        out.preempt.append({"job": v.id, "reason": reason, "for": for_job.id, **({"policy": rule} if rule else {})})
    if not explain:
        return out
    left = [j for j in s.pending if not j.started] + s.ineligible
    left.sort(key=lambda j: (j.spec.submit_time, j.idk))
    for j in left:
        if not j.spec.eligible:
            reason = j.spec.reason or "Dependency"
        elif j.id in s.limit_reasons:
            reason = s.limit_reasons[j.id]
        else:
            reason = reasons.get(j.id, "Resources")
        out.pending.append({"job": j.id, "reason": reason})
    if bf is not None:
        started = {str(j.id) for j, _ in s.starts}
        out.planned_start = {jid: t for jid, t in bf.planned.items() if str(jid) not in started}
    for q in s.queues.values():
        keys = [GPU] + [r for r in s.res if r != GPU and r in snapshot.accounts[q.order].resources]
        out.fair_share[q.name] = {r: _round(q.fs[r]) for r in keys}
    return out


def _round(x: float) -> float:
    return round(x, 6)
