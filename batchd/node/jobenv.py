"""The environment and file names of a running batch job, as Slurm 22.05 sets them.

Pure (no I/O, no clock): the node agent calls `full_environment` (or
`job_environment` on top of `spec["environment"]`) when it launches a job, and
`batchd.slurm.filepattern.expand_pattern` for its file names.

`job_environment(spec, job, alloc, node, cluster_name)` returns only the variables
batchd adds (the `SLURM_*` output set, `ENVIRONMENT=BATCH`, the GPU device lists);
the exported environment of the submission (`spec["environment"]`, which already holds
`SLURM_EXPORT_ENV`/`SLURM_GET_USER_ENV` when Slurm would set them) goes below it.

Arguments:

- `spec`: the submitted JOB_SPEC (only what the user asked for decides *whether* a
  variable is set: `SLURM_NTASKS` only with `-n`/`--ntasks-per-node`,
  `SLURM_CPUS_PER_TASK` only with `-c`, `SLURM_MEM_PER_NODE` with `--mem`, else
  `SLURM_MEM_PER_CPU`, `SLURM_GPUS` with `--gpus`, ...).
- `job`: `{"id", "array_job_id", "array_task_id", "array_task_min", "array_task_max",
  "array_task_step", "array_task_count", "name", "user", "uid", "gid", "account",
  "partition", "qos", "restarts", "submit_host", "mem_per_cpu_mb" (the default per CPU
  when the job gave no memory option; default 1024), "controller_host" (default: the
  batch node), "gpu_env": "index" | "uuid"}`; missing array keys are computed from
  `spec["array"]` when `array_task_id` is set.
- `alloc`: `{node_name: {"tasks", "cpus", "memory_mb", "gpus": [index | "index:MIG-uuid"],
  "gpu_uuids": [str] (optional, for gpu_env "uuid"), "shards": int (optional), "shard_gpus":
  [index] (the card the shards are on; the older single "shard_gpu" is read too)}}`, node
  order = the order of the job's node list; `alloc["gpu_type"]` is ignored here.
- `node`: the node the batch script runs on (the first of the allocation).

Not set here: `SLURM_TASK_PID` (the pid of the batch shell: the launcher adds it once
it has forked) and `PWD`/`SHLVL` (the shell's).
"""

from __future__ import annotations

from typing import Any

from batchd.slurm.gres import shard_card
from batchd.slurm.hostlist import compress

WORKING_CLUSTER_TAIL = "6817:9728:109"  # slurmctld port, protocol version, select plugin id


compress_hostlist = compress  # Slurm's host-list form (batchd.slurm.hostlist)


def compress_counts(values: list[int]) -> str:
    """Slurm's repeated-count form: [2, 2, 2, 1] -> `2(x3),1`."""
    out = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        n = j - i + 1
        out.append(str(values[i]) if n == 1 else f"{values[i]}(x{n})")
        i = j + 1
    return ",".join(out)


def _gpu_str(g: dict | None) -> str:
    if not g:
        return ""
    return f"{g['type']}:{g['count']}" if g.get("type") else str(g["count"])


def _array_step(spec: dict) -> int:
    raw = (spec.get("array") or "").partition("%")[0]
    if "," not in raw and ":" in raw:
        try:
            return int(raw.rpartition(":")[2])
        except ValueError:
            return 1
    return 1


def _array_ids(spec: dict) -> list[int]:
    from batchd.slurm import arrayspec

    try:
        return arrayspec.parse(spec.get("array") or "")[0]
    except arrayspec.ArraySpecError:
        return []


def with_gpu_uuids(alloc: dict, inventories: dict[str, list]) -> dict:
    """A copy of `alloc` whose nodes carry `gpu_uuids` (one per whole GPU index, in order)
    and `shard_gpu_uuid` (the card of a shard job), from each node's inventory (its GPU
    dicts with "index" and "uuid"), for `gpu_env = "uuid"`. Unknown indices are left out
    (CUDA_VISIBLE_DEVICES then falls back to the index)."""
    out = {}
    for node, a in alloc.items():
        by_index = {int(g["index"]): g.get("uuid") for g in inventories.get(node) or []
                    if isinstance(g, dict) and "index" in g}
        a = dict(a)
        whole = [by_index.get(int(g)) for g in a.get("gpus") or [] if ":" not in str(g)]
        if whole and all(whole) and len(whole) == len(a.get("gpus") or []):
            a["gpu_uuids"] = whole
        card = shard_card(a)
        if card is not None and by_index.get(card):
            a["shard_gpu_uuid"] = by_index[card]
        out[node] = a
    return out


