"""The TRES of an allocation, against the nodes' GPU inventories: cpu, mem, node,
gres/gpu (a MIG instance counting its share of the card), gres/gpu:TYPE (a MIG profile
is a type and each instance counts 1) and gres/shard.

Pure functions of their inputs (inventories in either form of the snapshot format:
`{"type", "count"}` or devices `{"index", "uuid", "type", "mig": [...]}`).
"""

from __future__ import annotations

from typing import Any


def device_types(gpus: list[dict[str, Any]]) -> dict[int, str]:
    """GPU index -> type for a node's inventory (count form or device form)."""
    out: dict[int, str] = {}
    i = 0
    for g in gpus:
        if "count" in g:
            for _ in range(int(g["count"])):
                out[i] = g["type"]
                i += 1
        else:
            out[int(g["index"])] = g["type"]
    return out


def mig_profiles(gpus: list[dict[str, Any]]) -> dict[str, tuple[str, float]]:
    """MIG instance uuid -> (profile, share of its GPU) for a node in device form."""
    out: dict[str, tuple[str, float]] = {}
    for g in gpus:
        migs = g.get("mig") or []
        total = float(g.get("mig_slices") or 0) or float(sum(_slices(m["profile"]) for m in migs) or 1)
        total = max(total, 7.0) if not g.get("mig_slices") else total
        for m in migs:
            out[m["uuid"]] = (m["profile"], _slices(m["profile"]) / total)
    return out


def _slices(profile: str) -> int:
    head = profile.split(".")[0].rstrip("g")
    return int(head) if head.isdigit() else 1


def alloc_tres(allocation: dict[str, Any], nodes: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """The TRES of an allocation: cpu, mem, node, gres/gpu and gres/gpu:TYPE (a MIG
    instance counts its slice share toward gres/gpu and 1 toward its profile)."""
    t: dict[str, float] = {"cpu": 0, "mem": 0, "node": 0}
    for name, a in allocation.items():
        t["cpu"] += int(a.get("cpus", 0))
        t["mem"] += int(a.get("memory_mb", 0))
        t["node"] += 1
        inv = nodes.get(name, [])
        types = device_types(inv)
        migs = mig_profiles(inv)
        for g in a.get("gpus", []):
            s = str(g)
            if ":" in s:
                uuid = s.split(":", 1)[1]
                prof, share = migs.get(uuid, ("mig", 1.0))
                t["gres/gpu"] = t.get("gres/gpu", 0) + share
                t[f"gres/gpu:{prof}"] = t.get(f"gres/gpu:{prof}", 0) + 1
            else:
                gt = types.get(int(s), "gpu")
                t["gres/gpu"] = t.get("gres/gpu", 0) + 1
                t[f"gres/gpu:{gt}"] = t.get(f"gres/gpu:{gt}", 0) + 1
        if a.get("shards"):
            t["gres/shard"] = t.get("gres/shard", 0) + int(a["shards"])
    return t


def whole_gpus(gpus: list[dict[str, Any]]) -> int:
    """GPUs that can be handed out whole (not in MIG mode): what gres/shard divides."""
    return sum(int(g["count"]) if "count" in g else (0 if g.get("mig") else 1) for g in gpus)
