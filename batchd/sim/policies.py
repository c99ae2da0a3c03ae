"""The queue designs `batchd simulate --policy/--compare` runs side by side, each a
transformation of the accounts file and the scheduler's policy. The measures always
compare with the accounts file's quotas (what each team was promised).

- `batchd`: the accounts file as it is: KAI-style quotas, limits and over-quota weights,
  Slurm's multifactor priority inside an account, backfill, reclaim and preempt.
- `static`: static partitioning: each team only its quota (every `gres/gpu` limit set to
  the quota, no borrowing), so nothing is lent and nothing reclaimed.
- `fifo`: a plain Slurm without quotas: every job in one account, priority by age alone
  (first come, first served), backfill, no reclaim and no preemption.
- `kueue`: Kueue-style borrowing: limits as in the file, every over-quota weight 1 (no
  weights: idle cards go to borrowers by their fair share of them alone), and a lending
  limit on each team's quota (the file's, else `lending_fraction` of the quota: at most
  that much of a team's quota is ever lent).
"""

from __future__ import annotations

import copy
from typing import Any

POLICIES = ("batchd", "static", "fifo", "kueue")
GPU = "gres/gpu"


def describe(name: str, lending_fraction: float = 0.5) -> str:
    return {
        "batchd": "quotas, limits and over-quota weights as in the accounts file; multifactor priority; "
                  "backfill, reclaim, preempt",
        "static": "each team its quota and never more (limit = quota); no borrowing, nothing lent",
        "fifo": "no quotas: one queue, priority by age only; backfill; no reclaim, no preemption",
        "kueue": f"limits as in the file, over-quota weight 1 for all; lending limit = the file's, else "
                 f"{lending_fraction:g} x quota",
    }[name]


def apply_policy(name: str, accounts: list[dict[str, Any]], users: list[dict[str, Any]], policy: dict[str, Any],
                 lending_fraction: float = 0.5
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], dict[str, str]]:
    """(accounts, users, policy, team -> account) for the scheduler under design `name`."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r} (one of {', '.join(POLICIES)})")
    accounts = copy.deepcopy(accounts)
    users = copy.deepcopy(users)
    policy = dict(policy)
    if name == "static":
        for a in accounts:
            r = (a.get("resources") or {}).get(GPU)
            if r is not None and float(r.get("quota", -1)) >= 0:
                r["limit"] = r["quota"]
        return accounts, users, policy, {}
    if name == "fifo":
        teams = [a["name"] for a in accounts if a["name"] != "root"]
        root = [dict(a, resources={}) for a in accounts if a["name"] == "root"]
        one = [*root, {"name": "all", "parent": "root" if root else None, "priority": 100, "shares": 1,
                       "resources": {}}]
        names = sorted({u["name"] for u in users})
        policy.update({"weight_age": 1000, "weight_fairshare": 0, "weight_jobsize": 0, "weight_partition": 0,
                       "weight_qos": 0, "weight_assoc": 0, "passes": ["allocate", "backfill"]})
        return one, [{"name": n, "account": "all", "shares": 1} for n in names], policy, dict.fromkeys(teams, "all")
    if name == "kueue":
        for a in accounts:
            r = (a.get("resources") or {}).get(GPU)
            if r is None:
                continue
            r["over_quota_weight"] = 1
            q = float(r.get("quota", -1))
            if q > 0 and r.get("lending_limit") is None:
                r["lending_limit"] = round(q * lending_fraction, 6)
    return accounts, users, policy, {}
