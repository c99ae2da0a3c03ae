"""`GET /metrics`: the cluster as Prometheus sees it (docs/metrics.md names every metric,
its labels and units).

At each scrape the collector reads what the store holds now, in a handful of queries
(jobs counted by one GROUP BY, the nodes, the running jobs, the accounts, usage records
added since the last scrape), plus the daemon's own counters (`batchd.metrics`) and, where
NVML serves this daemon's nodes, the GPU samples its agent took last. The text is rendered
by prometheus-client, in the OpenMetrics form when the scraper asks for it (Prometheus
does), else the classic text form.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from batchd.metrics import REGISTRY
from batchd.model import Job, Node
from batchd.slurm.gres import NodeGpus, charge_of_allocation, node_inventories, shard_card
from batchd.store import Store

GPU_RESOURCE = "gres/gpu"


#: one holder of (part of) a card: (job, its share of the card, what it holds: "card",
#: a MIG profile, or "N shards")
Holder = tuple[Job, float, str]


def card_holders(inv: dict[str, NodeGpus], running: list[Job]) -> dict[tuple[str, int], list[Holder]]:
    """(node, card index) -> the running jobs on that card, each with its share of it (a
    whole card 1, a MIG instance its slices' share, shards their share of the card's)."""
    held: dict[tuple[str, int], list[Holder]] = {}
    for j in running:
        for name, a in (j.allocation or {}).items():
            if not isinstance(a, dict) or name not in inv:
                continue
            cards = inv[name]
            for g in a.get("gpus") or []:
                s = str(g)
                if s.isascii() and s.isdigit():
                    held.setdefault((name, int(s)), []).append((j, 1.0, "card"))
                    continue
                hit = cards.instance(s.split(":", 1)[1] if ":" in s else s)
                if hit is not None:
                    card, mig = hit
                    held.setdefault((name, card.index), []).append((j, mig.share, mig.profile))
            shards = float(a.get("shards", 0) or 0)
            on = shard_card(a)
            holder = cards.card(on) if on is not None else next((c for c in cards.cards if c.shards), None)
            if shards and holder is not None and holder.shards:
                held.setdefault((name, holder.index), []).append((j, shards / holder.shards, f"{int(shards)} shards"))
    return held


def card_usage(nodes: list[Node], running: list[Job], shard_per_gpu: int = 0) -> dict[tuple[str, str, str], float]:
    """(node, card type, state) -> cards, each card counted by its share: a card held whole
    is `allocated`; a card holding MIG instances or shards in use counts their share of it
    `allocated` and the rest `shared`; an untouched card `idle`; every card of a DOWN node
    `down`, of a DRAIN node `drained`."""
    inv = node_inventories(nodes, shard_per_gpu)
    used = {key: sum(share for _j, share, _what in hs) for key, hs in card_holders(inv, running).items()}
    out: dict[tuple[str, str, str], float] = {}

    def add(key: tuple[str, str, str], v: float) -> None:
        if v > 1e-9:
            out[key] = out.get(key, 0.0) + v

    for n in nodes:
        state = n.state.upper()
        have = inv.get(n.name)
        for card in have.cards if have is not None else ():
            if state.startswith("DOWN"):
                add((n.name, card.type, "down"), 1.0)
                continue
            if state.startswith("DRAIN"):
                add((n.name, card.type, "drained"), 1.0)
                continue
            u = min(1.0, used.get((n.name, card.index), 0.0))
            if u >= 1.0 - 1e-9:
                add((n.name, card.type, "allocated"), 1.0)
            elif u > 0:
                add((n.name, card.type, "allocated"), u)
                add((n.name, card.type, "shared"), 1.0 - u)
            else:
                add((n.name, card.type, "idle"), 1.0)
    return out


def account_gpus(accounts: list[Any], running: list[Job], fair_share: dict[str, dict[str, float]],
                 inventories: dict[str, NodeGpus]) -> dict[tuple[str, str, str], float]:
    """(account, resource, kind) -> GPUs (`gres/gpu` counts MIG instances and shards by
    their card share, as quotas do; `gres/gpu:TYPE` whole cards of the type): quota and
    limit as configured (-1: none), allocated (the account's running jobs' charge), borrowed
    (allocated above quota), lent (idle quota that borrowers are using now, shared out by
    idle quota), fair_share (the last cycle's deserved share)."""
    alloc: dict[tuple[str, str], float] = {}
    for j in running:
        # the charge the start stored (what the bill counts); computed for a job without one
        tres = j.charge or charge_of_allocation(j.allocation or {}, inventories).tres
        for res, v in tres.items():
            if (res == GPU_RESOURCE or res.startswith(GPU_RESOURCE + ":")) and "@" not in res:  # no card-share keys
                key = (j.account, res)
                alloc[key] = alloc.get(key, 0.0) + float(v)
    out: dict[tuple[str, str, str], float] = {}
    resources = {r for a in accounts for r in (a.resources or {}) if r.startswith(GPU_RESOURCE)} | \
        {r for _a, r in alloc} | {GPU_RESOURCE}
    for res in sorted(resources):
        idle_quota: dict[str, float] = {}
        borrowed_total = 0.0
        for a in accounts:
            spec = (a.resources or {}).get(res) or {}
            quota = float(spec.get("quota", -1))
            limit = float(spec.get("limit", quota)) if spec else -1.0
            used = alloc.get((a.name, res), 0.0)
            out[(a.name, res, "quota")] = quota
            out[(a.name, res, "limit")] = limit
            out[(a.name, res, "allocated")] = used
            borrowed = max(0.0, used - quota) if quota >= 0 else 0.0
            out[(a.name, res, "borrowed")] = borrowed
            borrowed_total += borrowed
            if quota > used:
                idle_quota[a.name] = quota - used
            share = (fair_share.get(a.name) or {}).get(res)
            if share is not None:
                out[(a.name, res, "fair_share")] = float(share)
        idle_total = sum(idle_quota.values())
        for a in accounts:
            lent = idle_quota.get(a.name, 0.0) * min(1.0, borrowed_total / idle_total) if idle_total else 0.0
            out[(a.name, res, "lent")] = lent
    return out


class ClusterCollector(Collector):
    """Reads the cluster at each scrape (see the module docstring)."""

    def __init__(self, store: Store, cfg: Any, controller: Callable[[], dict[str, Any]] | None = None,
                 decisions: Callable[[], dict[str, Any]] | None = None,
                 gpu_samples: Callable[[], list[dict[str, Any]]] | None = None):
        self.store, self.cfg = store, cfg
        self.controller, self.decisions, self.gpu_samples = controller, decisions, gpu_samples
        self._billing_lock = threading.Lock()
        self._billing_last_id = 0
        self._billing: dict[str, float] = {}
        self._billing_shown: dict[str, float] = {}

    def describe(self) -> list[Metric]:
        return []  # collected fresh at each scrape; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        jobs = GaugeMetricFamily("batchd_jobs", "Jobs not yet ended, by state, account and partition",
                                 labels=["state", "account", "partition"])
        pending = GaugeMetricFamily("batchd_jobs_pending", "Pending jobs by Slurm reason and account",
                                    labels=["reason", "account"])
        by_state: dict[tuple[str, str, str], int] = {}
        by_reason: dict[tuple[str, str], int] = {}
        for state, account, partition, reason, count in self.store.job_counts():
            by_state[(state, account, partition)] = by_state.get((state, account, partition), 0) + count
            if state == "PENDING":
                by_reason[(reason, account)] = by_reason.get((reason, account), 0) + count
        for k, count in sorted(by_state.items()):
            jobs.add_metric(list(k), count)
        for k2, count in sorted(by_reason.items()):
            pending.add_metric(list(k2), count)
        yield jobs
        yield pending

        nodes = self.store.list_nodes()
        running = self.store.list_jobs(states=["RUNNING"])
        gpus = GaugeMetricFamily("batchd_gpus", "GPUs by node, card type and state (allocated, idle, shared, down, "
                                 "drained); MIG instances and shards count their share of their card",
                                 labels=["node", "type", "state"])
        for key, v in sorted(card_usage(nodes, running, int(getattr(self.cfg, "shard_per_gpu", 0) or 0)).items()):
            gpus.add_metric(list(key), round(v, 6))
        yield gpus

        fair = (self.decisions() if self.decisions else {}).get("fair_share") or {}
        acc = GaugeMetricFamily("batchd_account_gpus", "Per account and GPU resource: quota, limit (-1: none), "
                                "allocated, borrowed, lent, fair_share (GPUs)", labels=["account", "resource", "kind"])
        inventories = node_inventories(nodes, int(getattr(self.cfg, "shard_per_gpu", 0) or 0))
        for key, v in sorted(account_gpus(self.store.list_accounts(), running, fair, inventories).items()):
            acc.add_metric(list(key), round(v, 6))
        yield acc

        billing = CounterMetricFamily("batchd_account_billing_seconds", "Billing-unit-seconds used by each "
                                      "account's jobs (TRESBillingWeights), ended runs and running ones so far",
                                      labels=["account"])
        for account, v in sorted(self._billing_totals(running, now).items()):
            billing.add_metric([account], round(v, 3))
        yield billing

        ctl = GaugeMetricFamily("batchd_controller", "1 for the node whose daemon holds the controller role",
                                labels=["node"])
        holder = (self.controller() if self.controller else {}).get("node")
        if holder:
            ctl.add_metric([str(holder)], 1)
        yield ctl
        age = GaugeMetricFamily("batchd_node_heartbeat_age_seconds", "Seconds since each node's daemon last "
                                "wrote its heartbeat", labels=["node"])
        for n in nodes:
            if n.heartbeat:
                age.add_metric([n.name], round(max(0.0, now - float(n.heartbeat)), 3))
        yield age

        samples = self.gpu_samples() if self.gpu_samples else []
        util = GaugeMetricFamily("batchd_gpu_utilization_ratio", "GPU utilisation of each card (or MIG instance) "
                                 "a running job holds on this daemon's nodes, 0-1 (NVML's last sample)",
                                 labels=["node", "gpu", "uuid", "job", "account"])
        mem = GaugeMetricFamily("batchd_gpu_memory_used_bytes", "GPU memory a running job uses on each card (or "
                                "MIG instance) it holds on this daemon's nodes (NVML's last sample)",
                                labels=["node", "gpu", "uuid", "job", "account"])
        for s in samples:
            for c in s.get("cards") or []:
                labels = [str(c["node"]), str(c["gpu"]), str(c["uuid"]), str(s["job"]), str(s["account"])]
                if c.get("util_pct") is not None:
                    util.add_metric(labels, round(float(c["util_pct"]) / 100.0, 4))
                if c.get("mem_mib") is not None:
                    mem.add_metric(labels, float(c["mem_mib"]) * 1024 * 1024)
        yield util
        yield mem

    def _billing_totals(self, running: list[Job], now: float) -> dict[str, float]:
        """Ended runs (added up incrementally) plus the running jobs' billing so far; a total
        never goes down (a run's record is rounded to whole seconds at its end)."""
        with self._billing_lock:
            self._billing_last_id, new = self.store.billing_seconds_since(self._billing_last_id)
            for account, v in new.items():
                self._billing[account] = self._billing.get(account, 0.0) + v
            totals = dict(self._billing)
            for j in running:
                if j.start_time:
                    totals[j.account] = totals.get(j.account, 0.0) + float(j.billing or 0.0) * max(0.0, now - j.start_time)
            for account, v in totals.items():
                self._billing_shown[account] = max(v, self._billing_shown.get(account, 0.0))
            return dict(self._billing_shown)


def render(collector: ClusterCollector, accept: str | None) -> tuple[bytes, str]:
    """(body, content type) of one scrape: the cluster and the daemon's own metrics."""
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    encoder, content_type = choose_encoder(accept or "")
    own = encoder(REGISTRY)
    body = encoder(reg)
    if content_type.startswith("application/openmetrics-text"):
        # one exposition: the first part's `# EOF` line goes, the last one ends it
        own = own.rsplit(b"# EOF\n", 1)[0]
    return own + body, content_type
