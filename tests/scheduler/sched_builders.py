"""Builders for scheduler scenario tables: a case shows only what matters. The tables are lists
of `scenario.Scenario` (beside this file), which says what each `want_*` compares.

Conventions (those of KAI's test harness, so that cases port 1:1): every job task asks 1 CPU and
1 MiB besides its GPUs; nodes have plenty of CPU and memory; accounts given without a parent
hang under a `default` top account with unlimited quota and limit (created automatically unless
`parents` are given); a leaf's over-quota weight is 0 unless given; job ids are names; submit
times follow the list order (earlier in the list = older).

`run(...)` returns an `Outcome`:
- `started`: ids started in this cycle (including relocated victims),
- `preempted`: ids preempted in this cycle,
- `reasons`: {id: Slurm reason} for jobs left pending,
- `fair_share`: {account: gres/gpu fair share},
- `decisions`: the raw `Decisions.to_dict()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchd.scheduler import decide, load_snapshot

NOW = 2_000_000


def node(name: str, gpus: int = 0, gpu_type: str = "gpu", cpus: int = 1000, memory_mb: int = 10_000_000,
         state: str = "IDLE", devices: list | None = None) -> dict:
    return {"name": name, "cpus": cpus, "memory_mb": memory_mb, "state": state,
            "gpus": devices if devices is not None else ([{"type": gpu_type, "count": gpus}] if gpus else [])}


def account(name: str, quota: float = 0, limit: float = -1, weight: float = 0, priority: int = 100,
            parent: str | None = "default", extra: dict | None = None, **res: Any) -> dict:
    resources = {"gres/gpu": {"quota": quota, "limit": limit, "over_quota_weight": weight}}
    resources.update(extra or {})
    return {"name": name, "parent": parent, "priority": priority, "shares": 1, "resources": resources}


def job(jid: str, acct: str, gpus: float = 1, tasks: int = 1, running_on: dict | None = None,
        prio: int = 50, preemptible: bool | None = None, per_task: dict | None = None, **kw: Any) -> dict:
    """`running_on` = {node: [gpu indices]} makes a RUNNING job (tasks spread evenly)."""
    pt = {"gres/gpu": gpus, "cpu": 1, "mem": 1} if per_task is None else per_task
    d: dict[str, Any] = {"id": jid, "account": acct, "user": "u-" + acct, "state": "PENDING", "priority": prio,
                         "preemptible": (prio < 100) if preemptible is None else preemptible,
                         "time_limit_s": None, "tasks": tasks, "per_task": pt}
    if running_on:
        d["state"] = "RUNNING"
        d["start_time"] = NOW - 100
        per_node = tasks // len(running_on)
        d["allocation"] = {n: {"tasks": per_node, "gpus": g, "cpus": per_node * pt.get("cpu", 1),
                               "memory_mb": per_node * pt.get("mem", 1)} for n, g in running_on.items()}
    d.update(kw)
    return d


def snapshot(nodes: list[dict], accounts: list[dict], jobs: list[dict], policy: dict | None = None,
             **extra: Any) -> dict:
    accts = list(accounts)
    if any(a.get("parent") == "default" for a in accts) and not any(a["name"] == "default" for a in accts):
        accts.insert(0, account("default", quota=-1, limit=-1, weight=0, parent=None))
    js = []
    for i, j in enumerate(jobs):
        j = dict(j)
        j.setdefault("submit_time", 1_000_000 + 10 * (i + 1))
        js.append(j)
    d = {"version": 1, "now": NOW, "policy": {"backfill": False, **(policy or {})}, "nodes": nodes,
         "accounts": accts, "jobs": js}
    d.update(extra)
    return d


@dataclass
class Outcome:
    started: set
    preempted: set
    reasons: dict
    fair_share: dict
    decisions: dict


def run(snap: dict, passes: list[str] | None = None, **policy: Any) -> Outcome:
    pol = dict(policy)
    if passes is not None:
        pol["passes"] = passes
    d = decide(load_snapshot(snap), pol).to_dict()
    return Outcome(started={s["job"] for s in d["start"]}, preempted={p["job"] for p in d["preempt"]},
                   reasons={p["job"]: p["reason"] for p in d["pending"]},
                   fair_share={a: v.get("gres/gpu") for a, v in d["fair_share"].items()}, decisions=d)


def apply(snap: dict, dec: dict) -> bool:
    """Apply decisions the way the daemon (and the case judge) does; True if anything changed."""
    jobs = {str(j["id"]): j for j in snap["jobs"]}
    for p in dec["preempt"]:
        j = jobs[str(p["job"])]
        j["state"] = "PENDING"
        j.pop("allocation", None)
        j.pop("start_time", None)
    for s in dec["start"]:
        j = jobs[str(s["job"])]
        j["state"] = "RUNNING"
        j["allocation"] = s["allocation"]
        j["start_time"] = snap["now"]
    return bool(dec["preempt"] or dec["start"])
