"""Topology-aware choice of GPUs on one node (pure).

Among the free whole GPUs of a type, a job that needs several gets the set best
connected, in this order (NVML's view, as `batchd.node.nvml` records it per device under
`links`): every pair joined by NVLink; then the closest common PCIe ancestor over all
pairs (NVML levels: 0 same board, 10 one switch, 20 several switches, 30 host bridge,
40 same NUMA node, 50 across sockets); then the fewest NUMA nodes; then the lowest
indices (deterministic). Nodes without link data keep lowest-index-first.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

MAX_COMBINATIONS = 5000  # above this, a greedy choice (grow from each seed) is used


def _links(raw_gpus: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out = {}
    for g in raw_gpus:
        if isinstance(g, dict) and "index" in g and isinstance(g.get("links"), dict):
            out[int(g["index"])] = g
    return out


def _level(info: dict[int, dict[str, Any]], a: int, b: int, key: str, default: float) -> float:
    row = info.get(a, {}).get("links", {}).get(key) or []
    return float(row[b]) if b < len(row) and row[b] is not None else default


def _score(idx: tuple[int, ...], info: dict[int, dict[str, Any]]) -> tuple:
    nvl_pairs = 0
    worst_pcie = 0.0
    total_pcie = 0.0
    for a, b in combinations(idx, 2):
        if _level(info, a, b, "nvlink", 0) > 0:
            nvl_pairs += 1
        lv = _level(info, a, b, "pcie", 50)
        worst_pcie = max(worst_pcie, lv)
        total_pcie += lv
    pairs = len(idx) * (len(idx) - 1) // 2
    numa = len({info.get(i, {}).get("numa") for i in idx})
    return (-(nvl_pairs == pairs), -nvl_pairs, worst_pcie, total_pcie, numa, idx)


def best_set(slots: list[Any], want: int, raw_gpus: list[dict[str, Any]]) -> list[Any]:
    """`want` of `slots` (whole-GPU slots, `key` = GPU index, in device order), best
    connected; the first `want` when there is nothing to choose or no link data."""
    if want <= 1 or want >= len(slots):
        return slots[:want]
    info = _links(raw_gpus)
    if not info or not all(isinstance(s.key, int) and s.key in info for s in slots):
        return slots[:want]
    by_key = {s.key: s for s in slots}
    keys = [s.key for s in slots]
    n_comb = 1
    for i in range(want):
        n_comb = n_comb * (len(keys) - i) // (i + 1)
    if n_comb <= MAX_COMBINATIONS:
        best = min(combinations(keys, want), key=lambda c: _score(c, info))
    else:
        cands = []
        for seed in keys:
            chosen = [seed]
            while len(chosen) < want:
                rest = [k for k in keys if k not in chosen]
                nxt = min(rest, key=lambda k: _score(tuple(sorted(chosen + [k])), info))
                chosen.append(nxt)
            cands.append(tuple(sorted(chosen)))
        best = min(cands, key=lambda c: _score(c, info))
    picked = set(best)
    return [by_key[k] for k in keys if k in picked]
