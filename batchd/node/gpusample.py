"""Per-job GPU utilisation and memory from NVML, read-only.

`sample(nvml, devices, pids)` reads each device (GPU or MIG UUID) once:

- per device (always): `nvmlDeviceGetUtilizationRates` (kernel-busy % and memory-bandwidth %
  over NVML's last sample period; NotSupported on MIG, reported as None) and
  `nvmlDeviceGetMemoryInfo` (used/total MiB; a MIG handle gives the instance's own memory);
- per process (only when `pids` is given, i.e. the device is shared or the caller wants the
  job's own share): `nvmlDeviceGetComputeRunningProcesses` (memory per pid) and
  `nvmlDeviceGetProcessUtilization` (SM % per pid, mean of NVML's samples newer than
  `since_us`; not available on MIG). The job's figures are the sums over its pids;
  processes on the device that are not the job's are listed in `other_pids` (foreign or
  leaked usage).

The caller owns NVML's lifetime (`nvmlInit` once per daemon); `GpuSampler` does that and
keeps the last-seen timestamp per device so that successive samples do not overlap.
Nothing here raises for NVML trouble: a device that fails gets `"error"` and None figures.

Cost: `cost_ms` in the result is the wall time of the whole call. Measured on one H200
(driver 580, see docs/gpu-nodes.md "Seen on hardware"); a 15-30 s interval makes it
negligible. Never shell out to nvidia-smi per sample.

Result (JSON-ready, memory in MiB, percentages 0-100, times unix seconds):

    {"time": 1764500000.0, "cost_ms": 0.41,
     "devices": {"GPU-…": {"util_pct": 87, "mem_util_pct": 40, "mem_used_mib": 5123,
                           "mem_total_mib": 143771, "error": None,
                           # only with pids:
                           "processes": {"4242": {"mem_mib": 5000.0, "sm_pct": 85}},
                           "job_mem_mib": 5000.0, "job_sm_pct": 85, "other_pids": [17]}}}
"""

from __future__ import annotations

import time
from typing import Any

MIB = 1024 * 1024


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _proc_util(nvml: Any, h: Any, since_us: int) -> tuple[dict[int, list[int]] | None, int]:
    """Per-pid SM % samples newer than since_us, and the newest timestamp seen. None when
    the device cannot say (MIG, old driver)."""
    try:
        samples = nvml.nvmlDeviceGetProcessUtilization(h, since_us)
    except nvml.NVMLError_NotFound:
        return {}, since_us                 # no sample newer than since_us
    except nvml.NVMLError as e:
        if getattr(e, "value", None) == getattr(nvml, "NVML_SUCCESS", 0):
            return {}, since_us             # binding quirk: no process raises NVMLError(SUCCESS)
        return None, since_us
    out: dict[int, list[int]] = {}
    newest = since_us
    for s in samples:
        out.setdefault(int(s.pid), []).append(int(s.smUtil))
        newest = max(newest, int(s.timeStamp))
    return out, newest


def sample_device(nvml: Any, h: Any, pids: set[int] | None, since_us: int = 0) -> tuple[dict[str, Any], int]:
    """One device's figures (see the module docstring) and the newest process-sample
    timestamp (µs) for the next call's `since_us`."""
    d: dict[str, Any] = {"util_pct": None, "mem_util_pct": None, "mem_used_mib": None,
                         "mem_total_mib": None, "error": None}
    try:
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        d["mem_used_mib"] = int(mem.used) // MIB if mem.used is not None else None
        d["mem_total_mib"] = int(mem.total) // MIB if mem.total is not None else None
    except nvml.NVMLError as e:
        d["error"] = f"memory: {_err(e)}"
    try:
        u = nvml.nvmlDeviceGetUtilizationRates(h)
        d["util_pct"], d["mem_util_pct"] = int(u.gpu), int(u.memory)
    except nvml.NVMLError_NotSupported:
        pass                                # MIG: no device utilisation from NVML
    except nvml.NVMLError as e:
        d["error"] = d["error"] or f"utilization: {_err(e)}"
    newest = since_us
    if pids is None:
        return d, newest
    procs: dict[str, dict[str, Any]] = {}
    others: list[int] = []
    try:
        running = nvml.nvmlDeviceGetComputeRunningProcesses(h)
    except nvml.NVMLError as e:
        running = []
        d["error"] = d["error"] or f"processes: {_err(e)}"
    except Exception as e:  # noqa: BLE001 - NVMLLibraryMismatchError is no NVMLError
        running = []
        d["error"] = d["error"] or f"processes: {_err(e)}"
    for p in running:
        pid = int(p.pid)
        if pid not in pids:
            others.append(pid)
            continue
        used = p.usedGpuMemory
        entry = procs.setdefault(str(pid), {"mem_mib": 0.0, "sm_pct": None})
        if used is not None:
            entry["mem_mib"] += int(used) / MIB
    util, newest = _proc_util(nvml, h, since_us)
    if util is not None:
        for pid, vals in util.items():
            if pid in pids:
                entry = procs.setdefault(str(pid), {"mem_mib": 0.0, "sm_pct": None})
                entry["sm_pct"] = round(sum(vals) / len(vals))
    d["processes"] = procs
    d["job_mem_mib"] = round(sum(p["mem_mib"] for p in procs.values()), 1)
    d["job_sm_pct"] = (None if util is None
                       else min(100, sum(p["sm_pct"] or 0 for p in procs.values())))
    d["other_pids"] = sorted(set(others))
    return d, newest


def sample(nvml: Any, devices: list[str], pids: set[int] | None = None, *,
           since_us: int | dict[str, int] = 0, handles: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sample the devices named by UUID (`GPU-…` or `MIG-…`); `pids` are the job's
    processes (host pid namespace) or None for device-level figures only. `since_us` is the
    per-process sample cut-off (µs, NVML's clock; one value or one per UUID; 0 = all
    samples NVML still holds). `handles` is an optional UUID -> handle cache, filled in.
    NVML must be initialised by the caller."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"time": time.time(), "devices": {}, "last_seen_us": {}}
    for uuid in devices:
        h = handles.get(uuid) if handles is not None else None
        if h is None:
            try:
                h = nvml.nvmlDeviceGetHandleByUUID(uuid)
            except Exception as e:  # noqa: BLE001 - unknown UUID, GPU lost, no NVML
                out["devices"][uuid] = {"util_pct": None, "mem_util_pct": None, "mem_used_mib": None,
                                        "mem_total_mib": None, "error": f"handle: {_err(e)}"}
                continue
            if handles is not None:
                handles[uuid] = h
        since = since_us.get(uuid, 0) if isinstance(since_us, dict) else since_us
        out["devices"][uuid], out["last_seen_us"][uuid] = sample_device(nvml, h, pids, since)
    out["cost_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return out


class GpuSampler:
    """Holds one NVML session, the handle cache and per-device last-seen timestamps, so
    that each `sample()` covers only the time since the previous one."""

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml  # type: ignore[import-untyped]
            nvml = pynvml
        self.nvml = nvml
        self.nvml.nvmlInit()        # raises NVMLError when there is no driver: caller decides
        self.handles: dict[str, Any] = {}
        self.last_seen_us: dict[str, int] = {}

    def sample(self, devices: list[str], pids: set[int] | None = None) -> dict[str, Any]:
        """`sample()` with this sampler's NVML session, cache and timestamps."""
        r = sample(self.nvml, devices, pids, since_us=self.last_seen_us, handles=self.handles)
        self.last_seen_us.update(r["last_seen_us"])
        return r

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
