"""Efficiency sampling of running jobs (the node agent calls these; `batchd eff` reads them).

`sample_job(pids, readings=...)` reads a job's process tree with psutil (CPU % since the
previous sample of the same processes, resident memory) and, given the job's GPU devices
and an NVML sampler (`batchd.node.gpusample.GpuSampler`), their utilisation and memory. The
previous readings belong to the caller, one `CpuReadings` per run (`batchd.node.runsampler`
keeps them and drops a run's when it ends); a sample leaves in them only the processes it
saw, so the readings of ended processes are forgotten and the dict never outgrows the
job's live process tree.
`record_sample(store, job_id, run, sample)` folds one sample into the run's running
averages and peaks, and tracks how long the job has held its GPUs at 0 % (the report
flags runs above `zero_gpu_s`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psutil

from batchd.store import Store
from batchd.store import accounting as sql

log = logging.getLogger(__name__)

#: one run's previous CPU readings: pid -> (process create time, cumulative CPU seconds,
#: wall time of that reading)
CpuReadings = dict[int, tuple[float, float, float]]


def _tree(pids: list[int]) -> list[psutil.Process]:
    procs: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs[p.pid] = p
            for c in p.children(recursive=True):
                procs[c.pid] = c
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return list(procs.values())


def sample_job(pids: list[int], devices: list[str] | None = None, gpu_sampler: Any = None,
               now: float | None = None, readings: CpuReadings | None = None) -> dict[str, Any]:
    """One sample of a job: {"time", "cpu_pct" (100 = one core busy, over the time since
    the previous sample of these processes in `readings`; 0 on the first, and always 0
    without `readings`), "rss_mb", "nprocs", "gpu_util_pct" (mean over `devices`, None
    without NVML or devices), "gpu_mem_mb" (sum)}. `pids` are the job's top processes;
    their descendants are included. `readings` (the caller's, one per run) is updated in
    place and afterwards holds exactly the processes of this sample."""
    now = time.time() if now is None else now
    last: CpuReadings = readings if readings is not None else {}
    fresh: CpuReadings = {}
    cpu_pct = 0.0
    rss = 0.0
    procs = _tree(pids)
    seen = set()
    for p in procs:
        try:
            with p.oneshot():
                t = p.cpu_times()
                cpu = t.user + t.system
                created = p.create_time()
                rss += p.memory_info().rss / (1024 * 1024)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        seen.add(p.pid)
        prev = last.get(p.pid)
        if prev is not None and prev[0] == created and now > prev[2]:
            cpu_pct += max(0.0, cpu - prev[1]) / (now - prev[2]) * 100.0
        fresh[p.pid] = (created, cpu, now)
    # the processes that ended since the last sample are forgotten here
    last.clear()
    last.update(fresh)
    out: dict[str, Any] = {"time": now, "cpu_pct": round(cpu_pct, 2), "rss_mb": round(rss, 1),
                           "nprocs": len(seen), "gpu_util_pct": None, "gpu_mem_mb": None}
    if devices and gpu_sampler is not None:
        try:
            g = gpu_sampler.sample(devices, set(seen) or None)
        except Exception as e:  # noqa: BLE001 - NVML trouble never stops sampling CPUs
            log.warning("gpu sample failed devices=%s error=%s", ",".join(devices), e)
            return out
        utils, mem = [], 0.0
        per_device: dict[str, dict[str, float | None]] = {}
        for uuid, d in g.get("devices", {}).items():
            u = d.get("util_pct") if d.get("util_pct") is not None else d.get("job_sm_pct")
            if u is not None:
                utils.append(float(u))
            m = d.get("job_mem_mib") if d.get("job_mem_mib") is not None else d.get("mem_used_mib")
            mem += float(m or 0.0)
            per_device[str(uuid)] = {"util_pct": None if u is None else float(u),
                                     "mem_mib": None if m is None else float(m)}
        out["gpu_devices"] = per_device
        if utils:
            out["gpu_util_pct"] = round(sum(utils) / len(utils), 2)
        out["gpu_mem_mb"] = round(mem, 1)
    return out


def _merge(old: dict[str, Any] | None, s: dict[str, Any]) -> dict[str, Any]:
    t = float(s["time"])
    util = s.get("gpu_util_pct")
    if old is None:
        zero = 0.0
        return {"samples": 1, "first_time": t, "last_time": t, "cpu_pct_sum": float(s.get("cpu_pct") or 0.0),
                "cpu_pct_max": float(s.get("cpu_pct") or 0.0), "rss_mb_max": float(s.get("rss_mb") or 0.0),
                "gpu_samples": 0 if util is None else 1, "gpu_util_sum": float(util or 0.0),
                "gpu_util_max": float(util or 0.0), "gpu_mem_max_mb": float(s.get("gpu_mem_mb") or 0.0),
                "gpu_zero_s": zero, "gpu_zero_max_s": zero}
    new = dict(old)
    new["samples"] += 1
    new["last_time"] = max(old["last_time"], t)
    new["cpu_pct_sum"] += float(s.get("cpu_pct") or 0.0)
    new["cpu_pct_max"] = max(old["cpu_pct_max"], float(s.get("cpu_pct") or 0.0))
    new["rss_mb_max"] = max(old["rss_mb_max"], float(s.get("rss_mb") or 0.0))
    if util is not None:
        new["gpu_samples"] += 1
        new["gpu_util_sum"] += float(util)
        new["gpu_util_max"] = max(old["gpu_util_max"], float(util))
        new["gpu_mem_max_mb"] = max(old["gpu_mem_max_mb"], float(s.get("gpu_mem_mb") or 0.0))
        # a sample's utilisation covers the interval before it (NVML reports an average
        # over its last period), so a stretch at 0 % grows by the time since the previous sample
        new["gpu_zero_s"] = old["gpu_zero_s"] + max(0.0, t - old["last_time"]) if util <= 0.0 else 0.0
        new["gpu_zero_max_s"] = max(old["gpu_zero_max_s"], new["gpu_zero_s"])
    return new


def record_sample(store: Store, job_id: int, run: int, sample: dict[str, Any]) -> dict[str, Any]:
    """Fold `sample` (from `sample_job`) into the run's aggregates; one transaction.
    Returns the new aggregates."""
    return sql.update_efficiency(store, job_id, run, lambda old: _merge(old, sample))


def summary(eff: dict[str, Any] | None) -> dict[str, float | None]:
    """What a usage record keeps of a run's samples: {"gpu_util_pct" (mean), "gpu_mem_mb"
    (peak), "max_rss_mb" (peak), "cpu_pct" (mean)}; None where never measured."""
    if not eff:
        return {"gpu_util_pct": None, "gpu_mem_mb": None, "max_rss_mb": None, "cpu_pct": None}
    g = eff["gpu_samples"]
    return {"gpu_util_pct": round(eff["gpu_util_sum"] / g, 2) if g else None,
            "gpu_mem_mb": eff["gpu_mem_max_mb"] if g else None,
            "max_rss_mb": eff["rss_mb_max"], "cpu_pct": round(eff["cpu_pct_sum"] / eff["samples"], 2)}
