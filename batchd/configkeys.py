"""The keys each table of batchd.toml may hold (`batchd.config`), and the message for one
it may not: a typo is refused, never ignored, with the table named, the closest known key
suggested and, for a key of another table, the table it belongs in.

    batchd.toml: scheduler.intervl_s: unknown key in [scheduler] (did you mean "interval_s"?)
    batchd.toml: scheduler.decay_half_life_s: unknown key in [scheduler] (it belongs in [priority])

`[gpu_aliases]` is the one table whose keys are free: GPU product names.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

TOP = ("cluster_name", "state_dir", "database_url", "database_password_file", "socket", "admin_group",
       "gpu_env", "shard_per_gpu", "mps", "isolation", "accounts",
       "scheduler", "priority", "accounting", "report", "limits", "http", "gpu_aliases", "partition", "node", "qos")

#: [scheduler]: what the daemon reads itself, and the policy keys of `batchd.scheduler`
#: (`batchd.scheduler.cycle`: passes, backfill, backfill_max_reservations, placement,
#: quota_reclaim_by_priority, reclaimer_saturation_multiplier, fairshare_k_value)
SCHEDULER = ("interval_s", "cycle_min_gap_ms", "kill_wait_s", "grace_time_s", "def_mem_per_cpu_mb",
             "enforce_memory", "node_timeout_s", "min_job_age_s", "spool_keep_s", "budget_recount_s",
             "passes", "placement", "backfill", "backfill_max_reservations", "quota_reclaim_by_priority",
             "reclaimer_saturation_multiplier", "fairshare_k_value")

#: [priority]: the policy keys of `batchd.priority.policy` (its DEFAULT_POLICY) but the
#: billing weights, which are [accounting]'s (the daemon's policy takes them from there)
PRIORITY = ("fairshare_algorithm", "fairshare_dampening_factor", "decay_half_life_s", "usage_reset_period",
            "calc_period_s", "max_age_s", "favor_small", "priority_flags", "weight_age", "weight_assoc",
            "weight_fairshare", "weight_jobsize", "weight_partition", "weight_qos", "weight_tres")

ACCOUNTING = ("tres_billing_weights", "sample_interval_s", "rollup_interval_s", "zero_gpu_flag_s")
REPORT = ("timezone",)
HTTP = ("listen", "tls_cert", "tls_key", "jwt_key")
NODE = ("name", "cpus", "memory_mb", "gpus", "features")
#: a node's `gpus` entry: `{type, count}`, or a device as `batchd node check` describes it
#: (batchd.node.nvml's snapshot form)
GPU = ("type", "count", "index", "uuid", "mig", "slices", "memory_mb", "minor", "numa", "cpus", "links")
MIG = ("profile", "uuid", "slices", "parent_slices", "memory_mb")
LINKS = ("nvlink", "nvlink_p2p", "pcie")
PARTITION = ("name", "nodes", "default", "max_time", "default_time", "priority_job_factor")
QOS = ("name", "priority", "preemptible", "usage_factor", "max_gpus_per_user", "grace_time_s",
       "min_runtime_reclaim_s", "min_runtime_preempt_s", "max_wall", "idle_timeout")

TOP_LEVEL = "the top level"
#: the tables `unknown_key` looks through for a key that is another table's
_TABLES: dict[str, tuple[str, ...]] = {
    "[scheduler]": SCHEDULER, "[priority]": PRIORITY, "[accounting]": ACCOUNTING, "[report]": REPORT,
    "[[partition]]": PARTITION, "[[qos]]": QOS, TOP_LEVEL: TOP,
}


def unknown_key(key: str, table: str, known: Iterable[str], limits: Iterable[str] = ()) -> str:
    """The problem text for `key`, which `table` (e.g. "[scheduler]") does not know: the
    table a key of that name belongs in, else the closest of `known`. `limits`: the keys
    of [limits] (batchd.config.LIMITS), which live beside the config's parser."""
    text = f"unknown key {_in(table)}"
    tables = dict(_TABLES, **({"[limits]": tuple(limits)} if limits else {}))
    home = next((t for t, keys in tables.items() if t != table and key in keys), None)
    if home is not None:
        return f"{text} (it belongs {_in(home)})"
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f'{text} (did you mean "{close[0]}"?)' if close else text


def _in(table: str) -> str:
    return "at the top level" if table == TOP_LEVEL else f"in {table}"


def first_unknown(table: Mapping[str, object], known: Iterable[str]) -> str | None:
    """The first key of `table` (in file order) that is not one of `known`, or None."""
    names = set(known)
    return next((k for k in table if k not in names), None)
