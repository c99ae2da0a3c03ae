"""The daemon's own counters and timings, for `/metrics` (batchd/server/metrics.py renders
them with the cluster's state; docs/metrics.md names every metric).

prometheus-client's objects in one registry of batchd's own (never the library's global
one, so a test's second daemon in the same process starts from zero). Counting is a few
lock-protected additions: the submission path and the cycle pay nothing measurable.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

SUBMISSIONS = Counter("batchd_submissions", "Job submissions this daemon answered, by result "
                      "(accepted, refused)", ["result"], registry=REGISTRY)
CYCLE_SECONDS = Histogram("batchd_cycle_seconds", "Wall time of one scheduling cycle on this daemon "
                          "(the controller's)", registry=REGISTRY,
                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
CYCLE_FAILURES = Counter("batchd_cycle_failures", "Scheduling cycles that failed (logged; the next one retries)",
                         registry=REGISTRY)
PREEMPTIONS = Counter("batchd_preemptions", "Jobs the controller on this daemon decided to evict, by reason "
                      "(reclaim across accounts, preempt inside one) and the victim's account",
                      ["reason", "account"], registry=REGISTRY)
