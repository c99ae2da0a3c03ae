"""Partition limits a pending job must be within before any pass considers it.

Slurm with `EnforcePartLimits=NO` (its default) accepts a job whose time limit is above
its partition's MaxTime and keeps it pending with reason `PartitionTimeLimit` until the
limit is lowered (`scontrol update JobId=N TimeLimit=...`) or an administrator sets it:
a limit an operator set (`jobs[].time_limit_admin`, Slurm's ADMIN_SET_LIMIT) may exceed
MaxTime (recorded from Slurm 22.05 in tests/compat/test_time_limits.py).

The snapshot's optional `partitions: [{"name", "max_time_s"}]` gives each partition's
MaxTime in seconds (`-1` or null: UNLIMITED); a job names its partition in
`jobs[].partition`. A job without a time limit (`time_limit_s` null or negative) is
UNLIMITED, so over any finite MaxTime. A partition the snapshot does not list limits
nothing. Like every held reason, this one keeps the job out of every pass (no
reservation, no preemption for it).
"""

from __future__ import annotations

from typing import Any

from .fields import field_error, is_num

PARTITION_TIME_LIMIT = "PartitionTimeLimit"


def partition_max_times(raw: dict) -> dict[str, int]:
    """{partition name: MaxTime in seconds} for the partitions with a finite MaxTime;
    ValueError naming the key of a malformed entry."""
    parts = raw.get("partitions")
    if parts is None:
        return {}
    if not isinstance(parts, list):
        raise field_error("partitions", "must be a list", parts)
    out: dict[str, int] = {}
    for i, p in enumerate(parts):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise field_error(f"partitions[{i}]", "must be an object with a name", p)
        mt: Any = p.get("max_time_s")
        if mt is None:
            continue
        if not is_num(mt):
            raise field_error(f"partitions[{i}].max_time_s", "must be a number of seconds, -1 or null", mt)
        if mt >= 0:
            out[p["name"]] = int(mt)
    return out


def limit_reason(job: Any, max_times: dict[str, int]) -> str | None:
    """The partition limit pending job `job` (a JobRT: its spec's `partition`,
    `time_limit_admin` and `time_limit`) is over, or None."""
    limit = max_times.get(job.partition)
    if limit is None or job.time_limit_admin:
        return None
    tl = job.time_limit
    if tl is None or tl > limit:
        return PARTITION_TIME_LIMIT
    return None