def _devices(entry: dict, gpu_env: str) -> tuple[list[str], list[str]]:
    """(SLURM_JOB_GPUS indices, CUDA_VISIBLE_DEVICES items) of one node's allocation."""
    idx: list[str] = []
    vis: list[str] = []
    uuids = entry.get("gpu_uuids") or []
    for k, g in enumerate(entry.get("gpus") or []):
        s = str(g)
        if ":" in s:
            i, _, dev = s.partition(":")
            idx.append(i)
            vis.append(dev)
        else:
            idx.append(s)
            vis.append(uuids[k] if gpu_env == "uuid" and k < len(uuids) else s)
    return idx, vis


def job_environment(spec: dict, job: dict, alloc: dict, node: str, cluster_name: str) -> dict[str, str]:
    """The variables batchd adds to a batch job's environment (module docstring)."""
    nodes = [n for n in alloc if n != "gpu_type" and isinstance(alloc[n], dict)]
    here = alloc.get(node) or {}
    jid = str(job["id"])
    env: dict[str, str] = {
        "ENVIRONMENT": "BATCH",
        "SLURMD_NODENAME": node,
        "SLURM_CLUSTER_NAME": cluster_name,
        "SLURM_CONF": job.get("slurm_conf", "/etc/slurm/slurm.conf"),
        "SLURM_CPUS_ON_NODE": str(here.get("cpus", 1)),
        "SLURM_GTIDS": "0",
        "SLURM_JOBID": jid,
        "SLURM_JOB_ID": jid,
        "SLURM_JOB_ACCOUNT": str(job.get("account", "")),
        "SLURM_JOB_CPUS_PER_NODE": compress_counts([int(alloc[n].get("cpus", 1)) for n in nodes]),
        "SLURM_JOB_GID": str(job.get("gid", "")),
        "SLURM_JOB_UID": str(job.get("uid", "")),
        "SLURM_JOB_USER": str(job.get("user", "")),
        "SLURM_JOB_NODELIST": compress_hostlist(nodes),
        "SLURM_NODELIST": compress_hostlist(nodes),
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_JOB_PARTITION": str(job.get("partition", "")),
        "SLURM_JOB_QOS": str(job.get("qos", "")),
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": str(nodes.index(node)) if node in nodes else "0",
        "SLURM_PROCID": "0",
        "SLURM_NODE_ALIASES": "(null)",
        "SLURM_PRIO_PROCESS": "0",
        "SLURM_SUBMIT_DIR": str(spec.get("submit_dir", "")),
        "SLURM_SUBMIT_HOST": str(job.get("submit_host") or spec.get("submit_host") or ""),
        "SLURM_TASKS_PER_NODE": compress_counts(_tasks_per_node(spec, alloc, nodes)),
        "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        "SLURM_WORKING_CLUSTER": f"{cluster_name}:{job.get('controller_host') or node}:{WORKING_CLUSTER_TAIL}",
    }
    if not spec.get("unnamed"):
        env["SLURM_JOB_NAME"] = str(job.get("name") or spec.get("name") or "")
    if spec.get("reservation"):
        env["SLURM_JOB_RESERVATION"] = str(spec["reservation"])
    if spec.get("cpus_per_task"):
        env["SLURM_CPUS_PER_TASK"] = str(spec["cpus_per_task"])
    ntasks = spec.get("ntasks")
    if ntasks is None and spec.get("ntasks_per_node"):
        ntasks = sum(int(alloc[n].get("tasks", 1)) for n in nodes)
    if ntasks:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(ntasks)
    if spec.get("ntasks_per_node"):
        env["SLURM_NTASKS_PER_NODE"] = str(spec["ntasks_per_node"])
    if spec.get("mem_mb") is not None:
        env["SLURM_MEM_PER_NODE"] = str(spec["mem_mb"])
    elif spec.get("mem_per_gpu_mb") is not None:
        env["SLURM_MEM_PER_GPU"] = str(spec["mem_per_gpu_mb"])
    else:
        env["SLURM_MEM_PER_CPU"] = str(spec.get("mem_per_cpu_mb") or job.get("mem_per_cpu_mb", 1024))
    if spec.get("gpus"):
        env["SLURM_GPUS"] = _gpu_str(spec["gpus"])
    if spec.get("gpus_per_node"):
        env["SLURM_GPUS_PER_NODE"] = _gpu_str(spec["gpus_per_node"])
    if spec.get("gpus_per_task"):
        env["SLURM_GPUS_PER_TASK"] = _gpu_str(spec["gpus_per_task"])
    if spec.get("cpus_per_gpu"):
        env["SLURM_CPUS_PER_GPU"] = str(spec["cpus_per_gpu"])
    idx, vis = _devices(here, job.get("gpu_env", "index"))
    if idx:
        devs = ",".join(vis)
        env["SLURM_JOB_GPUS"] = ",".join(idx)
        env["SLURM_GPUS_ON_NODE"] = str(len(idx))
        for var in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"):
            env[var] = devs
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if here.get("shards"):
        env["SLURM_SHARDS_ON_NODE"] = str(here["shards"])
        card = shard_card(here)
        if not idx and card is not None:
            # a shard job sees the card its shards are on (as Slurm's gres/shard does)
            sidx, svis = _devices({"gpus": [card], "gpu_uuids": here.get("shard_gpu_uuid")
                                   and [here["shard_gpu_uuid"]]}, job.get("gpu_env", "index"))
            env["SLURM_JOB_GPUS"] = ",".join(sidx)
            for var in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"):
                env[var] = ",".join(svis)
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if int(job.get("restarts") or 0) > 0:
        env["SLURM_RESTART_COUNT"] = str(job["restarts"])
    if job.get("array_task_id") is not None:
        ids = [] if job.get("array_task_min") is not None else _array_ids(spec)
        env["SLURM_ARRAY_JOB_ID"] = str(job.get("array_job_id") or jid)
        env["SLURM_ARRAY_TASK_ID"] = str(job["array_task_id"])
        env["SLURM_ARRAY_TASK_COUNT"] = str(job.get("array_task_count") or len(ids))
        env["SLURM_ARRAY_TASK_MAX"] = str(job["array_task_max"] if job.get("array_task_max") is not None
                                          else max(ids, default=job["array_task_id"]))
        env["SLURM_ARRAY_TASK_MIN"] = str(job["array_task_min"] if job.get("array_task_min") is not None
                                          else min(ids, default=job["array_task_id"]))
        env["SLURM_ARRAY_TASK_STEP"] = str(job.get("array_task_step") or _array_step(spec))
    return env


