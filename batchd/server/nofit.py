"""Why no node can hold a job: batchd's explanation beside Slurm's `Requested node
configuration is not available` (issue 15.6, "errors that help").

Slurm's message names no cause; a user who asked for `--gres=gpu:a100:1` or `-c 65` is left
to guess. `explain` names the first resource that does not fit, checked in the order a
request is most often wrong: the GPU type, the GPU count, the CPU count, then memory. Its
answer goes in `SubmitError.detail` and is printed by the commands after Slurm's own line,
so scripts that match Slurm's line still match.

Counts are per node when the job fixes how its tasks spread (`-N`, `--ntasks-per-node`) and
per task otherwise (tasks may then spread over several nodes), and then also for the job as
a whole against the partition. Pure: nodes are the cluster dicts of `batchd.server.jobspec`.
"""

from __future__ import annotations

from collections.abc import Sequence

from batchd.slurm.gres import is_profile


def _num(x: float) -> str:
    return f"{x:g}"


def _most(values: Sequence[tuple[float, str]]) -> tuple[float, str]:
    """(the largest value, the nodes that have it: up to three names, then "and N more")."""
    best = max((v for v, _n in values), default=0)
    names = sorted(n for v, n in values if v == best)
    where = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return best, where


def _gpu_kinds(caps: list[dict[str, int]]) -> str:
    """`GPU types there: h200, rtxpro6000; MIG profiles: 1g.24gb` (or `none`)."""
    names = sorted({k[len("gres/gpu:"):] for c in caps for k, v in c.items() if k.startswith("gres/gpu:") and v})
    types = [n for n in names if not is_profile(n)]
    profiles = [n for n in names if is_profile(n)]
    text = f"GPU types there: {', '.join(types) if types else 'none'}"
    return text + (f"; MIG profiles: {', '.join(profiles)}" if profiles else "")


def explain(nodes: list[dict], other_nodes: list[dict], per_task: dict[str, float], tasks: int,
            spread_fixed: bool, per_node_tasks: int, part: str) -> tuple[str, str] | None:
    """(what, detail) for a request no node of partition `part` (`nodes`) can hold, `what`
    one of "gpu", "cpu", "mem"; None when no single resource explains it (a node count, a
    mix). `other_nodes` are the cluster's nodes outside the partition (named when they
    offer a GPU type the partition lacks); `per_task` maps "cpu", "mem" (MiB),
    "gres/gpu" or "gres/gpu:TYPE" to the amount one task needs."""
    from batchd.server.jobspec import node_gpu_capacity

    caps = [node_gpu_capacity(n) for n in nodes]
    on_node = per_node_tasks if spread_fixed else 1  # tasks that must share one node
    scope = f"partition {part}"
    for key, need in per_task.items():
        if not key.startswith("gres/gpu") or need <= 0:
            continue
        have = [(float(c.get(key, 0)), str(n["name"])) for c, n in zip(caps, nodes, strict=True)]
        if key != "gres/gpu" and not any(v for v, _n in have):
            elsewhere = sorted(n["name"] for n in other_nodes if node_gpu_capacity(n).get(key))
            also = f" (node {', '.join(elsewhere[:3])} outside it has)" if elsewhere else ""
            return "gpu", f"no node of {scope} offers {key}{also}; {_gpu_kinds(caps)}"
        what = "GPUs" if key == "gres/gpu" else key
        best, where = _most(have)
        total = sum(v for v, _n in have)
        if need * on_node > best:
            return "gpu", (f"{_num(need * on_node)} {what} asked on one node; the most on one node of "
                           f"{scope} is {_num(best)} ({where}), {_num(total)} in the partition")
        if need * tasks > total:
            return "gpu", f"{_num(need * tasks)} {what} asked in all; {scope} has {_num(total)}"
    for key, unit, what in (("cpu", "", "CPUs"), ("mem", "M", "memory")):
        need = per_task.get(key, 0)
        have = [(float(n.get("cpus" if key == "cpu" else "memory_mb", 0)), str(n["name"])) for n in nodes]
        best, where = _most(have)
        total = sum(v for v, _n in have)
        if need * on_node > best:
            return key, (f"{_num(need * on_node)}{unit} {what} asked on one node; the most on one node of "
                         f"{scope} is {_num(best)}{unit} ({where})")
        if need * tasks > total:
            return key, f"{_num(need * tasks)}{unit} {what} asked in all; {scope} has {_num(total)}{unit}"
    return None
