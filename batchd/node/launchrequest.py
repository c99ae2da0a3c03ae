"""The LaunchRequest of a job's run, built from its stored record (spec, request,
allocation) and the daemon's config: environment, output paths, signal, limits.

Pure of side effects but for reading: `launch_request` reads the user's home directory
(pwd) and, only when `gpu_env = "uuid"`, an MPS shard job or systemd isolation need
them, the nodes' GPU inventories from the store. It raises on a record a request
cannot be built from (`launcher.LaunchError` for what the socket's checks would have
refused, any other exception for data it cannot read); the node agent then fails the
job (JobLaunchFailure). It never launches anything.
"""

from __future__ import annotations

import os
import pwd
import signal as _signal
from typing import Any

from batchd.config import Config
from batchd.model import Job
from batchd.node import isolation, jobenv, launcher
from batchd.slurm import filepattern
from batchd.slurm.gres import shard_card
from batchd.store import Store

_VALID_SIGNALS = {int(s) for s in _signal.valid_signals()}


def launch_request(j: Job, cfg: Config, store: Store, isolation_mode: str) -> launcher.LaunchRequest:
    """The LaunchRequest of the job's current run, from its stored spec; raises on a
    spec it cannot be built from (the caller fails the job)."""
    alloc = j.allocation or {}
    node = next(iter(alloc))
    spec = j.spec
    view = job_dict(j, cfg)
    mps = cfg.mps and bool(alloc[node].get("shards"))
    # the nodes' GPU inventories, read once, for what needs more than the allocation
    inv = ({n.name: n.gpus for n in store.list_nodes()}
           if cfg.gpu_env == "uuid" or mps or isolation_mode == "systemd" else {})
    if cfg.gpu_env == "uuid":
        alloc = jobenv.with_gpu_uuids(alloc, inv)
    env = jobenv.full_environment(spec, view, alloc, node, cfg.cluster_name)
    if mps:
        # MPS limits for a shard job: its share of the card its shards are on
        card = shard_card(alloc[node])
        mem = next((g.get("memory_mb") for g in inv.get(node, [])
                    if isinstance(g, dict) and g.get("index") == card), None)
        env.update(jobenv.mps_environment(int(alloc[node]["shards"]), cfg.shard_per_gpu,
                                          int(mem) if mem else None))
    workdir = spec.get("workdir") or "/"
    out = _path(filepattern.expand_pattern(spec.get("output") or filepattern.default_output(view), view, node), workdir)
    err_pat = spec.get("error")
    err = _path(filepattern.expand_pattern(err_pat, view, node), workdir) if err_pat else out
    inp = spec.get("input")
    try:
        pw = pwd.getpwuid(j.uid)
        home = pw.pw_dir
    except KeyError:
        home = "/"
    uid, gid = (j.uid, j.gid) if os.getuid() == 0 else (os.getuid(), os.getgid())
    sig = spec.get("signal")
    if sig and int(sig["signal"]) not in _VALID_SIGNALS:
        raise launcher.LaunchError(f"invalid signal {sig['signal']!r}")
    if sig and not sig.get("batch_only"):
        # Slurm: --signal without `B:` goes to the job's steps (srun), never to the batch
        # step, whose processes are the script and what it starts directly (the steps'
        # supervisors time it: batchd.node.steprunner.step_signal)
        sig = None
    req = launcher.LaunchRequest(
        job_id=j.id, run=j.restarts, user=j.user, uid=uid, gid=gid, groups=None, home=home,
        workdir=workdir, script=spec.get("script", ""), argv=list(spec.get("argv") or []), env=env,
        stdout=out, stderr=err,
        stdin=_path(filepattern.expand_pattern(inp, view, node), workdir) if inp else None,
        open_mode="append" if spec.get("open_mode") == "append" else "truncate",
        time_limit_s=None if j.time_limit_s in (None, -1) else j.time_limit_s,
        kill_wait_s=cfg.kill_wait_s,
        signal=(int(sig["signal"]), int(sig.get("time_s", 60))) if sig else None,
        signal_batch_only=True,
        # without cgroups the node enforces --mem by polling the job's RSS (OUT_OF_MEMORY)
        mem_limit_mb=(int(alloc[node].get("memory_mb") or 0) or None) if cfg.enforce_memory else None,
        node=node,
        isolation="systemd" if isolation_mode == "systemd" else "plain",
        cpu_ids=[int(c) for c in alloc[node].get("cpu_ids") or []] or None,
        devices=isolation.job_devices(alloc[node], inv.get(node)) if isolation_mode == "systemd" else None,
    )
    _check_request(req)
    return req


def job_dict(j: Job, cfg: Config) -> dict[str, Any]:
    r = j.request
    tasks = r.get("array_task_ids") or []  # older records: the array's whole task list
    d: dict[str, Any] = {
        "id": j.id, "array_job_id": j.array_job_id, "array_task_id": j.array_task_id,
        "name": j.name, "user": j.user, "uid": j.uid, "gid": j.gid, "account": j.account,
        "partition": j.partition, "qos": j.qos, "restarts": j.restarts, "time_limit_s": j.time_limit_s,
        "node_list": j.node_list, "submit_host": j.spec.get("submit_host") or os.uname().nodename,
        "nice": j.nice, "priority": j.priority, "gpu_type": r.get("gpu_type"),
        "cluster_name": cfg.cluster_name, "gpu_env": cfg.gpu_env,
        "mem_per_cpu_mb": cfg.def_mem_per_cpu_mb,
    }
    if tasks:
        d.update(array_task_min=min(tasks), array_task_max=max(tasks), array_task_count=len(tasks),
                 # None: jobenv reads the step from the --array text (1-7:2 -> 2; was always 1)
                 array_task_step=r.get("array_step"))
    elif r.get("array_task_count"):
        d.update(array_task_min=r["array_task_min"], array_task_max=r["array_task_max"],
                 array_task_count=r["array_task_count"], array_task_step=r.get("array_step"))
    return d


def _path(p: str, workdir: str) -> str:
    return p if os.path.isabs(p) else os.path.join(workdir, p)


def job_signal(spec: Any) -> int:
    """The job's `--signal` number for preemption; SIGTERM when it has none or a stored
    one that is not a signal the kernel accepts."""
    sig = spec.get("signal") if isinstance(spec, dict) else None
    num = sig.get("signal") if isinstance(sig, dict) else None
    try:
        return int(num) if num is not None and int(num) in _VALID_SIGNALS else int(_signal.SIGTERM)
    except (TypeError, ValueError):
        return int(_signal.SIGTERM)


def _check_request(req: launcher.LaunchRequest) -> None:
    """LaunchError when a stored spec produced a request the supervisor cannot run
    (what the socket's checks would have refused, for jobs stored before them)."""
    if not isinstance(req.script, str) or not all(isinstance(a, str) for a in req.argv):
        raise launcher.LaunchError("the job's script and arguments must be text")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in req.env.items()):
        raise launcher.LaunchError("the job's environment must map names to text")
    for path in (req.stdout, req.stderr, req.stdin, req.workdir):
        if path is not None and (not isinstance(path, str) or "\0" in path):
            raise launcher.LaunchError(f"invalid path {path!r}")
