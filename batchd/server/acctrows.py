"""sacct's rows (ACCT_ROW of `batchd/protocol.py`) from jobs and their usage records:
per job its runs (one usage record each, oldest first) or its current state, each
followed by its `.batch` step row, in Slurm's accounting vocabulary.

Pure functions of their inputs (but for `time.time()` as the end of a running job's
elapsed time). A job whose record cannot be shown gets its rows from
`batchd.server.views.sanitized` (logged once), never failing the list.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from batchd.model import Job, UsageRec
from batchd.server.views import exit_str, group_name, log_bad, sanitized
from batchd.slurm.tres import format_tres, parse_tres


def _state_label(state: str, by: int | None) -> str:
    if state == "CANCELLED" and by is not None:
        return f"CANCELLED by {by}"
    return state


def _row(j: Job, **kw: Any) -> dict[str, Any]:
    base = {
        "job_id": j.display_id, "job_id_raw": str(j.id), "name": j.name, "user": j.user, "uid": j.uid,
        "group": group_name(j.gid), "account": j.account, "partition": j.partition, "qos": j.qos,
        "submit": j.submit_time, "eligible": j.eligible_time or j.submit_time, "time_limit_s": j.time_limit_s,
        "req_tres": _alpha(j.tres_req), "restarts": j.restarts, "workdir": j.spec.get("workdir", ""),
        "comment": j.comment, "priority": j.priority, "step": None, "ntasks": int(j.request.get("tasks") or 1),
        "derived_exit_code": "0:0",
    }
    base.update(kw)
    return base


@functools.lru_cache(maxsize=4096)
def _alpha(tres: str) -> str:
    """A TRES string as sacct prints it (alphabetical); kept by text: a listing's jobs
    share a handful of requests, and parsing each again was a third of sacct's time."""
    if not tres:
        return ""
    t = parse_tres(tres)
    b = t.pop("billing", None)
    return format_tres(t, b, alphabetical=True)


@functools.lru_cache(maxsize=4096)
def _alloc_text(items: tuple[tuple[str, float], ...], billing: float | None) -> str:
    return format_tres(dict(items), billing, alphabetical=True)


def _run_rows(j: Job, u: UsageRec, state: str, reason: str) -> list[dict[str, Any]]:
    elapsed = int(u.elapsed_s)
    alloc_nobill = dict(u.tres)
    alloc_nobill.pop("billing", None)
    alloc_items = tuple(sorted(alloc_nobill.items()))
    nnodes = int(u.tres.get("node", 1) or 1)
    # a run ended by the system or a user (time limit, scancel, preemption, requeue) shows
    # no signal in its job row; its batch step row below carries it (Slurm's accounting)
    ended_by_request = u.state in ("TIMEOUT", "PREEMPTED", "REQUEUED") or u.state.startswith("CANCELLED")
    main_exit = exit_str(u.exit_code, 0 if ended_by_request else u.exit_signal)
    main = _row(j, state=state, exit_code=main_exit, start=u.start_time,
                end=u.end_time, elapsed_s=elapsed, alloc_tres=_alloc_text(alloc_items, u.billing),
                node_list=u.node_list, nnodes=nnodes, ncpus=int(u.tres.get("cpu", 0)),
                alloc_cpus=int(u.tres.get("cpu", 0)), req_mem=j.request.get("per_task", {}).get("mem", 0),
                billing=int(u.billing), reason=reason, total_cpu_s=u.cpu_time_s)
    # the batch step: what the script itself ended with, as slurmd records it
    if u.state in ("TIMEOUT", "PREEMPTED", "REQUEUED") or u.state.startswith("CANCELLED"):
        step_state, step_exit = "CANCELLED", f"0:{15 if u.exit_signal == 0 else u.exit_signal}"
    elif u.state == "FAILED" and u.exit_signal:
        # a batch shell a signal ended (SIGKILL included): Slurm 22.05 records the step
        # CANCELLED 0:N and the job FAILED 0:N (recorded from the peer: kill -SEGV/-USR1/-KILL $$)
        step_state, step_exit = "CANCELLED", exit_str(0, u.exit_signal)
    else:
        step_state, step_exit = u.state, exit_str(u.exit_code, u.exit_signal)
    batch = dict(main, job_id=f"{j.display_id}.batch", job_id_raw=f"{j.id}.batch", name="batch", user="",
                 state=step_state, exit_code=step_exit, alloc_tres=_alloc_text(alloc_items, None),
                 req_tres="", step="batch", nnodes=1, node_list=u.node_list.split(",")[0], billing=0,
                 qos="", partition="", submit=u.start_time, eligible=u.start_time,
                 max_rss_kb=None if u.max_rss_mb is None else int(round(u.max_rss_mb * 1024)))
    return [main, batch]


