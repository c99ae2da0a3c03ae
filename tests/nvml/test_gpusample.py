"""batchd.node.gpusample against the fake pynvml."""

import json

import pynvml
import pytest
from fake_pynvml import FakeGpu, FakeMig, FakeNvml, h200

from batchd.node import gpusample


def _fake(**kw):
    f = FakeNvml(**kw)
    f.nvmlInit()
    return f


def test_device_level_only_without_pids():
    g = h200(0, util=(87, 40), used_mb=5123, procs=[(10, 5000)], proc_util=[(10, 85, 30)])
    f = _fake(gpus=[g])
    r = gpusample.sample(f, [g.uuid], None)
    d = r["devices"][g.uuid]
    assert d == {"util_pct": 87, "mem_util_pct": 40, "mem_used_mib": 5123, "mem_total_mib": 143771,
                 "error": None}
    assert "nvmlDeviceGetComputeRunningProcesses" not in f.calls
    assert r["cost_ms"] >= 0
    json.dumps(r)


def test_shared_device_per_process():
    g = h200(0, util=(95, 50), used_mb=30000,
             procs=[(10, 5000), (11, 3000), (99, 20000)],
             proc_util=[(10, 40, 10), (11, 20, 5), (99, 30, 20)])
    f = _fake(gpus=[g])
    d = gpusample.sample(f, [g.uuid], {10, 11})["devices"][g.uuid]
    assert d["processes"] == {"10": {"mem_mib": 5000.0, "sm_pct": 40}, "11": {"mem_mib": 3000.0, "sm_pct": 20}}
    assert d["job_mem_mib"] == 8000.0 and d["job_sm_pct"] == 60
    assert d["other_pids"] == [99]
    assert d["util_pct"] == 95


def test_process_utilization_empty_quirk_and_not_found():
    g = h200(0, procs=[(10, 512)], proc_util=[])        # fake raises NVMLError(NVML_SUCCESS)
    f = _fake(gpus=[g])
    d = gpusample.sample(f, [g.uuid], {10})["devices"][g.uuid]
    assert d["processes"] == {"10": {"mem_mib": 512.0, "sm_pct": None}}
    assert d["job_sm_pct"] == 0 and d["error"] is None
    f.fail[("nvmlDeviceGetProcessUtilization", 0)] = pynvml.NVMLError_NotFound
    d = gpusample.sample(f, [g.uuid], {10})["devices"][g.uuid]
    assert d["job_sm_pct"] == 0 and d["error"] is None


def test_mig_device_memory_but_no_utilization():
    mig = FakeMig("MIG-1", "NVIDIA H200 MIG 1g.18gb", 1, 1, 16384, used_mb=700, procs=[(5, 600), (6, 90)])
    g = h200(0, mig=(1, 1), migs={0: mig})
    f = _fake(gpus=[g])
    d = gpusample.sample(f, ["MIG-1"], {5})["devices"]["MIG-1"]
    assert d["util_pct"] is None and d["mem_used_mib"] == 700 and d["mem_total_mib"] == 16384
    assert d["processes"] == {"5": {"mem_mib": 600.0, "sm_pct": None}}
    assert d["job_sm_pct"] is None           # NVML cannot say for MIG: n/a, not 0
    assert d["other_pids"] == [6] and d["error"] is None


def test_unknown_uuid_and_lost_gpu_do_not_raise():
    g0, g1 = h200(0, util=(10, 1)), h200(1)
    f = _fake(gpus=[g0, g1], fail={("nvmlDeviceGetMemoryInfo", 1): pynvml.NVMLError_GpuIsLost,
                                   ("nvmlDeviceGetUtilizationRates", 1): pynvml.NVMLError_GpuIsLost})
    r = gpusample.sample(f, [g0.uuid, g1.uuid, "GPU-nope"], None)
    assert r["devices"][g0.uuid]["util_pct"] == 10
    assert "GpuIsLost" in r["devices"][g1.uuid]["error"] and r["devices"][g1.uuid]["util_pct"] is None
    assert "NotFound" in r["devices"]["GPU-nope"]["error"]


def test_library_mismatch_on_process_list_is_caught():
    g = h200(0)
    f = _fake(gpus=[g], fail={("nvmlDeviceGetComputeRunningProcesses", 0): pynvml.NVMLLibraryMismatchError})
    d = gpusample.sample(f, [g.uuid], {1})["devices"][g.uuid]
    assert "NVMLLibraryMismatchError" in d["error"] and d["processes"] == {}


def test_sampler_caches_handles_and_advances_timestamps():
    g = FakeGpu(name="NVIDIA H200", uuid="GPU-x", bus="00000000:19:00.0", proc_util=[(3, 50, 1)],
                procs=[(3, 100)])
    f = FakeNvml([g])
    s = gpusample.GpuSampler(f)
    r1 = s.sample(["GPU-x"], {3})
    assert r1["devices"]["GPU-x"]["job_sm_pct"] == 50
    assert s.last_seen_us["GPU-x"] > 0
    s.sample(["GPU-x"], {3})
    assert f.calls.count("nvmlDeviceGetHandleByUUID") == 1
    s.close()
    assert not f.initialised


def test_sampler_without_driver_raises_the_real_error():
    f = FakeNvml([], fail={"nvmlInit": pynvml.NVMLError_DriverNotLoaded})
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        gpusample.GpuSampler(f)
