"""The controller: one scheduling cycle = load a snapshot from the store, call the pure
`batchd.scheduler.decide`, apply its decisions in one transaction.

It never touches processes: a started job becomes RUNNING with an allocation, and the
node agent of its first node launches it; a preempted job gets `action="preempt"`,
which the agent turns into signals.

Beside the cycle, the controller role accrues fair-share usage (`batchd.usageaccrual`,
called at the start of each cycle) and checks node heartbeats (`batchd.nodehealth`,
called by the daemon's loop); a started job's charge comes from the scheduler's decision
(`batchd.gres`), a pending job's dependency verdict from `batchd.jobdeps`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from batchd import faults
from batchd.config import Config
from batchd.gres import Charge, whole_cards
from batchd.hostlist import compress
from batchd.jobdeps import dependency_status
from batchd.model import Job
from batchd.store import Store
from batchd.tres import billing, format_tres, parse_billing_weights
from batchd.usageaccrual import CYCLE_KEY, accrue_usage

log = logging.getLogger(__name__)

#: The reason of a job held by `scontrol requeuehold`, as Slurm words it.
REQUEUE_HELD = "job requeued in held state"
HELD_REASONS = ("JobHeldUser", "JobHeldAdmin", REQUEUE_HELD)
#: The reason of a pending job the controller cannot evaluate (a stored request it cannot
#: read, or one the scheduler refuses): it stays pending, out of every cycle, until changed.
BAD_REQUEST = "BadConstraints"
PREEMPTOR = "preemptor"  # the `action` of a pending job victims were preempted for
INELIGIBLE = ("JobHeldUser", "JobHeldAdmin", REQUEUE_HELD, "BeginTime", "Dependency",
              "DependencyNeverSatisfied", "JobArrayTaskLimit")


class Controller:
    def __init__(self, cfg: Config, store: Store):
        self.cfg = cfg
        self.store = store
        self.weights = parse_billing_weights(cfg.tres_billing_weights)
        self.last_decisions: dict[str, Any] = {}
        self._stored_reason: dict[int, str] = {}
        self._dep_text: dict[int, str | None] = {}  # job id -> new Dependency= text, this cycle
        self._eligible: dict[int, float] = {}  # job id -> new EligibleTime, this cycle
        self._dep_index: tuple[set[int], dict[tuple[str, str], list[Job]]] | None = None
        self._stored_priority: dict[int, int] = {}
        self._stored_estimate: dict[int, float | None] = {}
        # pending jobs the scheduler cannot take: id -> signature of the request it refused
        self._bad: dict[int, str] = {}
        self._bad_now: dict[int, str] = {}
        self._jobs_by_id: dict[int, Job] = {}
        self._once = faults.OnceLog(log)

    # ------------------------------------------------------------------ snapshot
    def _eligibility(self, j: Job, by_id: dict[int, Job], all_jobs: list[Job], now: float) -> str | None:
        """The reason a pending job may not be considered at all, or None. Records, as a
        side effect, the job's new `Dependency=` text (`self._dep_text`) when it changed
        and, when the job is eligible, its EligibleTime (`self._eligible`)."""
        dep = j.request.get("dependency")
        verdict = "satisfied"
        if dep:
            if self._dep_index is None:  # once per snapshot: array ids, jobs by (name, user)
                names: dict[tuple[str, str], list[Job]] = {}
                for o in all_jobs:
                    names.setdefault((o.name, o.user), []).append(o)
                self._dep_index = ({o.array_job_id for o in all_jobs if o.array_job_id is not None}, names)
            arrays, names = self._dep_index
            verdict, text = dependency_status(dep, j, all_jobs, by_id, now, arrays, names.get((j.name, j.user), []))
            shown = None if verdict == "satisfied" else text
            if shown != j.dependency:
                self._dep_text[j.id] = shown
        if j.hold:
            if j.reason in HELD_REASONS:
                return j.reason
            return REQUEUE_HELD if j.request.get("requeue_hold") else "JobHeldUser"
        if j.begin_time and j.begin_time > now:
            return "BeginTime"
        if verdict == "never":
            return "DependencyNeverSatisfied"
        if verdict != "satisfied":
            return "Dependency"
        limit = j.request.get("array_max_running")
        if j.array_job_id is not None and limit:
            running = sum(1 for o in all_jobs if o.array_job_id == j.array_job_id and o.state == "RUNNING")
            if running >= int(limit):
                return "JobArrayTaskLimit"
        # eligible from now on (or from its begin time): Slurm's EligibleTime
        target = now if j.eligible_time is None else j.eligible_time
        if j.begin_time and target < j.begin_time:
            target = j.begin_time
        if target != j.eligible_time:
            self._eligible[j.id] = target
        return None

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """The live cluster in the snapshot format of DESIGN.md section 5, plus, per
        pending job, `eligible` and `reason` when it must not be considered."""
        now = time.time() if now is None else now
        jobs = self.store.list_jobs(states=["PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "FAILED",
                                            "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
                                            "OUT_OF_MEMORY"],
                                    since=now - 86400)
        by_id = {j.id: j for j in jobs}
        self._jobs_by_id = by_id
        self._stored_reason = {j.id: j.reason for j in jobs if j.state == "PENDING"}
        self._dep_text, self._eligible = {}, {}
        self._dep_index = None
        self._stored_priority = {j.id: j.priority for j in jobs if j.state in ("PENDING", "RUNNING")}
        self._stored_estimate = {j.id: j.start_estimate for j in jobs if j.state == "PENDING"}
        qos = {q.name: q for q in self.cfg.qos}
        nodes = self.store.list_nodes()
        part_nodes = {p.name: p.nodes for p in self.cfg.partitions}
        out_jobs = []
        self._bad_now: dict[int, str] = {}  # pending jobs left out of this cycle: id -> why
        for j in jobs:
            if j.state not in ("PENDING", "RUNNING", "SUSPENDED"):
                continue
            if j.state == "PENDING" and self._bad.get(j.id) == _signature(j):
                self._bad_now[j.id] = "known"
                continue
            try:
                out_jobs.append(self._job_entry(j, qos, part_nodes, by_id, jobs, now))
            except Exception as e:  # isolation: one job's record never stops the cycle
                if j.state == "PENDING":
                    self._refuse(j, e)
                else:
                    # a running job holds its devices whatever else is wrong with it
                    self._once(("running", j.id), logging.ERROR, "running job entry incomplete job_id=%s "
                               "error=%s", j.id, e)
                    out_jobs.append(_running_fallback(j))
        self._bad = {jid: sig for jid, sig in self._bad.items() if jid in self._bad_now}
        return self._snapshot_rest(now, nodes, out_jobs)

    def _refuse(self, j: Job, e: BaseException) -> None:
        """Leave pending job `j` out of the cycles until its request changes; it shows
        BAD_REQUEST in squeue; logged once."""
        self._bad[j.id] = _signature(j)
        self._bad_now[j.id] = str(e)
        log.error("job cannot be scheduled, left pending reason=%s job_id=%s error=%s: %s", BAD_REQUEST, j.id,
                  type(e).__name__, e)

    def _job_entry(self, j: Job, qos: dict[str, Any], part_nodes: dict[str, Any], by_id: dict[int, Job],
                   jobs: list[Job], now: float) -> dict[str, Any]:
        """One active job in the snapshot's form; raises on a record it cannot be built from."""
        q = qos.get(j.qos)
        r = j.request
        tl = j.time_limit_s
        if tl is None:  # no -t and no DefaultTime: the partition's MaxTime, set at start (apply)
            tl = next((p.max_time_s for p in self.cfg.partitions if p.name == j.partition), -1)
        d: dict[str, Any] = {
            "id": j.id, "account": j.account, "user": j.user, "state": j.state,
            "priority": q.priority if q else 0, "preemptible": q.preemptible if q else True,
            "submit_time": j.submit_time, "time_limit_s": None if tl is None or tl < 0
            else tl, "tasks": int(r.get("tasks") or 1), "nodes": r.get("nodes"),
            "tasks_per_node": r.get("tasks_per_node"), "per_task": dict(r.get("per_task") or {}),
            "partition": j.partition, "qos": j.qos, "nice": j.nice, "hold": j.hold,
            "qos_priority_value": q.priority if q else 0, "billing": j.billing,
            "eligible_time": j.eligible_time or j.submit_time,
            "partition_nodes": _allowed_nodes(part_nodes.get(j.partition), j.spec,
                                              int(self.cfg.limits["max_hostlist_names"])),
        }
        if r.get("exclusive"):
            d["exclusive"] = True
        if j.time_limit_s is None:
            d["time_limit_default"] = True
        if r.get("time_limit_admin"):
            d["time_limit_admin"] = True  # may exceed the partition's MaxTime (scheduler/limits.py)
        if j.array_job_id is not None and r.get("array_max_running"):
            # the %N throttle counts the tasks this cycle starts too (the scheduler's check)
            d["array_job_id"] = j.array_job_id
            d["array_max_running"] = int(r["array_max_running"])
        if j.state != "PENDING":
            d["state"] = "RUNNING"
            d["start_time"] = j.start_time
            d["allocation"] = j.allocation or {}
            if j.charge:
                d["charge"] = j.charge  # what it is charged for (batchd.gres record form)
            if j.action == "preempt" and j.action_by is not None:
                d["preempting_for"] = j.action_by  # its devices stay that job's (scheduler/held.py)
        else:
            if j.action == PREEMPTOR:
                d["preemptor"] = True
            why = self._eligibility(j, by_id, jobs, now)
            if why is not None:
                d["eligible"] = False
                d["reason"] = why
        return d

    def _snapshot_rest(self, now: float, nodes: list[Any], out_jobs: list[dict[str, Any]]) -> dict[str, Any]:
        accounts = [{"name": a.name, "parent": a.parent, "priority": a.priority, "shares": a.shares,
                     "resources": a.resources} for a in self.store.list_accounts()]
        users = [{"name": a["user"], "account": a["account"],
                  "shares": "parent" if a["shares"] is None else a["shares"]}
                 for a in self.store.list_associations()]
        usage_state = self.store.get_usage_state()
        usage: dict[str, dict[str, float]] = {"accounts": {}, "users": {}}
        for key, (value, _updated) in usage_state.items():
            if key != CYCLE_KEY:
                (usage["users"] if "/" in key else usage["accounts"])[key] = value
        return {
            "version": 1, "now": now,
            "policy": {**self.cfg.scheduler, **self.cfg.priority,
                       "tres_billing_weights": self.cfg.tres_billing_weights},
            "cluster": self.cfg.cluster_name,
            "partitions": [{"name": p.name, "default": p.default, "priority_job_factor": p.priority_job_factor,
                            "max_time_s": p.max_time_s} for p in self.cfg.partitions],
            "nodes": [{"name": n.name, "cpus": n.cpus, "memory_mb": n.memory_mb,
                       "state": n.state, "gpus": n.gpus,
                       "shards": self.cfg.shard_per_gpu * whole_cards(n.gpus)} for n in nodes],
            "accounts": accounts, "users": users, "usage": usage, "jobs": out_jobs,
            "qos": [{"name": q.name, "priority": q.priority, "preemptible": q.preemptible,
                     "max_gpus_per_user": q.max_gpus_per_user, "usage_factor": q.usage_factor}
                    for q in self.cfg.qos],
        }

    # ------------------------------------------------------------------ cycle
    def cycle(self, now: float | None = None) -> dict[str, Any]:
        """Run one scheduling cycle and apply it; returns the decisions as a dict."""
        from batchd.scheduler import decide, load_snapshot

        now = time.time() if now is None else now
        accrue_usage(self.cfg, self.store, now)
        snap = self.snapshot(now)
        prios = self._priorities(snap)
        if prios is not None:
            snap["priorities"] = prios
        decisions = self._decide(snap, decide, load_snapshot)
        self.apply(snap, decisions, now)
        if prios is not None:
            self._store_priorities(prios)
        self.last_decisions = decisions
        return decisions

    def _decide(self, snap: dict[str, Any], decide: Any, load_snapshot: Any) -> dict[str, Any]:
        """`decide` on the snapshot. A pending job the scheduler refuses (a ValueError
        naming `jobs[i]`, or a cycle that fails with it and passes without it) is taken
        out (BAD_REQUEST) and the cycle runs on without it; a running job's entry is
        never taken out. Raises only when the cycle fails with no pending job to blame."""
        for _attempt in range(MAX_REFUSED_PER_CYCLE):
            try:
                return dict(decide(load_snapshot(snap)).to_dict())
            except Exception as e:
                if faults.cause(e) is not None:
                    raise
                culprit = self._culprit(snap, e, decide, load_snapshot)
                if culprit is None:
                    raise
                j = snap["jobs"].pop(culprit)
                job = self._jobs_by_id.get(int(j["id"]))
                if job is None:
                    raise
                self._refuse(job, e)
        raise RuntimeError("too many jobs refused in one cycle")

    def _culprit(self, snap: dict[str, Any], e: Exception, decide: Any, load_snapshot: Any) -> int | None:
        """Index in snap["jobs"] of a pending job that makes the cycle fail, or None."""
        m = _JOB_PATH.match(str(e)) if isinstance(e, ValueError) else None
        jobs = snap["jobs"]
        if m and int(m.group(1)) < len(jobs) and jobs[int(m.group(1))].get("state") == "PENDING":
            return int(m.group(1))
        running = [d for d in jobs if d.get("state") != "PENDING"]
        for i, d in enumerate(jobs):  # only on a failed cycle: each pending job alone with the running
            if d.get("state") != "PENDING":
                continue
            try:
                decide(load_snapshot({**snap, "jobs": [*running, d]}))
            except Exception:
                return i
        return None

    def _priorities(self, snap: dict[str, Any]) -> dict[str, int] | None:
        """Slurm multifactor priority of every active job, computed once per cycle: the
        scheduler orders by it and the jobs keep it."""
        from batchd.priority import job_priorities

        try:
            return job_priorities(snap)
        except Exception as e:  # an inconsistent tree (or one odd job) must not stop scheduling
            self._once(("priorities", str(e)), logging.WARNING, "priorities not computed error=%s", e)
            return None

    def _store_priorities(self, prios: dict[str, int]) -> None:
        """Keep each active job's priority on the job (squeue %Q, scontrol Priority=),
        writing only those that changed."""
        changes: list[tuple[int, tuple[str, ...] | None, dict[str, Any]]] = [
            (int(k), ("PENDING", "RUNNING"), {"priority": int(v)}) for k, v in prios.items()
            if str(k).isdigit() and self._stored_priority.get(int(k)) != int(v)]
        if changes:
            self.store.update_jobs(changes)

    def apply(self, snap: dict[str, Any], dec: dict[str, Any], now: float) -> None:
        changes: list[tuple[int, tuple[str, ...] | None, dict[str, Any]]] = []
        # bookkeeping first: a job started below keeps the text and time it had when it became eligible
        for jid in set(self._dep_text) | set(self._eligible):
            vals: dict[str, Any] = {}
            if jid in self._dep_text:
                vals["dependency"] = self._dep_text[jid]
            if jid in self._eligible:
                vals["eligible_time"] = self._eligible[jid]
            changes.append((jid, ("PENDING",), vals))
        for jid in self._bad_now:
            if self._stored_reason.get(jid) != BAD_REQUEST:
                changes.append((jid, ("PENDING",), {"reason": BAD_REQUEST}))
        started = []
        by_id = {str(j["id"]): j for j in snap["jobs"]}
        for st in dec.get("start", []):
            if st.get("after"):
                continue  # waits for its victims' devices; a later cycle starts it
            alloc = st["allocation"]
            try:
                # the charge the scheduler decided (batchd.gres): nothing here recomputes it
                ch = Charge.from_json(st["charge"])
                bill = billing(self.weights, ch.tres, parts=ch.billing_parts())
            except Exception as e:  # isolation: the job is not started, the others are
                self._once(("start", st.get("job")), logging.ERROR, "job not started job_id=%s error=%s",
                           st.get("job"), e)
                continue
            start_vals: dict[str, Any] = {
                "state": "RUNNING", "allocation": alloc, "start_time": now, "end_time": None,
                "node_list": compress(list(alloc)), "tres_alloc": format_tres(ch.tres, bill),
                "billing": bill, "charge": ch.record(), "reason": "None", "action": None,
            }
            entry = by_id.get(str(st["job"]))
            if entry is not None and entry.get("time_limit_default"):
                # Slurm's select_nodes: a job without a limit gets its partition's MaxTime
                tl = entry.get("time_limit_s")
                start_vals["time_limit_s"] = -1 if tl is None else int(tl)
            changes.append((int(st["job"]), ("PENDING",), start_vals))
            started.append(st["job"])
        for pre in dec.get("preempt", []):
            # action_by: the job it is preempted for, until it ends (snapshot `preempting_for`)
            changes.append((int(pre["job"]), ("RUNNING",), {"action": "preempt", "action_by": int(pre["for"])}))
        changes += _preemptor_marks(snap, dec)
        pending_now = {int(j["id"]): j for j in snap["jobs"] if j["state"] == "PENDING"}
        planned = {int(k): float(v) for k, v in (dec.get("planned_start") or {}).items() if str(k).isdigit()}
        for jid in pending_now:
            est = planned.get(jid)
            if self._stored_estimate.get(jid) != est:
                changes.append((jid, ("PENDING",), {"start_estimate": est}))
        for p in dec.get("pending", []):
            jid = int(p["job"])
            job = pending_now.get(jid)
            reason = p.get("reason") or "None"
            if job is not None and self._stored_reason.get(jid) != reason:
                changes.append((jid, ("PENDING",), {"reason": reason}))
        for jid, job in pending_now.items():
            if job.get("eligible") is False and self._stored_reason.get(jid) != job["reason"]:
                changes.append((jid, ("PENDING",), {"reason": job["reason"]}))
        if changes:
            self.store.update_jobs(changes)
        for jid in started:
            log.info("job started job_id=%s", jid)
        for pre in dec.get("preempt", []):
            log.info("job preempted job_id=%s reason=%s for=%s", pre["job"], pre.get("reason"), pre.get("for"))


