"""Team policy per account and per user, as Slurm's association limits (issue 15). Pure.

An account (`[[account]]` of the accounts file, `batchd account`, `sacctmgr`) and a user's
association with it (`[[user]]`) may carry a `policy` table:

| key | Slurm (Kueue, KAI) | meaning | enforced |
|---|---|---|---|
| `qos` | QOS | the QOS its jobs may use (unset: every QOS) | at submit and `scontrol update QOS=`: `Invalid qos specification` |
| `default_qos` | DefaultQOS | the QOS of a job that names none | at submit |
| `partitions` | (partition AllowAccounts) | the partitions its jobs may use (unset: all) | at submit and update: `Invalid account or account/partition combination specified` |
| `max_submit_jobs` | MaxSubmitJobs | pending + running jobs per user | at submit: `AssocMaxSubmitJobLimit` |
| `max_jobs` | MaxJobs | running jobs per user | pending reason `AssocMaxJobsLimit` |
| `max_tres_per_job` | MaxTRES | TRES of one job | pending reason `AssocMaxGRESPerJob` (`AssocMaxCpuPerJobLimit`, `AssocMaxMemPerJob`) |
| `max_tres_per_user` | GrpTRES of each user's association | running TRES per user | pending reason `AssocGrpGRES` (`AssocGrpCpuLimit`, `AssocGrpMemLimit`) |
| `grp_tres_mins` | GrpTRESMins | a budget of TRES-minutes per `budget_period`, for the account and its subtree | pending reason `AssocGrpGRESMinutes` (`AssocGrpCPUMinutesLimit`, `AssocGrpMemMinutes`) |
| `grp_tres_run_mins` | GrpTRESRunMins | TRES x remaining time limit of the running jobs | pending reason `AssocGrpGRESRunMinutes` (`AssocGrpCPURunMinutesLimit`, `AssocGrpMemRunMinutes`) |
| `budget_period` | (PriorityUsageResetPeriod) | `month` (default), `week`, `day`, `year` or `none`: when the budget's count restarts (UTC) | |
| `within_account` | Kueue `withinClusterQueue`; KAI's preempt action | which running jobs of its own account a pending job may preempt: `never`, `lower_priority` (default: strictly lower QOS priority), `lower_or_newer_equal_priority` (also equal QOS priority, submitted later) | by the scheduler (docs/preemption.md) |
| `reclaim_within_cohort` | Kueue `reclaimWithinCohort`; KAI's reclaim action | which jobs of other accounts a job may reclaim while it stays within its quota: `never`, `lower_priority`, `any` (default) | by the scheduler |
| `borrow_within_cohort` | Kueue `borrowWithinCohort` | reclaim while the job would be above its quota: a table: `policy` = `never`, `lower_priority` or `any` (default), optional `max_priority_threshold` = N (only victims of QOS priority <= N); or the text `"POLICY"` or `"POLICY:N"` | by the scheduler |
| `min_runtime_reclaim_s` | KAI `reclaimMinRuntime` | its running jobs are no reclaim victims (for other accounts) before they ran this long: seconds, or a Slurm duration (`30:00`, `1-00:00:00`) | by the scheduler |
| `min_runtime_preempt_s` | KAI `preemptMinRuntime`; Slurm's QOS PreemptExemptTime | likewise for preemption within the account | by the scheduler |

Inheritance, as Slurm's associations: a user's association takes each of `qos`,
`default_qos`, `max_*` from its own policy, else from its account's, else from the nearest
ancestor that sets it. `grp_*` limits hold at every level: an account's budget counts its
whole subtree. `partitions` is the account's (and its ancestors' intersection).
TRES keys: `cpu`, `mem` (MiB), `gres/gpu`, `gres/gpu:TYPE`, `gres/shard`; a limit of -1 is
none. The account-wide running cap (Slurm's GrpTRES) is each resource's `limit`.

The five preemption keys (issue 16) are the account's only (a user's policy refuses them); an
account without one takes it from its nearest ancestor that sets it, else the default; the
scheduler applies both (batchd/scheduler/victims.py). The preemptor's account's policy decides
which jobs it may take; the victim's account decides how long its jobs are protected (and its
QOS: the larger counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INHERITED = ("qos", "default_qos", "max_jobs", "max_submit_jobs", "max_tres_per_job", "max_tres_per_user")
GROUP = ("grp_tres_mins", "grp_tres_run_mins")
#: the preemption policy of an account (issue 16, docs/preemption.md)
PREEMPT = ("within_account", "reclaim_within_cohort", "borrow_within_cohort", "min_runtime_reclaim_s",
           "min_runtime_preempt_s")
ACCOUNT_ONLY = ("partitions", "budget_period", *GROUP, *PREEMPT)
KEYS = (*INHERITED, *ACCOUNT_ONLY)
USER_KEYS = INHERITED
PERIODS = ("month", "week", "day", "year", "none")
#: allowed values of the word-valued preemption keys
CHOICES = {
    "within_account": ("never", "lower_priority", "lower_or_newer_equal_priority"),
    "reclaim_within_cohort": ("never", "lower_priority", "any"),
    "borrow_within_cohort": ("never", "lower_priority", "any"),
}
TRES_KEYS = ("cpu", "mem", "gres/gpu", "gres/shard")

SUBMIT_LIMIT = ("Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)")


def check_policy(where: str, p: Any, user: bool = False) -> dict[str, Any]:
    """A validated policy table (raises ValueError naming `where.key`)."""
    if p is None:
        return {}
    if not isinstance(p, dict):
        raise ValueError(f"{where}: must be a table")
    allowed = USER_KEYS if user else KEYS
    out: dict[str, Any] = {}
    for k, v in p.items():
        w = f"{where}.{k}"
        if user and k in ACCOUNT_ONLY:
            raise ValueError(f"{w}: an account's key, not a user's (set it in the account's policy)")
        if k not in allowed:
            raise ValueError(f"{w}: unknown key (one of {', '.join(allowed)})")
        if k in PREEMPT:
            out[k] = _check_preempt(w, k, v)
        elif k in ("qos", "partitions"):
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise ValueError(f"{w}: must be a list of names")
            out[k] = sorted(set(v))
        elif k == "default_qos":
            if not isinstance(v, str) or not v:
                raise ValueError(f"{w}: must be a name")
            out[k] = v
        elif k == "budget_period":
            if v not in PERIODS:
                raise ValueError(f"{w}: must be one of {', '.join(PERIODS)}")
            out[k] = v
        elif k in ("max_jobs", "max_submit_jobs"):
            if isinstance(v, bool) or not isinstance(v, int) or v < -1:
                raise ValueError(f"{w}: must be an integer >= 0, or -1 for none")
            if v != -1:
                out[k] = v
        else:
            if not isinstance(v, dict):
                raise ValueError(f"{w}: must be a table of TRES (e.g. {{\"gres/gpu\" = 8}})")
            t: dict[str, float] = {}
            for r, n in v.items():
                if not (r in TRES_KEYS or r.startswith("gres/gpu:")):
                    raise ValueError(f"{w}.{r}: not a TRES name (cpu, mem, gres/gpu, gres/gpu:TYPE, gres/shard)")
                if isinstance(n, bool) or not isinstance(n, int | float) or n < -1:
                    raise ValueError(f"{w}.{r}: must be a number >= 0, or -1 for none")
                if n != -1:
                    t[r] = float(n) if not float(n).is_integer() else int(n)
            if t:
                out[k] = t
    if "default_qos" in out and "qos" in out and out["default_qos"] not in out["qos"]:
        raise ValueError(f"{where}.default_qos: {out['default_qos']!r} is not among its qos {out['qos']}")
    return out


def _check_preempt(w: str, k: str, v: Any) -> Any:
    """One preemption key's value, normalised: a word, seconds, or for borrow_within_cohort
    the table {policy, max_priority_threshold?} (also given as the text "POLICY[:N]").
    A Slurm duration for a `min_runtime_*` key is the caller's to convert (batchd.server.accounts):
    the time grammar lives on the command side."""
    if k.startswith("min_runtime_"):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{w}: must be an integer number of seconds >= 0, got {v!r}")
        return v
    allowed = CHOICES[k]
    if k != "borrow_within_cohort":
        if v not in allowed:
            raise ValueError(f"{w}: must be one of {', '.join(allowed)}, got {v!r}")
        return v
    if isinstance(v, str):
        word, colon, n = v.partition(":")
        t: dict[str, Any] = {"policy": word}
        if colon:
            try:
                t["max_priority_threshold"] = int(n)
            except ValueError:
                raise ValueError(f"{w}: the threshold after ':' must be an integer, got {n!r}") from None
        v = t
    if not isinstance(v, dict):
        raise ValueError(f"{w}: must be a table {{policy = \"{'|'.join(allowed)}\", max_priority_threshold = N}}"
                         f" or the text \"POLICY[:N]\", got {v!r}")
    for f in v:
        if f not in ("policy", "max_priority_threshold"):
            raise ValueError(f"{w}.{f}: unknown key (one of policy, max_priority_threshold)")
    if "policy" not in v:
        raise ValueError(f"{w}.policy: required (one of {', '.join(allowed)})")
    if v["policy"] not in allowed:
        raise ValueError(f"{w}.policy: must be one of {', '.join(allowed)}, got {v['policy']!r}")
    out: dict[str, Any] = {"policy": v["policy"]}
    if v.get("max_priority_threshold") is not None:
        n = v["max_priority_threshold"]
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError(f"{w}.max_priority_threshold: must be an integer (a QOS priority), got {n!r}")
        out["max_priority_threshold"] = n
    return out


@dataclass
class Effective:
    """The policy one (account, user) works under (inheritance applied)."""
    qos: list[str] | None = None
    default_qos: str | None = None
    partitions: set[str] | None = None
    max_jobs: int | None = None
    max_submit_jobs: int | None = None
    max_tres_per_job: dict[str, float] = field(default_factory=dict)
    max_tres_per_user: dict[str, float] = field(default_factory=dict)


def effective(account: str, user: str, parents: dict[str, str | None], policies: dict[str, dict[str, Any]],
              user_policies: dict[tuple[str, str], dict[str, Any]]) -> Effective:
    """`parents`: account -> parent; `policies`: account -> policy; `user_policies`:
    (user, account) -> the association's policy."""
    chain = [user_policies.get((user, account)) or {}]
    a: str | None = account
    seen: set[str] = set()
    parts: set[str] | None = None
    while a is not None and a not in seen:
        seen.add(a)
        pol = policies.get(a) or {}
        chain.append(pol)
        if "partitions" in pol:
            parts = set(pol["partitions"]) if parts is None else parts & set(pol["partitions"])
        a = parents.get(a)
    e = Effective(partitions=parts)
    for k in INHERITED:
        for pol in chain:
            if k in pol:
                setattr(e, k, pol[k])
                break
    return e


