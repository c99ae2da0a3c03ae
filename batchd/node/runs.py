"""The end of one run of a job: its usage record and the job's next state, written
together and at most once (the store keys usage records by (job_id, run)).

Used by the node agent (a run's supervisor reported its exit) and by the controller
(the run's node stopped responding: NODE_FAIL).
"""

from __future__ import annotations

import logging
from typing import Any

from batchd.model import Job, UsageRec
from batchd.protocol import IDLE_REASON
from batchd.slurm.tres import parse_tres
from batchd.store import Store

log = logging.getLogger(__name__)

# scontrol requeue holds the job this long before it may start again (Slurm's behaviour)
REQUEUE_HOLD_S = 120


def _efficiency(store: Store, job_id: int, run: int) -> dict[str, Any]:
    """What the agent's samples say of the run (mean GPU utilisation, peaks)."""
    from batchd.accounting.efficiency import summary
    from batchd.store.accounting import get_efficiency

    return summary(get_efficiency(store, job_id, run))


def end_run(store: Store, j: Job, state: str, code: int, sig: int, start: float, end: float,
            rusage: dict[str, float] | None, run: int) -> bool:
    """Record run `run` of job `j` as ended in `state`. A preempted or node-failed run of
    a requeueable job, and an explicit requeue, send the job back to PENDING with the
    same id and restarts + 1; anything else ends the job. False when already recorded."""
    # the charge the scheduler decided (batchd.slurm.gres record form: TRES + card-share keys);
    # a job started before charges were stored has only its AllocTRES string
    tres = dict(j.charge) if j.charge else (parse_tres(j.tres_alloc) if j.tres_alloc else {})
    tres.pop("billing", None)
    ru = rusage or {}
    usage = UsageRec(
        job_id=j.id, run=run, name=j.name, account=j.account, user=j.user, uid=j.uid, gid=j.gid,
        partition=j.partition, qos=j.qos, node_list=j.node_list, tres_alloc=j.tres_alloc, tres=tres,
        billing=j.billing, submit_time=j.submit_time, start_time=start, end_time=end,
        elapsed_s=max(0, int(round(end - start))), state=state, exit_code=code, exit_signal=sig,
        array_job_id=j.array_job_id, array_task_id=j.array_task_id,
        cpu_time_s=(ru.get("user_cpu_s", 0.0) + ru.get("sys_cpu_s", 0.0)) if rusage else None,
        max_rss_mb=max(ru.get("max_rss_kb", 0.0), ru.get("peak_tree_rss_kb", 0.0)) / 1024 if rusage else None,
    )
    eff = _efficiency(store, j.id, run)
    usage.gpu_util_pct, usage.gpu_mem_mb = eff.get("gpu_util_pct"), eff.get("gpu_mem_mb")
    if usage.max_rss_mb is None:
        usage.max_rss_mb = eff.get("max_rss_mb")
    requeue = (state in ("PREEMPTED", "NODE_FAIL") and j.requeue) or state == "REQUEUED"
    changes: dict[str, Any]
    if requeue:
        # as slurmctld: a requeued job is submitted anew (its age restarts) and may not
        # start again for REQUEUE_HOLD_S (reason BeginTime), whatever requeued it
        changes = {
            "state": "PENDING", "restarts": run + 1, "allocation": None, "start_time": None,
            "end_time": None, "node_list": "", "tres_alloc": "", "charge": None, "action": None,
            "reason": "BeginTime", "begin_time": end + REQUEUE_HOLD_S, "submit_time": end,
        }
        if j.request.get("time_limit_partition"):
            # a limit the start took from the partition (no -t, no DefaultTime, never
            # updated: batchd.server.jobspec) is Slurm's NO_VAL again: sacct shows Partition_Limit
            # (recorded, slurm-reference 30_requeue)
            changes["time_limit_s"] = None
    else:
        changes = {"state": state, "end_time": end, "exit_code": code, "exit_signal": sig, "action": None,
                   "reason": IDLE_REASON if j.reason == IDLE_REASON else "None"}
    written = store.finish_run(j.id, run, changes, usage)
    if written:
        log.info("job ended job_id=%s run=%s state=%s exit=%s:%s requeued=%s", j.id, run, state, code, sig,
                 requeue)
    return written
