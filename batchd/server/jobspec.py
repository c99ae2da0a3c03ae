"""Server-side check and resolution of a submitted JOB_SPEC (see `batchd/protocol.py`).

`resolve(spec, cluster, user, uid)` is called by the daemon's submit service before
anything is stored: it either returns the resolved request or raises
`batchd.errors.SubmitError` with Slurm's message (sbatch prints
`sbatch: error: Batch job submission failed: <message>` and exits 1). Pure: no I/O, no
clock, no logging.

`cluster` (built by the daemon)::

    {"name": str,
     "nodes": [{"name", "cpus", "memory_mb", "state",
                "gpus": [{"type", "count"}] or [{"index", "uuid", "type", "mig": [{"profile", "uuid"}]}],
                "partitions": [names]}],
     "partitions": [{"name", "default": bool, "nodes": [names], "max_time_s": int (-1 UNLIMITED),
                     "default_time_s": int | None}],
     "accounts": [names], "user_accounts": [names this user may use], "default_account": str,
     "qos": {name: {"max_wall_s": int (optional)...}}, "default_qos": "normal",
     "shard_per_gpu": int,
     # optional:
     "def_mem_per_cpu_mb": int (default 1024, Slurm's DefMemPerCPU of the reference cluster),
     "billing_weights": str (TRESBillingWeights; default: billing = CPUs),
     "max_array_size": int (default 1001), "job_requeue": bool (default True),
     "user_is_admin": bool (may use a negative --nice; root always may)}

Result (all counts per task unless named otherwise)::

    {"partition", "account", "qos", "time_limit_s" (-1 UNLIMITED; None: no -t and no DefaultTime,
     the partition's MaxTime from the job's start), "time_min_s", "name",
     "tasks", "nodes" (exact node count or None), "tasks_per_node" (or None),
     "per_task": {"cpu": c, "mem": MiB, "gres/gpu" | "gres/gpu:TYPE" | "gres/shard": n},
     "cpus", "mem_mb", "gpus" (job totals), "gpu_type": str | None, "exclusive": bool,
     "tres_req": str (scontrol order, e.g. "cpu=1,mem=1G,node=1,billing=5,gres/gpu=2"),
     "tres_req_dict": {tres: total}, "billing": float,
     "begin_time", "hold", "nice", "requeue", "array_task_ids": [int] | None,
     "array_max_running": int | None, "dependency": parsed (batchd.slurm.dependency) | None,
     "time_limit_partition": True only when time_limit_s is None (the partition's limit: a
     requeue gives it back, batchd.node.runs)}

Per-task GPU counts may be fractional when a per-node request (`--gres`,
`--gpus-per-node`) or a job total (`--gpus`) does not divide evenly among the tasks;
the job total (`gpus`) is always whole.

Slurm semantics followed: `--gres`/`--gpus-per-node` are per node, `--gpus` per job,
`--gpus-per-task` per task; 1 CPU per task by default, `--cpus-per-gpu` gives CPUs per
GPU; `--mem` is per node, `--mem-per-cpu` per CPU, `--mem-per-gpu` per GPU, otherwise
`def_mem_per_cpu_mb` per CPU; `--mem=0` is a whole node's memory; `--exclusive` takes
whole nodes' CPUs. A time limit above the partition's MaxTime is accepted (the job
pends with PartitionTimeLimit, as with EnforcePartLimits=NO); a request no node of
the partition can ever hold is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from batchd.errors import SubmitError
from batchd.server import nofit
from batchd.slurm import arrayspec, dependency, tres
from batchd.slurm.gres import parse_node_gpus

NODE_CONFIG = "Requested node configuration is not available"
GRES_INVALID = "Invalid generic resource (gres) specification"


def _reject(message: str, code: str = "SubmitRejected", detail: str | None = None) -> SubmitError:
    return SubmitError(message, exit_code=1, code=code, detail=detail)


def check_node_names(spec: dict, cluster: dict, overlap: bool = True) -> None:
    """`-w`/`-x` naming a node the cluster does not have: Slurm 22.05 refuses the job with
    `Invalid node name specified` (recorded from the peer for `-w gpu09`, `-x gpu09` and
    `-w vm,gpu09`); a list that does not parse is refused the same way, and so is a node both
    required and excluded (`-w vm -x vm`) unless `overlap` is False (an update)."""
    from batchd.slurm.hostlist import expand

    known = {n["name"] for n in cluster.get("nodes") or []}
    limit = int(cluster.get("max_hostlist_names", 10000))
    for key in ("nodelist", "exclude"):
        if not spec.get(key):
            continue
        try:
            names = expand(str(spec[key]), limit)
        except ValueError:
            raise _reject("Invalid node name specified", "InvalidNodeName") from None
        if any(n not in known for n in names):
            raise _reject("Invalid node name specified", "InvalidNodeName")
    if spec.get("nodelist") and spec.get("exclude") and overlap:
        # `-w vm -x vm` at submit: Slurm 22.05 says the same (recorded); a later `scontrol
        # update ExcNodeList=` that excludes a required node is taken, as in Slurm
        if set(expand(str(spec["nodelist"]), limit)) & set(expand(str(spec["exclude"]), limit)):
            raise _reject("Invalid node name specified", "InvalidNodeName")


def _partition(spec: dict, cluster: dict) -> dict:
    parts = cluster.get("partitions") or []
    want = spec.get("partition")
    if not want:
        for p in parts:
            if p.get("default"):
                return p
        if parts:
            return parts[0]
        raise _reject("No partition specified or system default partition", "InvalidPartition")
    for name in str(want).split(","):
        for p in parts:
            if p["name"] == name:
                return p
    raise _reject("Invalid partition name specified", "InvalidPartition")


def _account(spec: dict, cluster: dict) -> str:
    acct = spec.get("account") or cluster.get("default_account")
    allowed = cluster.get("user_accounts")
    if not acct or acct not in (cluster.get("accounts") or []) or (allowed is not None and acct not in allowed):
        raise _reject("Invalid account or account/partition combination specified", "InvalidAccount")
    return str(acct)


def _qos(spec: dict, cluster: dict) -> str:
    qos = spec.get("qos") or cluster.get("default_qos") or "normal"
    table = cluster.get("qos")
    if table is not None and qos not in table:
        raise _reject("Invalid qos specification", "InvalidQOS")
    return str(qos)


def node_gpu_capacity(node: dict) -> dict[str, int]:
    """GPUs a node offers by request key: "gres/gpu" (every whole GPU and MIG instance, as a
    device), "gres/gpu:TYPE" per GPU model of whole GPUs and per MIG profile (batchd.slurm.gres)."""
    cap: dict[str, int] = {"gres/gpu": 0}
    try:
        inv = parse_node_gpus(node.get("gpus") or [])
    except ValueError:
        return cap
    for c in inv.cards:
        for key in ([f"gres/gpu:{c.type}"] if c.whole else [f"gres/gpu:{m.profile}" for m in c.mig]):
            cap["gres/gpu"] += 1
            cap[key] = cap.get(key, 0) + 1
    return cap


def _gpu_request(spec: dict, tasks: int, nodes: int | None) -> tuple[str | None, str | None, float, float]:
    """(kind, type, per_task_count, job_total) of the GPU request, kind one of
    "gpu", "shard" or None; refuses mixing kinds of GPU options with different types."""
    gres = [g for g in (spec.get("gres") or []) if g]
    for g in gres:
        if g.get("name") not in ("gpu", "shard"):
            raise _reject(GRES_INVALID, "InvalidGres")
    gpu_items = [g for g in gres if g["name"] == "gpu"]
    shard_items = [g for g in gres if g["name"] == "shard"]
    if len(gpu_items) > 1:
        raise _reject(GRES_INVALID, "InvalidGres")
    n_nodes = nodes or 1
    if shard_items:
        if gpu_items or spec.get("gpus") or spec.get("gpus_per_node") or spec.get("gpus_per_task"):
            raise _reject(GRES_INVALID, "InvalidGres")
        total = int(shard_items[0]["count"]) * n_nodes
        return "shard", None, total / tasks, total
    per_node = None
    if gpu_items:
        per_node = {"type": gpu_items[0].get("type"), "count": int(gpu_items[0]["count"])}
    if spec.get("gpus_per_node"):
        if per_node is not None:
            raise _reject(GRES_INVALID, "InvalidGres")
        per_node = spec["gpus_per_node"]
    if per_node is not None:
        total = int(per_node["count"]) * n_nodes
        return "gpu", per_node.get("type"), total / tasks, total
    if spec.get("gpus_per_task"):
        g = spec["gpus_per_task"]
        return "gpu", g.get("type"), float(g["count"]), int(g["count"]) * tasks
    if spec.get("gpus"):
        g = spec["gpus"]
        return "gpu", g.get("type"), int(g["count"]) / tasks, int(g["count"])
    return None, None, 0.0, 0


def _tasks_and_nodes(spec: dict) -> tuple[int, int | None, int | None]:
    nodes = spec.get("nodes_min")
    per_node = spec.get("ntasks_per_node")
    tasks = spec.get("ntasks")
    if tasks is None:
        if per_node and nodes:
            tasks = per_node * nodes
        elif per_node:
            tasks = per_node
        else:
            tasks = nodes or 1
    if tasks < 1:
        raise _reject("Invalid number of tasks", "InvalidRequest")
    if nodes is not None and nodes > tasks:
        tasks = nodes
    return int(tasks), nodes, per_node


TIME_INVALID = "Requested time limit is invalid (missing or exceeds some limit)"


def _time(spec: dict, part: dict, qos_rec: dict) -> tuple[int | None, int | None]:
    """(time limit, time min) in seconds: a given limit is > 0 or -1 (UNLIMITED); None
    takes the partition's DefaultTime; without one the limit stays None (Slurm's NO_VAL:
    sacct shows Partition_Limit) and the controller sets the partition's MaxTime at start."""
    t = spec.get("time_limit_s")
    for key in ("time_limit_s", "time_min_s"):
        v = spec.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v == 0 or v < -1):
            raise _reject(TIME_INVALID, "InvalidTimeLimit")
    if t is None:
        t = part.get("default_time_s")
    upper = part.get("max_time_s", -1) if t is None else t  # what the job may run at most
    upper = -1 if upper is None else upper
    tmin = spec.get("time_min_s")
    if tmin is not None and upper != -1 and tmin != -1 and tmin > upper:
        raise _reject(TIME_INVALID, "InvalidTimeLimit")
    wall = qos_rec.get("max_wall_s")
    if wall is not None and wall >= 0 and (upper == -1 or upper > wall):
        if spec.get("time_limit_s") is not None:
            raise _reject(TIME_INVALID, "InvalidTimeLimit")
        t = wall  # no -t: the QOS's MaxWall bounds the partition's DefaultTime or MaxTime
    return (None if t is None else int(t)), tmin