def mps_environment(shards: int, shard_per_gpu: int, card_memory_mb: int | None) -> dict[str, str]:
    """MPS limits for a gres/shard job on a node whose GPUs run the MPS control daemon
    (`mps = true`): its share of the card's SMs (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`,
    shards x 100 / shards per GPU, as Slurm's gres/mps sets it) and of its memory
    (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` for device 0, the one card the job sees), when
    the card's memory is known. Set in the job's environment: guard rails a job could
    unset before it initialises CUDA, not enforcement (see docs/gpu-nodes.md)."""
    if shards <= 0 or shard_per_gpu <= 0:
        return {}
    share = min(1.0, shards / shard_per_gpu)
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, int(100 * share)))}
    if card_memory_mb:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={max(1, int(card_memory_mb * share))}M"
    return env


def full_environment(spec: dict, job: dict, alloc: dict, node: str, cluster_name: str) -> dict[str, str]:
    """`spec["environment"]` with `job_environment(...)` on top: what the batch shell
    gets (the launcher still adds SLURM_TASK_PID)."""
    env = dict(spec.get("environment") or {})
    env.update(job_environment(spec, job, alloc, node, cluster_name))
    return env


def _tasks_per_node(spec: dict[str, Any], alloc: dict[str, Any], nodes: list[str]) -> list[int]:
    """SLURM_TASKS_PER_NODE as Slurm sets it: the tasks placed on each node; for a job that
    gave no task count (-n/--ntasks-per-node), each node's allocated CPUs over its CPUs per
    task (recorded from Slurm 22.05: --exclusive on a 16-CPU node gives 16, --cpus-per-gpu=4
    --gpus=2 gives 8; a plain 1-CPU job 1)."""
    if spec.get("ntasks") or spec.get("ntasks_per_node"):
        return [int(alloc[n].get("tasks", 1)) for n in nodes]
    cpt = int(spec.get("cpus_per_task") or 1)
    return [max(int(alloc[n].get("tasks", 1)), int(float(alloc[n].get("cpus", 0) or 0)) // max(cpt, 1))
            for n in nodes]
