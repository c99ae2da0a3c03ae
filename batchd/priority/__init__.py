"""Fair-share and multifactor priority (Slurm's numbers), pure functions over snapshots.

Nothing here does I/O, reads the clock or logs: time is ``snapshot["now"]``; usage is
``snapshot["usage"]`` (decayed billing-seconds, see ``batchd.priority.usage`` for how it
accrues). Importing this package is cheap (standard library only), so the sshare and
sprio commands use it directly.

Entry points
------------
``job_priorities(snapshot, policy)``  -> ``{str(job id): priority}`` for every job not in
    a final state (the scheduler orders the pending jobs of an account with it).
``share_rows(snapshot, policy)``      -> sshare rows (``ShareRow``), sshare's order.
``priority_rows(snapshot, policy)``   -> ``JobFactors`` of the pending jobs, by job id
    (what sprio prints).
``fairshare_factors(snapshot, policy)`` -> ``{"account/user": factor}``.
``dominant_factor(job_factors)``      -> the factor contributing most to a priority.

``policy`` is a flat dict of the ``[priority]`` keys (``batchd.priority.policy``); the
snapshot's own ``policy`` overrides it. Snapshot keys read: see
``batchd.priority.tree`` (accounts, users, usage) and ``batchd.priority.multifactor``
(jobs, nodes, partitions, qos).
"""

from __future__ import annotations

from typing import Any

from batchd.priority.fairshare import ShareRow, compute_shares
from batchd.priority.multifactor import JobFactors, job_factors
from batchd.priority.policy import DEFAULT_POLICY, merge_policy
from batchd.priority.tree import build_tree
from batchd.slurm.digits import isdigits

__all__ = [
    "DEFAULT_POLICY",
    "JobFactors",
    "ShareRow",
    "dominant_factor",
    "fairshare_factors",
    "job_priorities",
    "merge_policy",
    "priority_rows",
    "share_rows",
]


def _shares(snapshot: dict, merged: dict, rows_too: bool = True) -> tuple[list[ShareRow], dict[str, float]]:
    tree = build_tree(snapshot)
    return compute_shares(tree, merged["fairshare_algorithm"], float(merged["fairshare_dampening_factor"]),
                          rows_too)


def share_rows(snapshot: dict, policy: dict | None = None) -> list[ShareRow]:
    """All sshare rows of ``snapshot`` (root first, sshare's order)."""
    merged = merge_policy(policy, snapshot)
    return _shares(snapshot, merged)[0]


def fairshare_factors(snapshot: dict, policy: dict | None = None) -> dict[str, float]:
    """``{"account/user": fair-share factor in [0, 1]}`` for every user association."""
    merged = merge_policy(policy, snapshot)
    return _shares(snapshot, merged, rows_too=False)[1]


def _factors(snapshot: dict, policy: dict | None, detail: bool = True) -> list[Any]:
    merged = merge_policy(policy, snapshot)
    fs = _shares(snapshot, merged, rows_too=False)[1] if merged["weight_fairshare"] else {}
    return job_factors(snapshot, merged, fs, detail)


def job_priorities(snapshot: dict, policy: dict | None = None) -> dict[str, int]:
    """Multifactor priority of every job not in a final state, keyed by ``str(job id)``.

    0 for held jobs, >= 1 otherwise; higher runs first. Deterministic for a given
    snapshot and policy; raises ``ValueError`` on an inconsistent snapshot or policy.
    """
    return dict(_factors(snapshot, policy, detail=False))


def _id_key(job_id: str) -> tuple[int, int | str]:
    return (0, int(job_id)) if isdigits(job_id) else (1, job_id)


_NOT_LISTED = ("BeginTime", "Dependency", "DependencyNeverSatisfied")


def priority_rows(snapshot: dict, policy: dict | None = None, *, include_running: bool = False) -> list[JobFactors]:
    """``JobFactors`` of the pending jobs sprio lists, sorted by job id (numerically).

    Like Slurm's sprio: held jobs (priority 0), jobs whose begin time is in the future
    and jobs waiting for a dependency (``reason`` BeginTime/Dependency) are left out;
    ``include_running`` adds running jobs."""
    now = float(snapshot.get("now") or 0.0)
    hidden = set()
    for j in snapshot.get("jobs") or []:
        begin = j.get("begin_time")
        if str(j.get("reason") or "") in _NOT_LISTED or (begin is not None and float(begin) > now):
            hidden.add(str(j.get("id")))
    rows = [f for f in _factors(snapshot, policy)
            if f.job_id not in hidden and (f.state == "PENDING" and (f.priority > 0 or f.admin)
                                           or include_running and f.state == "RUNNING")]
    return sorted(rows, key=lambda f: _id_key(f.job_id))


def dominant_factor(f: JobFactors) -> tuple[str, float]:
    """(name, weighted value) of the factor adding most to ``f``'s priority; TRES
    factors are summed as "tres"; ("none", 0.0) when every factor is 0."""
    parts = dict(f.weighted)
    parts["tres"] = sum(f.tres.values())
    name, val = max(parts.items(), key=lambda kv: kv[1])
    return (name, val) if val > 0 else ("none", 0.0)