def _fit(nodes: list[dict], per_task: dict[str, float], mem_node: int | None, tasks: int,
         n_nodes: int | None, tasks_per_node: int | None) -> bool:
    """Whether the partition's nodes could ever hold the job (ignoring what runs now)."""
    hosts = []
    for nd in nodes:
        cap: dict[str, float] = {"cpu": nd.get("cpus", 0), "mem": nd.get("memory_mb", 0)}
        cap.update(node_gpu_capacity(nd))
        k = tasks
        for key, need in per_task.items():
            if need <= 0:
                continue
            if key == "gres/shard" or (key == "mem" and mem_node is not None):
                continue  # shards are checked by the caller, per-node memory below
            have = cap.get(key, 0)
            k = min(k, int(math.floor(have / need + 1e-9)))
        if mem_node is not None and mem_node > nd.get("memory_mb", 0):
            k = 0
        hosts.append(k)
    hosts.sort(reverse=True)
    if n_nodes:
        if len(hosts) < n_nodes:
            return False
        need_each = tasks_per_node or math.ceil(tasks / n_nodes)
        return all(h >= need_each for h in hosts[:n_nodes])
    if tasks_per_node:
        return sum(min(h, tasks_per_node) for h in hosts if h >= tasks_per_node) >= tasks
    return sum(hosts) >= tasks


