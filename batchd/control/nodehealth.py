"""Node health, checked by the controller role: a node whose agent has not heartbeated
for `[scheduler] node_timeout_s` goes DOWN (reason NOT_RESPONDING) and its running
jobs end NODE_FAIL through `batchd.node.runs.end_run` (requeued whole when they allow it).

One job whose end cannot be recorded never stops the others (logged); a full disk, a
lock timeout or an unreachable database is raised to the daemon's loop.
"""

from __future__ import annotations

import logging

from batchd import faults
from batchd.config import Config
from batchd.node.runs import end_run
from batchd.store import NOT_RESPONDING, Store

log = logging.getLogger(__name__)


def node_timeout_s(cfg: Config) -> float:
    """Seconds without a heartbeat after which a node is DOWN (default 30)."""
    return float(cfg.scheduler.get("node_timeout_s", 30))


def check_nodes(cfg: Config, store: Store, now: float) -> list[str]:
    """Nodes whose agent has not heartbeated for `[scheduler] node_timeout_s`
    (default 30 s) go DOWN; their running jobs end NODE_FAIL (requeued whole when
    they allow it). Returns the nodes marked DOWN now."""
    timeout = node_timeout_s(cfg)
    down = []
    for n in store.list_nodes():
        if n.state != "DOWN" and now - n.heartbeat > timeout:
            store.set_node_state(n.name, "DOWN", NOT_RESPONDING, uid=0, now=now)
            log.warning("node down node=%s last_heartbeat_s=%.0f", n.name, now - n.heartbeat)
            down.append(n.name)
    if down:
        for j in store.list_jobs(states=["RUNNING"]):
            if set(j.allocation or {}) & set(down):
                try:
                    end_run(store, j, "NODE_FAIL", 0, 0, j.start_time or now, now, None, j.restarts)
                except Exception as e:  # isolation: the other jobs of the node are ended
                    if faults.cause(e) is not None:
                        raise
                    log.error("node-failed job not recorded job_id=%s error=%s", j.id, e)
    return down
