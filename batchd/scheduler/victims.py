"""Who may be whose victim: the per-account preemption policies and the minimum runtime.

Snapshot keys read (all optional; docs/preemption.md has the admin's view):

- `accounts[].policy` may carry, besides association limits (assoclimits.py):
  `within_account` = `never` | `lower_priority` (default) | `lower_or_newer_equal_priority`
  (Kueue's `withinClusterQueue`); `reclaim_within_cohort` = `never` | `lower_priority` |
  `any` (default; Kueue's `reclaimWithinCohort`); `borrow_within_cohort` = `{"policy": never |
  lower_priority | any (default), "max_priority_threshold": int}` (Kueue's
  `borrowWithinCohort`; `any` is KAI's rule: its fair-share checks alone decide);
  `min_runtime_reclaim_s`, `min_runtime_preempt_s` (KAI's reclaim/preempt min runtime).
  An account that does not set a key inherits it from its nearest ancestor that does.
- `qos[]` entries may carry `min_runtime_reclaim_s` and `min_runtime_preempt_s` (Slurm's
  PreemptExemptTime, split as KAI splits it).

Whose rule applies: the policies are the preemptor's account's (Kueue keeps them on the
preemptor's ClusterQueue); the minimum runtime is the victim's: the larger of its QOS's and
its account's. Priorities compared are QOS priorities (`jobs[].priority`). Within an account
`newer` means submitted later (submit time, then id).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .fairshare import Queue
from .job import JobRT

WITHIN = ("never", "lower_priority", "lower_or_newer_equal_priority")
COHORT = ("never", "lower_priority", "any")
PREEMPT, RECLAIM = "preempt", "reclaim"


@dataclass(frozen=True)
class PreemptPolicy:
    """One account's effective preemption policy (inheritance applied)."""
    within: str = "lower_priority"
    reclaim: str = "any"
    borrow: str = "any"
    threshold: int | None = None
    min_reclaim: float = 0.0
    min_preempt: float = 0.0


DEFAULT = PreemptPolicy()


def _choice(where: str, v: Any, allowed: tuple[str, ...]) -> str:
    if v not in allowed:
        raise ValueError(f"{where}: must be one of {', '.join(allowed)}, got {v!r}")
    return str(v)


def _seconds(where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        raise ValueError(f"{where}: must be a number of seconds >= 0, got {v!r}")
    return float(v)


def _own_keys(where: str, pol: Any) -> dict[str, Any]:
    """The preemption keys one account sets itself, validated."""
    out: dict[str, Any] = {}
    if not isinstance(pol, dict):
        return out
    if "within_account" in pol:
        out["within"] = _choice(f"{where}.within_account", pol["within_account"], WITHIN)
    if "reclaim_within_cohort" in pol:
        out["reclaim"] = _choice(f"{where}.reclaim_within_cohort", pol["reclaim_within_cohort"], COHORT)
    if "borrow_within_cohort" in pol:
        b = pol["borrow_within_cohort"]
        w = f"{where}.borrow_within_cohort"
        if isinstance(b, str):
            b = {"policy": b}
        if not isinstance(b, dict):
            raise ValueError(f"{w}: must be an object with policy and max_priority_threshold, got {b!r}")
        out["borrow"] = _choice(f"{w}.policy", b.get("policy", "any"), COHORT)
        t = b.get("max_priority_threshold")
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float)):
            raise ValueError(f"{w}.max_priority_threshold: must be an integer, got {t!r}")
        out["threshold"] = None if t is None else int(t)
    for key, attr in (("min_runtime_reclaim_s", "min_reclaim"), ("min_runtime_preempt_s", "min_preempt")):
        if key in pol:
            out[attr] = _seconds(f"{where}.{key}", pol[key])
    return out


def account_policies(accounts: list[Any], queues: dict[str, Queue]) -> dict[Queue, PreemptPolicy]:
    """{queue: its effective policy}, only for accounts whose policy differs from the default
    (None of them set any key: {})."""
    own = {a.name: _own_keys(f"accounts[{a.order}].policy", a.raw.get("policy")) for a in accounts}
    if not any(own.values()):
        return {}
    out: dict[Queue, PreemptPolicy] = {}
    for q in queues.values():
        merged: dict[str, Any] = {}
        for anc in reversed(q.path):  # leaf first: the nearest setting wins
            for k, v in own.get(anc.name, {}).items():
                merged.setdefault(k, v)
        pol = PreemptPolicy(**merged)
        if pol != DEFAULT:
            out[q] = pol
    return out