def _refuse_no_fit(spec: dict, cluster: dict, part: dict, pnodes: list[dict], per_task: dict[str, float],
                   mem_node: int | None, tasks: int, nodes: int | None, tasks_per_node: int | None) -> None:
    """Refuse a request no node of the partition can hold with Slurm's words and batchd's
    reason (`batchd.server.nofit`): GPUs and CPUs before memory, so that `-c 65` is not called a
    memory problem because its default memory per CPU is too much too."""
    if not pnodes:
        raise _reject(NODE_CONFIG, "NodeConfigUnavailable")
    per_node_tasks = tasks_per_node or (math.ceil(tasks / nodes) if nodes else tasks)
    others = [n for n in cluster.get("nodes") or [] if n["name"] not in set(part.get("nodes") or [])]
    why = nofit.explain(pnodes, others, per_task, tasks, bool(nodes or tasks_per_node), per_node_tasks,
                        part["name"])
    if why is not None and why[0] == "mem":
        detail = why[1]
        if mem_node is None and not any(spec.get(k) is not None for k in ("mem_per_cpu_mb", "mem_per_gpu_mb")):
            detail += (f"; {int(cluster.get('def_mem_per_cpu_mb', 1024))}M per CPU by default, "
                       "--mem or --mem-per-cpu asks for less")
        raise _reject(NODE_CONFIG, "MemoryNotSatisfiable", detail)
    raise _reject(NODE_CONFIG, "NodeConfigUnavailable", why[1] if why else None)


