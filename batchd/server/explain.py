"""`batchd why JOBID`: what a job waits for and which factor dominates its priority,
in a few plain lines, from the live snapshot and the controller's last decisions."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from batchd.errors import NotFound
from batchd.server import messages as m

if TYPE_CHECKING:
    from batchd.server.service import Service

REASONS = {
    "Priority": "higher-priority jobs are waiting for the same resources and go first",
    "Resources": "not enough free GPUs/CPUs/memory on the nodes it may use right now",
    "Dependency": "it waits for the jobs named in --dependency",
    "DependencyNeverSatisfied": "its dependency can never be satisfied (cancel it or fix the dependency)",
    "BeginTime": "its --begin time (or the hold-off after a requeue) has not come yet",
    "JobHeldUser": "you held it: release it with scontrol release",
    "JobHeldAdmin": "an administrator held it",
    "AssocGrpGRES": "its account is at its GPU limit",
    "AssocGrpCpuLimit": "its account is at its CPU limit",
    "AssocGrpMemLimit": "its account is at its memory limit",
    "QOSMaxGRESPerUser": "you hold as many GPUs as your QOS allows",
    "AssocMaxJobsLimit": "you run as many jobs in this account as its MaxJobs allows",
    "AssocMaxGRESPerJob": "it asks more GPUs than one job of this account may have (MaxTRES)",
    "AssocMaxCpuPerJobLimit": "it asks more CPUs than one job of this account may have (MaxTRES)",
    "AssocMaxMemPerJob": "it asks more memory than one job of this account may have (MaxTRES)",
    "AssocGrpGRESMinutes": "its account's GPU-hour budget (GrpTRESMins) is used up for this period",
    "AssocGrpCPUMinutesLimit": "its account's CPU-hour budget (GrpTRESMins) is used up for this period",
    "AssocGrpMemMinutes": "its account's memory budget (GrpTRESMins) is used up for this period",
    "AssocGrpGRESRunMinutes": "its account's running jobs may still use as many GPU-minutes as "
                              "GrpTRESRunMins allows",
    "AssocGrpCPURunMinutesLimit": "its account's running jobs may still use as many CPU-minutes as "
                                  "GrpTRESRunMins allows",
    "JobArrayTaskLimit": "its array's %N throttle is reached",
    "PartitionTimeLimit": "its time limit is above the partition's maximum",
    "ReqNodeNotAvail": "the nodes it needs are down or drained",
    "BadConstraints": "no node can ever satisfy the request as asked",
    "None": "the next scheduling cycle will consider it",
}
#: pending reasons that carry a number (the scheduler's, issue 16): prefix -> what is behind it
PROTECTED = {
    "Reclaim pending:": "the jobs of other accounts it would reclaim have not run their minimum runtime yet",
    "Preemption pending:": "the jobs of its account it would preempt have not run their minimum runtime yet",
}


def reason_text(reason: str) -> str:
    """The plain words for a pending reason (itself when there are none)."""
    for prefix, why in PROTECTED.items():
        if reason.startswith(prefix):
            return f"{reason} ({why})"
    return REASONS.get(reason, reason)


def explain(service: Service, job_ref: str) -> m.WhyReply:
    from batchd.priority import dominant_factor, priority_rows

    jobs = service.list_jobs({"ids": job_ref, "all": "1"})["jobs"]
    if not jobs:
        raise NotFound(f"Invalid job id specified: {job_ref}")
    j = jobs[0]
    lines = [f"Job {j['display_id']} ({j['name']}, user {j['user']}, account {j['account']}) is {j['state']}"
             + (f": {j['reason']}" if j["state"] == "PENDING" else "")]
    if j["state"] == "PENDING":
        lines.append(f"  why: {reason_text(j['reason'])}")
    snap = service.snapshot()
    dec = service.last_decisions()
    lines += _preempt_lines(snap, dec, j["id"])
    rows = {r.job_id: r for r in priority_rows(snap, include_running=True)}
    f = rows.get(str(j["id"]))
    if f is not None:
        name, val = dominant_factor(f)
        parts = ", ".join(f"{k} {v:.0f}" for k, v in sorted(f.weighted.items(), key=lambda kv: -kv[1]) if v)
        if f.tres:
            parts += f", tres {sum(f.tres.values()):.0f}"
        lines.append(f"  priority {f.priority}: {parts or 'every factor is 0 (order is by submit time)'}"
                     + (f"; {name} dominates" if name != "none" else ""))
        if f.nice:
            lines.append(f"  nice {f.nice} is subtracted")
    planned = (dec.get("planned_start") or {}).get(str(j["id"]))
    if planned:
        lines.append("  planned start (backfill reservation): "
                     + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(planned)))
    lines += _budget_lines(snap, j["account"])
    share = (dec.get("fair_share") or {}).get(j["account"])
    if share:
        used = sum(len(g) for x in service.list_jobs({"accounts": j["account"], "states": "RUNNING"})["jobs"]
                   for g in x["gres"].values())
        fs = share.get("gres/gpu")
        if fs is not None:
            side = "above" if used > fs else "within"
            lines.append(f"  account {j['account']}: fair share {fs:g} GPUs, using {used} ({side} its share"
                         + ("; its borrowed jobs may be reclaimed)" if used > fs else ")"))
    return {"job": j["id"], "lines": lines}


def _preempt_lines(snap: dict[str, Any], dec: dict[str, Any], job_id: int) -> list[str]:
    """Preemptions the job is in: those the last cycle decided (with the policy that allowed
    each, when the scheduler names it), else what the stored job says (a victim's
    `preempting_for`, a preemptor's mark, as the snapshot carries them)."""
    sid = str(job_id)
    out: list[str] = []
    for p in dec.get("preempt") or []:
        how = str(p.get("reason") or "") + (f", policy {p['policy']}" if p.get("policy") else "")
        if str(p.get("job")) == sid:
            out.append(f"  preempted for job {p.get('for')} ({how})")
        elif str(p.get("for")) == sid:
            out.append(f"  preempts job {p.get('job')} ({how})")
    if out:
        return out
    entry: dict[str, Any] = next((x for x in snap.get("jobs") or [] if str(x.get("id")) == sid), {})
    if entry.get("preempting_for") is not None:
        out.append(f"  preempted for job {entry['preempting_for']}: it is being stopped")
    elif entry.get("preemptor"):
        out.append("  jobs were preempted for it: it starts when their devices are free")
    return out


def _budget_lines(snap: dict[str, Any], account: str) -> list[str]:
    """The GPU-hour budgets that hold for `account` (its own and its ancestors'), used / limit."""
    from batchd.accounting.budget import budget_lines

    by_name = {a["name"]: a for a in snap.get("accounts") or []}
    out, seen, name = [], set(), account
    while name in by_name and name not in seen:
        seen.add(name)
        a = by_name[name]
        out += [f"  account {name}: {line}" for line in budget_lines(a.get("policy"), a.get("budget_used"))]
        name = a.get("parent")
    return out