def _preemptor_marks(snap: dict[str, Any], dec: dict[str, Any]) -> list[tuple[int, tuple[str, ...], dict]]:
    """A pending job to start after victims gets `action` PREEMPTOR (unused while pending; a
    start clears it); a marked job the cycle did not start has lost its reservation: unmarked."""
    waiting = {int(st["job"]) for st in dec.get("start", []) if st.get("after")}
    started = {int(st["job"]) for st in dec.get("start", [])}
    marked = {int(j["id"]) for j in snap["jobs"] if j.get("state") == "PENDING" and j.get("preemptor")}
    return ([(jid, ("PENDING",), {"action": PREEMPTOR}) for jid in sorted(waiting - marked)]
            + [(jid, ("PENDING",), {"action": None}) for jid in sorted(marked - started)])


#: At most this many pending jobs are taken out of one cycle (then the cycle fails).
MAX_REFUSED_PER_CYCLE = 50
_JOB_PATH = re.compile(r"^jobs\[(\d+)\]")


def _signature(j: Job) -> str:
    """What a refused job's verdict depends on: a change (scontrol update) re-evaluates it."""
    try:
        return json.dumps([j.request, j.spec.get("nodelist"), j.spec.get("exclude"), j.partition, j.qos,
                           j.account, j.time_limit_s, j.hold], sort_keys=True, default=str)
    except Exception:
        return repr((j.request, j.partition, j.qos, j.account, j.time_limit_s, j.hold))


