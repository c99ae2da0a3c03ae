"""Efficiency sampling of the runs on this agent's nodes: CPU (psutil over the run's
process tree) and, where NVML serves a node, its GPUs' utilisation and memory, at most
once per `[accounting] sample_interval_s` per run, stored through
`batchd.accounting.efficiency.record_sample`.

A failed sample is logged (warning) and never disturbs the job or the agent's pass.
What it keeps per run (the time of its last sample, its processes' last CPU readings) is
dropped when the run ends (`forget`) and, should an end go unseen (the store ended the run
elsewhere), at the agent's next pass (`retain`): it never outgrows the running jobs.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from batchd.config import Config
from batchd.model import Job
from batchd.store import Store

if TYPE_CHECKING:
    from batchd.accounting.efficiency import CpuReadings

log = logging.getLogger(__name__)


class RunSampler:
    """Samples the running jobs of `nodes`; one per node agent, which calls `sample`
    on each pass, `forget` when a run ends and `retain` with the runs still running."""

    def __init__(self, cfg: Config, store: Store, nodes: set[str]):
        self.cfg = cfg
        self.store = store
        self.nodes = nodes
        self._last: dict[tuple[int, int], float] = {}  # (job id, run) -> time of its last sample
        self._cpu: dict[tuple[int, int], CpuReadings] = {}  # (job id, run) -> its processes' readings
        # (job id, run) -> when the samples began to read every GPU of the run at 0 %
        self._idle_since: dict[tuple[int, int], float] = {}
        # (job id, run) -> the run's last GPU reading ({node, job, account, gpu_util_pct, gpu_mem_mb,
        # cards: [{node, gpu, uuid, util_pct, mem_mib}]})
        self._latest: dict[tuple[int, int], dict[str, Any]] = {}
        self._gpu_sampler: Any = None
        if any(cfg.node(n).gpus == "nvml" for n in nodes):
            from batchd.node.gpusample import GpuSampler

            self._gpu_sampler = GpuSampler()

    def sample(self, j: Job, pid: int) -> None:
        """Every `[accounting] sample_interval_s`: the run's CPU (psutil over its process
        tree) and, where NVML serves the node, its GPUs' utilisation and memory."""
        interval = self.cfg.sample_interval_s
        key = (j.id, j.restarts)
        now = time.time()
        if interval <= 0 or not pid or now - self._last.get(key, 0.0) < interval:
            return
        self._last[key] = now
        from batchd.accounting.efficiency import record_sample, sample_job

        cards = self._gpu_cards(j) if self._gpu_sampler is not None else {}
        devices = list(cards) if self._gpu_sampler is not None else None
        readings = self._cpu.setdefault(key, {})
        try:
            got = sample_job([pid], devices=devices, gpu_sampler=self._gpu_sampler, now=now, readings=readings)
            record_sample(self.store, j.id, j.restarts, got)
        except Exception as e:  # sampling never disturbs the job or the agent
            log.warning("sample failed job_id=%s error=%s", j.id, e)
            return
        util = got.get("gpu_util_pct")
        if util is not None or got.get("gpu_mem_mb") is not None:
            node = next(iter(j.allocation or {}), "")
            self._latest[key] = {"node": node, "job": j.id, "account": j.account, "gpu_util_pct": util,
                                 "gpu_mem_mb": got.get("gpu_mem_mb"),
                                 "cards": [{"node": cards[u][0], "gpu": cards[u][1], "uuid": u, **d}
                                           for u, d in (got.get("gpu_devices") or {}).items() if u in cards]}
        if util is None or util > 0:  # no reading (no NVML, a failed sample), or busy
            self._idle_since.pop(key, None)
        else:
            self._idle_since.setdefault(key, now)

    def latest(self) -> list[dict[str, Any]]:
        """The last GPU reading of each running run sampled here (for /metrics)."""
        return list(self._latest.values())

    def idle_s(self, job_id: int, run: int, now: float | None = None) -> float:
        """How long every sample of the run has read its GPUs at 0 % (the mean over its
        GPUs is 0 only when each is): from the first such sample of the current streak to
        `now`; 0 while any reads busy or none was read (no NVML: never idle)."""
        since = self._idle_since.get((job_id, run))
        return 0.0 if since is None else max(0.0, (time.time() if now is None else now) - since)

    def _gpu_uuids(self, j: Job) -> list[str]:
        """UUIDs of the devices (or MIG instances) the job holds on this agent's nodes."""
        return list(self._gpu_cards(j))

    def _gpu_cards(self, j: Job) -> dict[str, tuple[str, str]]:
        """UUID of each device (or MIG instance) the job holds on this agent's nodes ->
        (node, the card: its index, and a MIG instance's profile after a slash)."""
        out: dict[str, tuple[str, str]] = {}
        inv = {n.name: n.gpus for n in self.store.list_nodes() if n.name in self.nodes}
        for node, a in (j.allocation or {}).items():
            cards = inv.get(node, [])
            by_index = {g.get("index"): g.get("uuid") for g in cards if "index" in g}
            migs = {m.get("uuid"): f"{g.get('index')}/{m.get('profile')}" for g in cards
                    for m in g.get("mig") or [] if isinstance(m, dict)}
            for g in a.get("gpus", []):
                s = str(g)
                uuid = s.split(":", 1)[1] if ":" in s else by_index.get(int(s))
                if uuid:
                    out[uuid] = (node, migs.get(uuid, s if ":" not in s else uuid))
        return out

    def forget(self, job_id: int, run: int) -> None:
        """Drop the sampling state of an ended run."""
        self._last.pop((job_id, run), None)
        self._cpu.pop((job_id, run), None)
        self._idle_since.pop((job_id, run), None)
        self._latest.pop((job_id, run), None)

    def retain(self, live: set[tuple[int, int]]) -> None:
        """Keep the sampling state of the runs in `live` (job id, run) only."""
        for d in (self._last, self._cpu, self._idle_since, self._latest):
            for key in [k for k in d if k not in live]:
                del d[key]
