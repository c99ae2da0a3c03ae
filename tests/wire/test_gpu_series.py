"""Per-card NVML series on /metrics (issue 20, item 1): the agent's RunSampler samples a
running job's cards (a whole card and a MIG instance, NVML faked), and the collector
turns its last reading into one `batchd_gpu_utilization_ratio` and one
`batchd_gpu_memory_used_bytes` series per card and job."""

from __future__ import annotations

import os
import time

from endpoint_cases import NODE, OWNER, make_world
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry
from wire_helpers import spec

from batchd.model import Node
from batchd.node.runsampler import RunSampler
from batchd.server.metrics import ClusterCollector

GPUS = [{"index": 0, "uuid": "GPU-aaaa", "type": "h200"},
        {"index": 1, "uuid": "GPU-bbbb", "type": "h200", "mig": [{"profile": "1g.18gb", "uuid": "MIG-cccc"}]}]


class FakeGpuSampler:
    def __init__(self):
        self.asked = []

    def sample(self, devices, pids=None):
        self.asked.append(sorted(devices))
        figures = {"GPU-aaaa": (87, 40960.0), "MIG-cccc": (None, 2048.0)}
        return {"devices": {d: {"util_pct": figures[d][0], "mem_used_mib": 99999.0, "job_mem_mib": figures[d][1]}
                            for d in devices}}


def test_one_series_per_card_and_job(tmp_path):
    w = make_world(tmp_path)
    try:
        w.store.upsert_node(Node(name=NODE, state="IDLE", cpus=8, memory_mb=8000, gpus=GPUS, heartbeat=time.time()))
        jid = int(w.svc.submit(OWNER, spec(w.tmp, name="gpujob"))["job_id"])
        assert w.store.update_job(jid, ("PENDING",), state="RUNNING", start_time=time.time(), node_list=NODE,
                                  allocation={NODE: {"tasks": 1, "cpus": 1, "memory_mb": 1024,
                                                       "gpus": ["0", "mig:MIG-cccc"]}})
        cfg = w.svc.cfg
        cfg.accounting = dict(cfg.accounting or {}, sample_interval_s=1)
        sampler = RunSampler(cfg, w.store, {NODE})
        fake = FakeGpuSampler()
        sampler._gpu_sampler = fake
        job = w.store.get_job(jid)
        sampler.sample(job, os.getpid())
        assert fake.asked == [["GPU-aaaa", "MIG-cccc"]]
        reg = CollectorRegistry()
        reg.register(ClusterCollector(w.store, cfg, gpu_samples=sampler.latest))
        text = generate_latest(reg).decode()
        lines = {ln for ln in text.splitlines() if ln.startswith(("batchd_gpu_utilization_ratio{",
                                                                  "batchd_gpu_memory_used_bytes{"))}
        acct = job.account
        assert lines == {
            f'batchd_gpu_utilization_ratio{{account="{acct}",gpu="0",job="{jid}",node="{NODE}",uuid="GPU-aaaa"}} 0.87',
            f'batchd_gpu_memory_used_bytes{{account="{acct}",gpu="0",job="{jid}",node="{NODE}",uuid="GPU-aaaa"}} '
            '4.294967296e+10',
            f'batchd_gpu_memory_used_bytes{{account="{acct}",gpu="1/1g.18gb",job="{jid}",node="{NODE}",'
            f'uuid="MIG-cccc"}} 2.147483648e+09',
        }, text
    finally:
        w.close()