def _running_fallback(j: Job) -> dict[str, Any]:
    """The snapshot entry of a running job whose record is partly unreadable: enough for
    the scheduler to count what it holds."""
    return {"id": j.id, "account": j.account, "user": j.user, "state": "RUNNING", "priority": 0,
            "preemptible": False, "submit_time": j.submit_time, "start_time": j.start_time,
            "time_limit_s": None, "tasks": 1, "nodes": None, "tasks_per_node": None, "per_task": {},
            "allocation": j.allocation if isinstance(j.allocation, dict) else {}, "partition": j.partition,
            "qos": j.qos, "nice": 0, "hold": False, "qos_priority_value": 0, "billing": 0.0,
            "eligible_time": j.submit_time, "partition_nodes": None}


def _allowed_nodes(partition_nodes: list[str] | None, spec: dict[str, Any], limit: int) -> list[str] | None:
    """The nodes a job may use: its partition's, narrowed by `-w/--nodelist` (only these)
    and `-x/--exclude` (not these), both in Slurm's host-list syntax, each expanded up to
    `limit` names (`[limits] max_hostlist_names`, what the door let in). A list stored
    before the door checked it that does not parse, or names more, leaves the job no
    node (it pends) rather than ignoring the user's restriction."""
    from batchd.hostlist import expand

    allowed = partition_nodes
    try:
        if spec.get("nodelist"):
            only = set(expand(str(spec["nodelist"]), limit))
            allowed = [n for n in (allowed or sorted(only)) if n in only]
        if spec.get("exclude"):
            out = set(expand(str(spec["exclude"]), limit))
            allowed = [n for n in (allowed or []) if n not in out] if allowed is not None else None
    except ValueError:
        return []
    return allowed