def acct_rows(jobs: list[Job], usage: list[UsageRec], *, duplicates: bool = False,
              start: float | None = None, end: float | None = None) -> list[dict[str, Any]]:
    """sacct's rows: per job its runs (only the latest without `duplicates`) and the
    current state; each run is followed by its `.batch` step row. A job whose record
    cannot be shown gets its rows from `batchd.server.views.sanitized` (logged once), never failing the list."""
    try:
        return _acct_rows(jobs, usage, duplicates=duplicates, start=start, end=end)
    except Exception:
        pass
    runs: dict[int, list[UsageRec]] = {}
    for u in usage:
        runs.setdefault(u.job_id, []).append(u)
    out: list[dict[str, Any]] = []
    for j in sorted(jobs, key=lambda x: (x.array_job_id or x.id, x.array_task_id or 0, x.id)):
        kw: dict[str, Any] = {"duplicates": duplicates, "start": start, "end": end}
        try:
            out.extend(_acct_rows([j], runs.get(j.id, []), **kw))
        except Exception as e:
            log_bad(j, e)
            out.extend(_acct_rows([sanitized(j)], runs.get(j.id, []), **kw))
    return out


def _acct_rows(jobs: list[Job], usage: list[UsageRec], *, duplicates: bool = False,
               start: float | None = None, end: float | None = None) -> list[dict[str, Any]]:
    runs: dict[int, list[UsageRec]] = {}
    for u in usage:
        runs.setdefault(u.job_id, []).append(u)
    out: list[dict[str, Any]] = []
    for j in sorted(jobs, key=lambda x: (x.array_job_id or x.id, x.array_task_id or 0, x.id)):
        recs = sorted(runs.get(j.id, []), key=lambda r: r.run)
        rows: list[list[dict[str, Any]]] = []
        for u in recs:
            is_current = u.run == j.restarts and j.state not in ("PENDING", "RUNNING")
            # an earlier run ended in a requeue: PREEMPTED, NODE_FAIL or (scontrol requeue) REQUEUED
            state = _state_label(j.state, j.action_by) if is_current else u.state
            if is_current:
                state = _state_label(u.state, j.action_by)
            rows.append(_run_rows(j, u, state, j.reason if is_current else "None"))
        if j.state in ("PENDING", "RUNNING") or not any(u.run == j.restarts for u in recs):
            alloc = parse_tres(j.tres_alloc) if j.tres_alloc and j.state == "RUNNING" else {}
            b = alloc.pop("billing", None)
            now = time.time()
            st = j.start_time if j.state == "RUNNING" else None
            en = j.end_time if j.state not in ("PENDING", "RUNNING") else None
            elapsed = int((en or now) - st) if st else 0
            head = _row(j, state=_state_label(j.state, j.action_by if j.state == "CANCELLED" else None),
                        exit_code=exit_str(j.exit_code, j.exit_signal), start=st, end=en,
                        elapsed_s=elapsed, alloc_tres=format_tres(alloc, b, alphabetical=True) if alloc
                        else "", node_list=j.node_list or "None assigned", nnodes=len(j.allocation or {})
                        or int(j.request.get("nodes") or 1), ncpus=int(alloc.get("cpu", 0)),
                        alloc_cpus=int(alloc.get("cpu", 0)),
                        req_mem=j.request.get("per_task", {}).get("mem", 0), billing=int(b or 0),
                        reason=j.reason)
            group = [head]
            if j.state == "RUNNING":  # its batch step runs too
                group.append(dict(head, job_id=f"{j.display_id}.batch", job_id_raw=f"{j.id}.batch", name="batch",
                                  user="", exit_code="0:0", alloc_tres=format_tres(alloc, None, alphabetical=True),
                                  req_tres="", step="batch", nnodes=1, node_list=(j.node_list or "").split(",")[0],
                                  billing=0, qos="", partition="", submit=st, eligible=st))
            rows.append(group)
        if not duplicates and rows:
            rows = rows[-1:]
        for group in rows:
            head = group[0]
            s_, e_ = head.get("start") or head.get("submit"), head.get("end")
            if start is not None and e_ is not None and e_ < start:
                continue
            if end is not None and s_ is not None and s_ > end:
                continue
            out.extend(group)
    return out