def _tres(cluster: dict, totals: dict[str, float]) -> tuple[str, float]:
    """(ReqTRES string in scontrol order, billing) with the cluster's billing weights."""
    weights = tres.parse_billing_weights(cluster.get("billing_weights") or "")
    bill = tres.billing(weights, totals)
    return tres.format_tres(totals, bill), bill


def resolve(spec: dict, cluster: dict, user: str, uid: int,
            lookup_state: Callable[[int, int | None], Any] | None = None) -> dict:
    """Check `spec` against `cluster` for `user`/`uid` and return the resolved request
    (module docstring), or raise SubmitError with Slurm's message. `lookup_state`
    (see `batchd.slurm.dependency.evaluate`), when given, lets `afterok`/`afternotok` on an
    unknown job be refused as Slurm does."""
    part = _partition(spec, cluster)
    check_node_names(spec, cluster)
    # batchd has no reservations and no licenses: any name is unknown (Slurm 22.05's words)
    if spec.get("reservation"):
        raise _reject("Requested reservation is invalid", "InvalidReservation")
    if spec.get("licenses"):
        raise _reject("Invalid license specification", "InvalidLicense")
    account = _account(spec, cluster)
    qos = _qos(spec, cluster)
    qos_rec = (cluster.get("qos") or {}).get(qos) or {}
    time_limit_s, time_min_s = _time(spec, part, qos_rec)
    tasks, nodes, tasks_per_node = _tasks_and_nodes(spec)
    pnodes = [n for n in cluster.get("nodes") or [] if n["name"] in set(part.get("nodes") or [])]
    if nodes is not None and nodes > len(pnodes):
        raise _reject("Node count specification invalid", "InvalidNodeCount")
    kind, gtype, gpu_per_task, gpu_total = _gpu_request(spec, tasks, nodes)
    per_task: dict[str, float] = {}
    if kind == "shard":
        if not cluster.get("shard_per_gpu"):
            raise _reject(GRES_INVALID, "InvalidGres")
        per_task["gres/shard"] = gpu_per_task
    elif kind == "gpu":
        per_task[f"gres/gpu:{gtype}" if gtype else "gres/gpu"] = gpu_per_task
    cpus = spec.get("cpus_per_task") or 1
    if spec.get("cpus_per_gpu") and kind == "gpu":
        cpus = max(1, math.ceil(spec["cpus_per_gpu"] * gpu_total / tasks))
    per_node_tasks = tasks_per_node or (math.ceil(tasks / nodes) if nodes else tasks)
    if spec.get("exclusive") and pnodes:
        cpus = max(cpus, min(n.get("cpus", 0) for n in pnodes) // max(1, per_node_tasks))
    per_task["cpu"] = cpus
    mem_node = None
    def_mem = int(cluster.get("def_mem_per_cpu_mb", 1024))
    if spec.get("mem_mb") is not None:
        mem_node = int(spec["mem_mb"])
        if mem_node == 0 and pnodes:
            mem_node = min(n.get("memory_mb", 0) for n in pnodes)
        per_task["mem"] = mem_node / per_node_tasks
    elif spec.get("mem_per_cpu_mb") is not None:
        per_task["mem"] = int(spec["mem_per_cpu_mb"]) * cpus
    elif spec.get("mem_per_gpu_mb") is not None and kind == "gpu":
        per_task["mem"] = int(spec["mem_per_gpu_mb"]) * gpu_per_task
    else:
        per_task["mem"] = def_mem * cpus
    if mem_node is not None and pnodes and mem_node > max(n.get("memory_mb", 0) for n in pnodes):
        raise _reject(NODE_CONFIG, "MemoryNotSatisfiable")
    if kind == "shard":
        shards = cluster["shard_per_gpu"]
        if gpu_per_task * per_node_tasks > shards:
            raise _reject(NODE_CONFIG, "NodeConfigUnavailable")
    if not pnodes or not _fit(pnodes, per_task, mem_node, tasks, nodes, tasks_per_node):
        _refuse_no_fit(spec, cluster, part, pnodes, per_task, mem_node, tasks, nodes, tasks_per_node)
    task_ids, max_running = None, None
    if spec.get("array"):
        try:
            task_ids, max_running = arrayspec.parse(spec["array"], int(cluster.get("max_array_size", 1001)))
        except arrayspec.ArraySpecError as e:
            raise _reject(e.message, "InvalidArray") from None
    dep = None
    if spec.get("dependency"):
        try:
            dep = dependency.parse(spec["dependency"])
            if lookup_state is not None:
                dependency.check_known(dep, lookup_state)
        except dependency.DependencyError as e:
            raise _reject(e.message, "DependencyProblem") from None
    n_alloc_nodes = nodes or 1
    mem_total = mem_node * n_alloc_nodes if mem_node is not None else per_task["mem"] * tasks
    totals: dict[str, float] = {"cpu": cpus * tasks, "mem": mem_total, "node": n_alloc_nodes}
    if kind == "gpu":
        totals["gres/gpu"] = gpu_total
        if gtype:
            totals[f"gres/gpu:{gtype}"] = gpu_total
    elif kind == "shard":
        totals["gres/shard"] = gpu_total
    # ReqTRES as Slurm records it: the request before --cpus-per-gpu and --exclusive widen the
    # CPUs (and the default memory with them) at allocation (recorded from the peer:
    # --cpus-per-gpu=4 --gpus=2 -> cpu=1,mem=1G; --exclusive -> cpu=1,mem=1G)
    cpus_asked = int(spec.get("cpus_per_task") or 1)
    req_totals = dict(totals, cpu=cpus_asked * tasks)
    if mem_node is None and cpus_asked != cpus:
        if spec.get("mem_per_cpu_mb") is not None:
            req_totals["mem"] = int(spec["mem_per_cpu_mb"]) * cpus_asked * tasks
        elif not (spec.get("mem_per_gpu_mb") is not None and kind == "gpu"):
            req_totals["mem"] = def_mem * cpus_asked * tasks
    tres_req, bill = _tres(cluster, req_totals)
    per_task = {k: (int(v) if float(v).is_integer() else v) for k, v in per_task.items()}
    if int(spec.get("nice") or 0) < 0 and uid != 0 and not cluster.get("user_is_admin"):
        # only operators may raise a job's priority with a negative nice
        raise _reject("Invalid nice value", "InvalidNice")
    requeue = spec.get("requeue")
    if requeue is None:
        requeue = bool(cluster.get("job_requeue", True))
    return {
        "partition": part["name"], "account": account, "qos": qos,
        "time_limit_s": time_limit_s, "time_min_s": time_min_s, "name": spec.get("name") or "sbatch",
        "user": user, "uid": uid,
        "tasks": tasks, "nodes": nodes, "tasks_per_node": tasks_per_node, "per_task": per_task,
        "cpus": cpus * tasks, "mem_mb": int(math.ceil(mem_total)), "gpus": int(gpu_total) if kind == "gpu" else 0,
        "gpu_type": gtype if kind == "gpu" else None, "exclusive": bool(spec.get("exclusive")),
        "tres_req": tres_req, "tres_req_dict": totals, "billing": bill,
        "begin_time": spec.get("begin_time"), "hold": bool(spec.get("hold")),
        "nice": int(spec.get("nice") or 0), "requeue": requeue,
        "array_task_ids": task_ids, "array_max_running": max_running, "dependency": dep,
        **({"time_limit_partition": True} if time_limit_s is None else {}),
    }
