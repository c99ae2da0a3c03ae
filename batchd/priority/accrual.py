"""One usage cycle over a snapshot: what the controller calls every ``calc_period_s``.

Pure: the caller loads the snapshot, calls ``advance_snapshot_usage(snapshot, last_s)``
and stores the returned figures together with ``snapshot["now"]`` as the new
``last_s``, in one transaction (then a restart neither charges a second twice nor
loses one).

Jobs charged: RUNNING jobs, and jobs that ended inside the cycle (any state with an
``end_time`` after ``last_s``: a preempted or requeued run is charged for the time it
ran). Per job keys read: ``account``, ``user``, ``start_time``, ``end_time``,
``billing`` (the rate computed at start; when absent it is computed from the job's
TRES and the ``tres_billing_weights`` of its partition (``snapshot["partitions"]``)
or of the policy), ``qos`` and ``qos_usage_factor``. The QOS usage
factor comes from the job, else from ``snapshot["qos"]`` (``[{"name",
"usage_factor"}]``), else 1.
"""

from __future__ import annotations

from batchd.priority.multifactor import job_charge, job_tres
from batchd.priority.policy import billing_weights, merge_policy
from batchd.priority.usage import Charge, advance_usage
from batchd.slurm.tres import billing, parse_billing_weights

__all__ = ["job_billing", "cycle_charges", "advance_snapshot_usage"]


def job_billing(job: dict, snapshot: dict, policy: dict) -> float:
    """The billing rate of ``job``: its ``billing`` key when set, else computed from its
    TRES with its partition's ``tres_billing_weights`` (``snapshot["partitions"]``)
    or, failing that, the cluster-wide ones of ``policy`` (a merged policy)."""
    if job.get("billing") is not None:
        return float(job["billing"])
    nodes = {str(n.get("name")): n for n in snapshot.get("nodes") or []}
    part = next((p for p in snapshot.get("partitions") or []
                 if p.get("name") == job.get("partition") and p.get("tres_billing_weights")), None)
    if part is not None:
        weights = parse_billing_weights(str(part["tres_billing_weights"]), str(policy.get("priority_flags") or ""))
    else:
        weights = billing_weights(policy)
    ch = job_charge(job, nodes)
    return billing(weights, job_tres(job, nodes), parts=ch.billing_parts() if ch is not None else None)


def cycle_charges(snapshot: dict, last_s: float, policy: dict | None = None) -> list[Charge]:
    """The ``Charge`` of every job that ran during ``[last_s, snapshot["now"]]``."""
    merged = merge_policy(policy, snapshot)
    factors = {str(q.get("name")): float(q.get("usage_factor", 1.0)) for q in snapshot.get("qos") or []
               if q.get("name") is not None}
    out = []
    for j in snapshot.get("jobs") or []:
        start = j.get("start_time")
        end = j.get("end_time")
        state = str(j.get("state", "")).upper()
        if start is None or (state != "RUNNING" and (end is None or float(end) <= last_s)):
            continue
        rate = job_billing(j, snapshot, merged)
        factor = j.get("qos_usage_factor")
        if factor is None:
            factor = factors.get(str(j.get("qos") or "normal"), 1.0)
        out.append(Charge(f"{j.get('account')}/{j.get('user')}", float(rate), float(start),
                          None if end is None else float(end), float(factor)))
    return out


def advance_snapshot_usage(snapshot: dict, last_s: float, policy: dict | None = None) -> dict[str, float]:
    """``snapshot["usage"]["users"]`` advanced to ``snapshot["now"]``: decayed by the
    half-life, reset at a ``usage_reset_period`` boundary, plus the cycle's charges."""
    merged = merge_policy(policy, snapshot)
    usage = (snapshot.get("usage") or {}).get("users") or {}
    return advance_usage(usage, cycle_charges(snapshot, last_s, merged), float(last_s),
                         float(snapshot.get("now") or 0.0), float(merged["decay_half_life_s"]),
                         str(merged["usage_reset_period"]))
