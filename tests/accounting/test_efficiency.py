"""Efficiency sampling: CPU over a job's process tree (psutil), GPU figures from an NVML
sampler, running averages and peaks, and the 0 % GPU stretch that the report flags."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from batchd.accounting.efficiency import record_sample, sample_job, summary
from batchd.store import accounting as sql

# a parent and a forked busy child; both end by themselves after 20 s at the latest
BUSY = ("import os, time\nend = time.time() + 20\nif os.fork() == 0:\n    while time.time() < end: pass\n"
        "    os._exit(0)\ntime.sleep(20)\n")


class FakeGpuSampler:
    """Stands in for batchd.node.gpusample.GpuSampler: fixed figures per device."""

    def __init__(self, util):
        self.util = util
        self.calls = []

    def sample(self, devices, pids=None):
        self.calls.append((list(devices), pids))
        return {"devices": {d: {"util_pct": self.util, "mem_used_mib": 1000.0, "job_mem_mib": 900.0}
                            for d in devices}}


def test_sample_job_counts_the_process_tree():
    p = subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True)
    try:
        time.sleep(0.3)  # the child has forked its busy loop
        readings: dict = {}
        first = sample_job([p.pid], readings=readings)
        time.sleep(1.0)
        gpu = FakeGpuSampler(55.0)
        s = sample_job([p.pid], devices=["GPU-a", "GPU-b"], gpu_sampler=gpu, readings=readings)
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the whole group: the forked child too
        p.wait()
    assert first["cpu_pct"] == 0.0 and s["nprocs"] == 2  # the parent and its forked child
    assert s["cpu_pct"] > 10.0  # a busy loop (the 2 CI cores are shared; an idle tree reads ~0)
    assert s["rss_mb"] > 1.0
    assert s["gpu_util_pct"] == 55.0 and s["gpu_mem_mb"] == 1800.0
    assert gpu.calls[0][1] >= {p.pid}
    assert len(readings) == 2 and p.pid in readings


# a parent that forks a short-lived child, then lives on alone
FORKS_ONCE = ("import os, time\nif os.fork() == 0:\n    time.sleep(0.3)\n    os._exit(0)\n"
              "time.sleep(0.5)\nos.wait()\ntime.sleep(20)\n")


def test_readings_forget_ended_processes():
    """A sample keeps the CPU readings of the processes it saw only: the reading of a
    child that ended is gone at the next sample (the readings never outgrow the tree)."""
    p = subprocess.Popen([sys.executable, "-c", FORKS_ONCE], start_new_session=True)
    try:
        time.sleep(0.15)
        readings: dict = {}
        assert sample_job([p.pid], readings=readings)["nprocs"] == 2
        child = (set(readings) - {p.pid}).pop()
        time.sleep(1.0)  # the child has ended and was reaped
        assert sample_job([p.pid], readings=readings)["nprocs"] == 1
        assert set(readings) == {p.pid} and child not in readings
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    # the whole job gone: nothing is left of it
    assert sample_job([p.pid], readings=readings)["nprocs"] == 0 and readings == {}


def test_without_readings_nothing_is_kept_between_samples():
    s1 = sample_job([os.getpid()])
    s2 = sample_job([os.getpid()])
    assert s1["cpu_pct"] == s2["cpu_pct"] == 0.0  # every sample is a first one


def test_sample_without_nvml_has_no_gpu_figures():
    s = sample_job([999999999])  # no such process
    assert (s["nprocs"], s["gpu_util_pct"], s["gpu_mem_mb"]) == (0, None, None)


def test_record_sample_keeps_averages_peaks_and_zero_stretch(store):
    t0 = 1_790_000_000.0
    utils = [50.0, 0.0, 0.0, 0.0, 80.0, 0.0, 0.0]
    for i, u in enumerate(utils):
        agg = record_sample(store, 7, 1, {"time": t0 + 60 * i, "cpu_pct": 100.0 + i, "rss_mb": 10.0 * i,
                                          "gpu_util_pct": u, "gpu_mem_mb": 100.0 + i})
    assert agg["samples"] == 7 and agg["gpu_samples"] == 7
    # a sample's utilisation covers the interval before it (NVML averages over its last
    # period): samples 1..3 at 0 % cover 3 x 60 s; the open stretch at the end, 2 x 60 s
    assert agg["gpu_zero_max_s"] == 180.0
    assert agg["gpu_zero_s"] == 120.0
    assert agg["cpu_pct_max"] == 106.0 and agg["rss_mb_max"] == 60.0 and agg["gpu_mem_max_mb"] == 106.0
    sm = summary(sql.get_efficiency(store, 7))
    assert sm["gpu_util_pct"] == round(130.0 / 7, 2) and sm["cpu_pct"] == 103.0
    assert sql.get_efficiency(store, 7, run=0) is None
    assert summary(None)["gpu_util_pct"] is None