def check_submit(e: Effective, qos: str, qos_given: bool, partition: str, active: int, new: int) -> str:
    """The QOS a submission runs under, or raises PolicyRefusal. `active`: the user's pending
    and running jobs in this account now, `new`: the jobs (array tasks) this submission adds."""
    if not qos_given and e.default_qos:
        qos = e.default_qos
    if e.qos is not None and qos not in e.qos:
        raise PolicyRefusal("Invalid qos specification", "InvalidQOS")
    if e.partitions is not None and partition not in e.partitions:
        raise PolicyRefusal("Invalid account or account/partition combination specified", "InvalidAccount")
    if e.max_submit_jobs is not None and active + new > e.max_submit_jobs:
        raise PolicyRefusal(SUBMIT_LIMIT, "AssocMaxSubmitJobLimit")
    return qos


class PolicyRefusal(Exception):
    """A submission or change an association's policy refuses: Slurm's message and reason."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.message = message
        self.reason = reason


def reason_for(kind: str, tres: str) -> str:
    """Slurm's pending reason for a limit of `kind` (`per_job`, `per_user`, `mins`,
    `run_mins`) on TRES `tres`."""
    base = "cpu" if tres == "cpu" else "mem" if tres == "mem" else "gres"
    return {
        ("per_job", "gres"): "AssocMaxGRESPerJob", ("per_job", "cpu"): "AssocMaxCpuPerJobLimit",
        ("per_job", "mem"): "AssocMaxMemPerJob",
        ("per_user", "gres"): "AssocGrpGRES", ("per_user", "cpu"): "AssocGrpCpuLimit",
        ("per_user", "mem"): "AssocGrpMemLimit",
        ("mins", "gres"): "AssocGrpGRESMinutes", ("mins", "cpu"): "AssocGrpCPUMinutesLimit",
        ("mins", "mem"): "AssocGrpMemMinutes",
        ("run_mins", "gres"): "AssocGrpGRESRunMinutes", ("run_mins", "cpu"): "AssocGrpCPURunMinutesLimit",
        ("run_mins", "mem"): "AssocGrpMemRunMinutes",
    }[(kind, base)]
