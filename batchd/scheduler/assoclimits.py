"""Association limits in the cycle: Slurm's MaxJobs, MaxTRES (per job), each user's GrpTRES,
GrpTRESMins (a budget) and GrpTRESRunMins, by the rules of batchd.slurm.assocpolicy.

Snapshot keys read (all optional): `accounts[].policy` and `users[].policy` (the policy
tables of the accounts file), `accounts[].budget_used` (`{tres: minutes}` the account's own
jobs used in its current budget period; the caller counts them from the accounting). Per
(account, user) the effective limits are those of batchd.slurm.assocpolicy.effective; an account's
`grp_*` limits hold for its whole subtree.

Counted in the cycle, through `Session.start`/`evict` and their undo: running jobs and held
TRES per (account, user), and the TRES-minutes the running jobs may still use (TRES x
remaining time limit; a job without a limit counts as unbounded) per account and ancestor.
A limit that holds a job returns `"assoc:<Slurm reason>"` from `Session.over_limit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchd.slurm.assocpolicy import effective, reason_for

from .job import EPS, GPU, TYPED

UNBOUNDED = 1e15  # TRES-minutes of a job without a time limit (finite, so that undo subtracts it)


@dataclass
class Limits:
    key: tuple[str, str]
    max_jobs: int | None
    per_job: dict[str, float]
    per_user: dict[str, float]


def assoc_setup(s: Any) -> None:
    accts = s.snap.accounts
    pol = {a.name: (a.raw.get("policy") or {}) for a in accts}
    upol: dict[tuple[str, str], dict[str, Any]] = {}
    for u in s.snap.users:
        if isinstance(u, dict) and isinstance(u.get("policy"), dict) and u["policy"]:
            upol[(str(u.get("name")), str(u.get("account")))] = u["policy"]
    s.assoc_policies = bool(upol) or any(
        any(k in p for k in ("qos", "default_qos", "max_jobs", "max_tres_per_job", "max_tres_per_user")) for p in pol.values())
    s._assoc_parents = {a.name: a.parent for a in accts}
    s._assoc_pol, s._assoc_upol = pol, upol
    s._assoc_cache = {}
    s.user_jobs = {}
    s.user_tres = {}
    # budgets: accounts whose own GrpTRESMins is used up -> the reason
    over: dict[str, str] = {}
    s.run_mins = {}
    for a in accts:
        p = pol.get(a.name) or {}
        used = a.raw.get("budget_used") or {}
        for r, m in (p.get("grp_tres_mins") or {}).items():
            if float(used.get(r, 0.0)) >= float(m) - EPS:
                over[a.name] = reason_for("mins", r)
                break
        if p.get("grp_tres_run_mins"):
            s.run_mins[a.name] = dict(p["grp_tres_run_mins"])
    s.budget_over = over
    s.run_used = {}
    s.assoc_leaves = {q.name for q in s.queues.values()
                      if any(a.name in over or a.name in s.run_mins for a in q.path)}


def assoc_effective(s: Any, j: Any) -> Limits | None:
    key = (j.spec.account, j.user)
    if key in s._assoc_cache:
        return s._assoc_cache[key]
    e = effective(key[0], key[1], s._assoc_parents, s._assoc_pol, s._assoc_upol)
    lim = None
    if e.max_jobs is not None or e.max_tres_per_job or e.max_tres_per_user:
        lim = Limits(key, e.max_jobs, dict(e.max_tres_per_job), dict(e.max_tres_per_user))
    s._assoc_cache[key] = lim
    return lim


def _request_tres(j: Any) -> dict[str, float]:
    """A pending job's whole-gang TRES on the limit keys (typed GPUs only where it names them)."""
    t = {GPU: j.R.get(GPU, 0.0), "cpu": j.R.get("cpu", 0.0), "mem": j.R.get("mem", 0.0)}
    for typ, c in j.typed:
        t[TYPED + typ] = t.get(TYPED + typ, 0.0) + c * j.tasks
    if j.shard:
        t["gres/shard"] = j.shard * j.tasks
    return t


def _held_tres(j: Any) -> dict[str, float]:
    """What a started job holds on the limit keys: its charge, typed GPUs from its devices."""
    t = {GPU: j.charge.get(GPU, 0.0), "cpu": j.charge.get("cpu", 0.0), "mem": j.charge.get("mem", 0.0)}
    for tk in j.takes or ():
        for sl in tk.slots():
            t[TYPED + sl.type] = t.get(TYPED + sl.type, 0.0) + 1
        if tk.shard + tk.shard_rel:
            t["gres/shard"] = t.get("gres/shard", 0.0) + tk.shard + tk.shard_rel
    return t


def _minutes_left(s: Any, j: Any) -> float:
    if j.end_time is not None:
        return max(0.0, (j.end_time - s.now) / 60.0)
    return j.time_limit / 60.0 if j.time_limit else UNBOUNDED


def assoc_add(s: Any, j: Any, sign: float) -> None:
    """Count (sign 1) or uncount (-1) a started or running job."""
    held = _held_tres(j)
    lim = j.assoc
    if lim is not None:
        s.user_jobs[lim.key] = s.user_jobs.get(lim.key, 0) + int(sign)
        u = s.user_tres.setdefault(lim.key, {})
        for r, v in held.items():
            u[r] = u.get(r, 0.0) + sign * v
    if s.run_mins:
        left = _minutes_left(s, j)
        for q in j.queue.path:
            lims = s.run_mins.get(q.name)
            if lims:
                used = s.run_used.setdefault(q.name, {})
                for r in lims:
                    used[r] = used.get(r, 0.0) + sign * held.get(r, 0.0) * left


def assoc_over(s: Any, j: Any, vec: dict[str, float]) -> str | None:
    """The association limit that holds `j` now ("assoc:<Slurm reason>"), or None."""
    lim = j.assoc
    if lim is not None:
        if lim.max_jobs is not None and s.user_jobs.get(lim.key, 0) >= lim.max_jobs:
            return "assoc:AssocMaxJobsLimit"
        if lim.per_job:
            t = _request_tres(j)
            for r, m in lim.per_job.items():
                if t.get(r, 0.0) > m + EPS:
                    return "assoc:" + reason_for("per_job", r)
        if lim.per_user:
            used = s.user_tres.get(lim.key, {})
            t = _request_tres(j)
            for r, m in lim.per_user.items():
                v = vec.get(r, t.get(r, 0.0))
                if v > 0 and used.get(r, 0.0) + v > m + EPS:
                    return "assoc:" + reason_for("per_user", r)
    if j.queue.name in s.assoc_leaves:
        want: dict[str, float] | None = None
        for q in j.queue.path:
            why = s.budget_over.get(q.name)
            if why:
                return "assoc:" + why
            lims = s.run_mins.get(q.name)
            if lims:
                want = want or _request_tres(j)
                need_min = j.time_limit / 60.0 if j.time_limit else UNBOUNDED
                used = s.run_used.get(q.name, {})
                for r, m in lims.items():
                    need = want.get(r, 0.0) * need_min
                    if need > 0 and used.get(r, 0.0) + need > m + EPS:
                        return "assoc:" + reason_for("run_mins", r)
    return None
