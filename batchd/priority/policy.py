"""The ``[priority]`` policy: keys, Slurm's defaults, validation.

Flat snake_case keys, the same in ``batchd.toml``'s ``[priority]`` section, in a
snapshot's ``policy`` object and in the ``policy`` argument of the functions of
``batchd.priority``. Later sources override earlier ones: ``DEFAULT_POLICY``, then the
``policy`` argument (the daemon's config), then the snapshot's own ``policy`` (the
overrides ``batchd plan`` files carry).

=============================  ==========  =========================================
key                            default     Slurm equivalent
=============================  ==========  =========================================
fairshare_algorithm            fair_tree   ``fair_tree`` or ``classic`` (NO_FAIR_TREE)
fairshare_dampening_factor     1           FairShareDampeningFactor (classic only)
decay_half_life_s              604800      PriorityDecayHalfLife (0 = no decay)
usage_reset_period             NONE        PriorityUsageResetPeriod
calc_period_s                  300         PriorityCalcPeriod
max_age_s                      604800      PriorityMaxAge
favor_small                    false       PriorityFavorSmall
priority_flags                 ""          PriorityFlags: MAX_TRES, MAX_TRES_GRES,
                                           SMALL_RELATIVE_TO_TIME, NO_NORMAL_ASSOC,
                                           NO_NORMAL_PART, NO_NORMAL_QOS,
                                           NO_NORMAL_TRES, NO_NORMAL_ALL
weight_age                     0           PriorityWeightAge
weight_assoc                   0           PriorityWeightAssoc
weight_fairshare               0           PriorityWeightFairshare
weight_jobsize                 0           PriorityWeightJobSize
weight_partition               0           PriorityWeightPartition
weight_qos                     0           PriorityWeightQOS
weight_tres                    ""          PriorityWeightTRES, e.g. "CPU=100,GRES/gpu=1000"
tres_billing_weights           ""          TRESBillingWeights (empty: billing = CPUs)
=============================  ==========  =========================================

The weights default to Slurm's 0, so an unconfigured cluster orders jobs by submit
time, exactly as Slurm does; set e.g. ``weight_fairshare = 10000`` to use fair-share.
"""

from __future__ import annotations

from typing import Any

from batchd.slurm.tres import BillingWeights, parse_billing_weights

__all__ = ["DEFAULT_POLICY", "merge_policy", "priority_flags", "tres_weights", "billing_weights"]

DEFAULT_POLICY: dict[str, Any] = {
    "fairshare_algorithm": "fair_tree",
    "fairshare_dampening_factor": 1.0,
    "decay_half_life_s": 604800,
    "usage_reset_period": "NONE",
    "calc_period_s": 300,
    "max_age_s": 604800,
    "favor_small": False,
    "priority_flags": "",
    "weight_age": 0,
    "weight_assoc": 0,
    "weight_fairshare": 0,
    "weight_jobsize": 0,
    "weight_partition": 0,
    "weight_qos": 0,
    "weight_tres": "",
    "tres_billing_weights": "",
}

_INT_KEYS = ("weight_age", "weight_assoc", "weight_fairshare", "weight_jobsize", "weight_partition", "weight_qos")
_NUM_KEYS = ("fairshare_dampening_factor", "decay_half_life_s", "calc_period_s", "max_age_s")
_FLAGS = ("MAX_TRES", "MAX_TRES_GRES", "SMALL_RELATIVE_TO_TIME", "NO_NORMAL_ASSOC", "NO_NORMAL_PART",
          "NO_NORMAL_QOS", "NO_NORMAL_TRES", "NO_NORMAL_ALL", "NO_FAIR_TREE", "CALCULATE_RUNNING",
          "ACCRUE_ALWAYS", "INCR_ONLY", "DEPTH_OBLIVIOUS")


def merge_policy(policy: dict | None = None, snapshot: dict | None = None) -> dict[str, Any]:
    """``DEFAULT_POLICY`` updated by ``policy`` then by ``snapshot["policy"]``, checked.

    Unknown keys are kept (they belong to the scheduler). Raises ``ValueError`` naming
    the key on a bad value.
    """
    out = dict(DEFAULT_POLICY)
    out.update(policy or {})
    out.update((snapshot or {}).get("policy") or {})
    for k in _INT_KEYS:
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or v != int(v):
            raise ValueError(f"priority policy: {k} must be a non-negative integer, not {v!r}")
        out[k] = int(v)
    for k in _NUM_KEYS:
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise ValueError(f"priority policy: {k} must be a non-negative number, not {v!r}")
    if out["fairshare_dampening_factor"] <= 0:
        raise ValueError("priority policy: fairshare_dampening_factor must be > 0")
    if out["fairshare_algorithm"] not in ("fair_tree", "classic"):
        raise ValueError(f"priority policy: fairshare_algorithm must be fair_tree or classic, "
                         f"not {out['fairshare_algorithm']!r}")
    if "NO_FAIR_TREE" in priority_flags(out) or "DEPTH_OBLIVIOUS" in priority_flags(out):
        out["fairshare_algorithm"] = "classic"
    if not isinstance(out["favor_small"], bool):
        fs = str(out["favor_small"]).strip().lower()
        if fs not in ("yes", "no", "true", "false", "1", "0"):
            raise ValueError(f"priority policy: favor_small must be a boolean, not {out['favor_small']!r}")
        out["favor_small"] = fs in ("yes", "true", "1")
    for k in ("weight_tres", "tres_billing_weights"):
        try:
            parse_billing_weights(str(out[k] or ""))
        except ValueError as e:
            raise ValueError(f"priority policy: {k}: {e}") from None
    return out


def priority_flags(policy: dict) -> set[str]:
    """The upper-case PriorityFlags set; NO_NORMAL_ALL expands to every NO_NORMAL_*."""
    flags = {f.strip().upper() for f in str(policy.get("priority_flags") or "").split(",") if f.strip()}
    bad = flags - set(_FLAGS)
    if bad:
        raise ValueError(f"priority policy: unknown priority_flags {', '.join(sorted(bad))}")
    if "NO_NORMAL_ALL" in flags:
        flags |= {"NO_NORMAL_ASSOC", "NO_NORMAL_PART", "NO_NORMAL_QOS", "NO_NORMAL_TRES"}
    return flags


def tres_weights(policy: dict) -> dict[str, float]:
    """``weight_tres`` parsed with the TRESBillingWeights syntax: {tres name: weight}."""
    return dict(parse_billing_weights(str(policy.get("weight_tres") or "")).weights)


def billing_weights(policy: dict) -> BillingWeights:
    """``tres_billing_weights`` with the MAX_TRES mode of ``priority_flags``."""
    return parse_billing_weights(str(policy.get("tres_billing_weights") or ""),
                                 str(policy.get("priority_flags") or ""))