def qos_runtimes(qos: list[Any]) -> dict[str, tuple[float, float]]:
    """{QOS name: (min_runtime_reclaim_s, min_runtime_preempt_s)} for the QOS that set one."""
    out: dict[str, tuple[float, float]] = {}
    for i, q in enumerate(qos):
        if not isinstance(q, dict) or q.get("name") is None:
            continue
        r = q.get("min_runtime_reclaim_s", 0) or 0
        p = q.get("min_runtime_preempt_s", 0) or 0
        r, p = _seconds(f"qos[{i}].min_runtime_reclaim_s", r), _seconds(f"qos[{i}].min_runtime_preempt_s", p)
        if r or p:
            out[str(q["name"])] = (r, p)
    return out


class Victims:
    """The policy questions of one cycle: may `v` be `j`'s victim, and is it protected."""

    def __init__(self, s: Any):
        self.now = float(s.now)
        self.policies = account_policies(s.snap.accounts, s.queues)
        self.qos = qos_runtimes(s.snap.qos)
        self.timed = bool(self.qos) or any(p.min_reclaim or p.min_preempt for p in self.policies.values())

    def policy(self, j: JobRT) -> PreemptPolicy:
        return self.policies.get(j.queue, DEFAULT)

    # -- within the account -----------------------------------------------------------------
    def own_allows(self, j: JobRT, v: JobRT) -> bool:
        """`within_account` of J's account allows `v` (same leaf account) as J's victim."""
        w = self.policy(j).within
        if w == "never":
            return False
        if v.prio < j.prio:
            return True
        return (w == "lower_or_newer_equal_priority" and v.prio == j.prio
                and (v.spec.submit_time, v.idk) > (j.spec.submit_time, j.idk))

    def may_preempt_equal(self, q: Queue) -> bool:
        return self.policies.get(q, DEFAULT).within == "lower_or_newer_equal_priority"

    def within_never(self, q: Queue) -> bool:
        return self.policies.get(q, DEFAULT).within == "never"

    # -- across accounts ----------------------------------------------------------------------
    def cross_rule(self, j: JobRT, in_quota: bool) -> tuple[str, str, int | None]:
        """(key, value, threshold) of the rule deciding J's victims in other accounts."""
        pol = self.policy(j)
        if pol.reclaim == "never":
            return "reclaim_within_cohort", "never", None
        if in_quota:
            return "reclaim_within_cohort", pol.reclaim, None
        return "borrow_within_cohort", pol.borrow, pol.threshold

    def cross_allows(self, j: JobRT, v: JobRT, in_quota: bool) -> bool:
        _, value, threshold = self.cross_rule(j, in_quota)
        if value == "never":
            return False
        if value == "lower_priority" and not v.prio < j.prio:
            return False
        return threshold is None or v.prio <= threshold

    def reclaims_never(self, j: JobRT) -> bool:
        return self.queue_reclaims_never(j.queue)

    def queue_reclaims_never(self, q: Queue) -> bool:
        return self.policies.get(q, DEFAULT).reclaim == "never"

    def label(self, j: JobRT, v: JobRT, in_quota: bool) -> str:
        if v.queue is j.queue:
            return f"within_account={self.policy(j).within}"
        key, value, threshold = self.cross_rule(j, in_quota)
        return f"{key}={value}" + (f",max_priority_threshold={threshold}" if threshold is not None else "")

    # -- minimum runtime ----------------------------------------------------------------------
    def protected_for(self, v: JobRT, kind: str) -> float:
        """Seconds `v` stays protected from `kind` (PREEMPT: by its own account's jobs;
        RECLAIM: by another account's); 0 when it may be a victim now."""
        if not self.timed:
            return 0.0
        start = v.spec.start_time
        if start is None:
            return 0.0
        pol = self.policies.get(v.queue, DEFAULT)
        qr, qp = self.qos.get(v.spec.qos or "", (0.0, 0.0))
        need = max(pol.min_reclaim, qr) if kind == RECLAIM else max(pol.min_preempt, qp)
        return max(0.0, float(start) + need - self.now)

    def split(self, j: JobRT, cands: list[JobRT]) -> tuple[list[JobRT], list[JobRT]]:
        """(candidates that may be victims now, those protected by their minimum runtime)."""
        if not self.timed:
            return cands, []
        ok: list[JobRT] = []
        young: list[JobRT] = []
        for v in cands:
            kind = PREEMPT if v.queue is j.queue else RECLAIM
            (young if self.protected_for(v, kind) > 0 else ok).append(v)
        return ok, young

    def protected_reason(self, j: JobRT, victims: list[JobRT]) -> str | None:
        """The pending reason of J when it waits only for these victims' protection."""
        worst, cross = 0.0, False
        for v in victims:
            kind = PREEMPT if v.queue is j.queue else RECLAIM
            t = self.protected_for(v, kind)
            if t > worst:
                worst, cross = t, kind == RECLAIM
        if worst <= 0:
            return None
        minutes = max(1, math.ceil(worst / 60.0))
        what = "Reclaim" if cross else "Preemption"
        return f"{what} pending: protected for {minutes} more minutes"
