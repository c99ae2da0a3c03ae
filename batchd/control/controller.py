"""The controller: one scheduling cycle = load a snapshot from the store, call the pure
`batchd.scheduler.decide`, apply its decisions in one transaction.

It never touches processes: a started job becomes RUNNING with an allocation, and the
node agent of its first node launches it; a preempted job gets `action="preempt"`,
which the agent turns into signals.

Beside the cycle, the controller role accrues fair-share usage (`batchd.control.usageaccrual`,
called at the start of each cycle) and checks node heartbeats (`batchd.control.nodehealth`,
called by the daemon's loop); a started job's charge comes from the scheduler's decision
(`batchd.slurm.gres`), a pending job's eligibility and the cycle's bookkeeping from
`batchd.control.cyclebook`.

Re-entrant: `snapshot` (the Service calls it on API threads for sprio, sshare, `batchd why`
and `plan --dump`) builds its bookkeeping in a `CycleBook` it then drops, and writes
nothing shared; `cycle` passes its own book to `_decide`, `apply` and `_store_priorities`.
The only state kept across cycles (`_bad`, `last_decisions`, the budgets' use) is replaced
whole, never changed in place.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from batchd import faults
from batchd.config import Config
from batchd.control import arrayfold
from batchd.control.cyclebook import HELD_REASONS, REQUEUE_HELD, CycleBook
from batchd.control.usageaccrual import CYCLE_KEY, accrue_usage
from batchd.model import Job
from batchd.slurm.gres import Charge, whole_cards
from batchd.slurm.hostlist import compress
from batchd.slurm.tres import billing, format_tres, parse_billing_weights
from batchd.store import Store

log = logging.getLogger(__name__)

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
        # State kept across cycles, written by `cycle` only and read by API threads: each is
        # replaced by a new object, never changed in place, so a reader that takes the
        # reference once sees one cycle's whole value without a lock (the GIL makes the
        # assignment atomic), and the cycle never waits for a reader.
        self.last_decisions: dict[str, Any] = {}
        # pending jobs the scheduler cannot take: id -> signature of the request it refused
        self._bad: dict[int, str] = {}
        # (time counted, the policies it was counted for, {account: {tres: minutes}}): replaced whole
        self._budget_cache: tuple[float, str, dict[str, dict[str, float]]] | None = None
        self._once = faults.OnceLog(log)

    # ------------------------------------------------------------------ snapshot
    def snapshot(self, now: float | None = None, running_only: bool = False) -> dict[str, Any]:
        """The live cluster in the snapshot format of docs/snapshot.md, plus, per
        pending job, `eligible` and `reason` when it must not be considered. Safe on any
        thread while a cycle runs: it writes nothing on the controller (a job refused
        before stays out; one it cannot read is left out, and the next cycle refuses it).
        `running_only`: without the pending jobs (sshare's TRESRunMins), which are not read."""
        return self._build(time.time() if now is None else now, running_only=running_only)[0]

    def _build(self, now: float, fold: bool = False, running_only: bool = False
               ) -> tuple[dict[str, Any], CycleBook]:
        """The snapshot at `now` and its bookkeeping; the book is the caller's own. With
        `fold` (the cycle's own), large groups of alike pending array tasks are cut to
        their first tasks (`batchd.control.arrayfold`); the book's `folded` names the others."""
        # the active jobs without their scripts and environments, and, when a pending job
        # has a dependency, a day of ended jobs (what dependencies name) with only the few
        # columns dependencies read
        if running_only:
            jobs = self.store.snapshot_jobs(("RUNNING", "SUSPENDED"), ENDED_STATES, since=now - 86400,
                                            ended_if=lambda _active: False)
        else:
            # the cycle's own leaves out the jobs held with their reason stored (no decision)
            jobs = self.store.snapshot_jobs(("PENDING", "RUNNING", "SUSPENDED"), ENDED_STATES,
                                            since=now - 86400, ended_if=_any_dependency,
                                            settled_holds=HELD_REASONS if fold else ())
        book = CycleBook.read(jobs)
        bad = self._bad  # one reference: `cycle` replaces it, never changes it
        qos = {q.name: q for q in self.cfg.qos}
        nodes = self.store.list_nodes()
        part_nodes = {p.name: p.nodes for p in self.cfg.partitions}
        folder = arrayfold.Folder(arrayfold.cap(nodes)) if fold else None
        out_jobs = []
        for j in jobs:
            if j.state not in ("PENDING", "RUNNING", "SUSPENDED"):
                continue
            if j.state == "PENDING" and book.leave_out(j, bad):
                continue
            if folder is not None and j.state == "PENDING" and folder.fold(j):
                book.eligibility(j, now)  # its EligibleTime and Dependency= text, as the others'
                continue
            try:
                out_jobs.append(self._job_entry(j, qos, part_nodes, book, now))
            except Exception as e:  # isolation: one job's record never stops the cycle
                if j.state == "PENDING":
                    book.refuse(j, e)
                else:
                    # a running job holds its devices whatever else is wrong with it
                    self._once(("running", j.id), logging.ERROR, "running job entry incomplete job_id=%s "
                               "error=%s", j.id, e)
                    out_jobs.append(_running_fallback(j))
        if folder is not None:
            book.folded = folder.folded
        snap = self._snapshot_rest(now, nodes, out_jobs)
        if running_only:
            # the pending jobs' owners still make the associations they imply
            # (batchd.priority.tree gives a job's (account, user) without one shares 1)
            known = {(u["account"], u["name"]) for u in snap["users"]}
            snap["users"] += [{"name": user, "account": acct, "shares": 1}
                              for acct, user in self.store.pending_owners() if (acct, user) not in known]
        return snap, book

    @staticmethod
    def _log_refusals(book: CycleBook) -> None:
        """Log, once, each job `book` refused since the last call (a cycle's only)."""
        for j, e in book.new_refusals:
            log.error("job cannot be scheduled, left pending reason=%s job_id=%s error=%s: %s", BAD_REQUEST,
                      j.id, type(e).__name__, e)
        book.new_refusals.clear()

    def _job_entry(self, j: Job, qos: dict[str, Any], part_nodes: dict[str, Any], book: CycleBook,
                   now: float) -> dict[str, Any]:
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
                d["charge"] = j.charge  # what it is charged for (batchd.slurm.gres record form)
            if j.action == "preempt" and j.action_by is not None:
                d["preempting_for"] = j.action_by  # its devices stay that job's (scheduler/held.py)
        else:
            if j.action == PREEMPTOR:
                d["preemptor"] = True
            why = book.eligibility(j, now)
            if why is not None:
                d["eligible"] = False
                d["reason"] = why
        return d

    def _snapshot_rest(self, now: float, nodes: list[Any], out_jobs: list[dict[str, Any]]) -> dict[str, Any]:
        accts = self.store.list_accounts()
        used = self._budget_used(accts, now)
        accounts = [{"name": a.name, "parent": a.parent, "priority": a.priority, "shares": a.shares,
                     "resources": a.resources, **({"policy": a.policy} if a.policy else {}),
                     **({"budget_used": used[a.name]} if a.name in used else {})} for a in accts]
        users = [{"name": a["user"], "account": a["account"],
                  "shares": "parent" if a["shares"] is None else a["shares"],
                  **({"policy": a["policy"]} if a.get("policy") else {})}
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
                     "max_gpus_per_user": q.max_gpus_per_user, "usage_factor": q.usage_factor,
                     "min_runtime_reclaim_s": q.min_runtime_reclaim_s,
                     "min_runtime_preempt_s": q.min_runtime_preempt_s}
                    for q in self.cfg.qos],
        }

    # ------------------------------------------------------------------ cycle
    def _budget_used(self, accts: list[Any], now: float) -> dict[str, dict[str, float]]:
        """Budget use of the accounts with a GrpTRESMins budget (batchd.accounting.budget), counted at most
        every `[scheduler] budget_recount_s` seconds (default BUDGET_EVERY_S) (a report over the period; the cache is replaced whole, so
        a snapshot on an API thread reads one consistent value)."""
        if not any((a.policy or {}).get("grp_tres_mins") for a in accts):
            return {}
        cached = self._budget_cache
        every = float(self.cfg.scheduler.get("budget_recount_s", BUDGET_EVERY_S))
        if cached is not None and now - cached[0] < every and cached[1] == _budget_key(accts):
            return cached[2]
        from batchd.accounting.budget import budget_used

        try:
            value = budget_used(self.store, accts, now)
        except Exception as e:  # a budget that cannot be counted holds nothing back; logged once
            self._once(("budget", str(e)), logging.WARNING, "budget use not counted error=%s", e)
            return {}
        self._budget_cache = (now, _budget_key(accts), value)
        return value

    def cycle(self, now: float | None = None) -> dict[str, Any]:
        """Run one scheduling cycle and apply it; returns the decisions as a dict. Not
        re-entrant with itself: one thread (the daemon's loop) runs the cycles."""
        from batchd.scheduler import decide, load_snapshot

        now = time.time() if now is None else now
        accrue_usage(self.cfg, self.store, now)
        snap, book = self._build(now, fold=True)
        try:
            self._log_refusals(book)
            prios = self._priorities(snap)
            if prios is not None:
                snap["priorities"] = prios
            decisions = self._decide(snap, book, decide, load_snapshot)
            self.apply(snap, decisions, now, book)
            if prios is not None:
                # a folded array task has its group's priority (squeue %Q, sprio)
                folded = {str(t): prios[str(r)] for t, r in book.folded.items() if str(r) in prios}
                self._store_priorities({**prios, **folded}, book)
        finally:
            # even a failed cycle remembers whom it refused (each is logged once); a new object
            self._bad = dict(book.refused)
        self.last_decisions = decisions
        return decisions

    def _decide(self, snap: dict[str, Any], book: CycleBook, decide: Any, load_snapshot: Any) -> dict[str, Any]:
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
                job = book.by_id.get(int(j["id"]))
                if job is None:
                    raise
                book.refuse(job, e)
                self._log_refusals(book)
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

    def _store_priorities(self, prios: dict[str, int], book: CycleBook) -> None:
        """Keep each active job's priority on the job (squeue %Q, scontrol Priority=),
        writing only those that changed since `book` was read."""
        changes: list[tuple[int, tuple[str, ...] | None, dict[str, Any]]] = [
            (int(k), ("PENDING", "RUNNING"), {"priority": int(v)}) for k, v in prios.items()
            if str(k).isdigit() and book.stored_priority.get(int(k)) != int(v)]
        if changes:
            self.store.update_jobs(changes)

    def apply(self, snap: dict[str, Any], dec: dict[str, Any], now: float, book: CycleBook) -> None:
        """Write decisions `dec` on snapshot `snap`, and `book`'s bookkeeping, in one transaction."""
        changes: list[tuple[int, tuple[str, ...] | None, dict[str, Any]]] = []
        # bookkeeping first: a job started below keeps the text and time it had when it became eligible
        for jid in set(book.dep_text) | set(book.eligible):
            vals: dict[str, Any] = {}
            if jid in book.dep_text:
                vals["dependency"] = book.dep_text[jid]
            if jid in book.eligible:
                vals["eligible_time"] = book.eligible[jid]
            changes.append((jid, ("PENDING",), vals))
        for jid in book.left_out:
            if book.stored_reason.get(jid) != BAD_REQUEST:
                changes.append((jid, ("PENDING",), {"reason": BAD_REQUEST}))
        started = []
        by_id = {str(j["id"]): j for j in snap["jobs"]}
        for st in dec.get("start", []):
            if st.get("after"):
                continue  # waits for its victims' devices; a later cycle starts it
            alloc = st["allocation"]
            try:
                # the charge the scheduler decided (batchd.slurm.gres): nothing here recomputes it
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
            if entry is not None and isinstance(entry.get("submit_time"), int | float):
                # the cycle read its clock before this job was stored: never start before submit
                start_vals["start_time"] = max(now, float(entry["submit_time"]))
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
            if book.stored_estimate.get(jid) != est:
                changes.append((jid, ("PENDING",), {"start_estimate": est}))
        for p in dec.get("pending", []):
            jid = int(p["job"])
            job = pending_now.get(jid)
            reason = p.get("reason") or "None"
            if job is not None and book.stored_reason.get(jid) != reason:
                changes.append((jid, ("PENDING",), {"reason": reason}))
        for jid, job in pending_now.items():
            if job.get("eligible") is False and book.stored_reason.get(jid) != job["reason"]:
                changes.append((jid, ("PENDING",), {"reason": job["reason"]}))
        changes += _folded_changes(book, pending_now, dec)
        if changes:
            self.store.update_jobs(changes)
        for jid in started:
            log.info("job started job_id=%s", jid)
        for pre in dec.get("preempt", []):
            # the rule that allowed it (issue 16) is kept nowhere else once the next cycle runs
            log.info("job preempted job_id=%s reason=%s for=%s policy=%s", pre["job"], pre.get("reason"),
                     pre.get("for"), pre.get("policy") or "-")


def _any_dependency(active: list[Job]) -> bool:
    """Whether a pending job has a dependency (only then does a snapshot read ended jobs)."""
    return any(j.state == "PENDING" and j.request.get("dependency") for j in active)


def _folded_changes(book: CycleBook, pending_now: dict[int, dict[str, Any]],
                    dec: dict[str, Any]) -> list[tuple[int, tuple[str, ...], dict[str, Any]]]:
    """A folded array task (batchd.control.arrayfold) takes the pending reason its group's last
    task in the cycle has after it, and has no planned start."""
    if not book.folded:
        return []
    decided = {int(p["job"]): p.get("reason") or "None" for p in dec.get("pending", [])}
    out: list[tuple[int, tuple[str, ...], dict[str, Any]]] = []
    for jid, rep in book.folded.items():
        entry = pending_now.get(rep)
        if entry is not None and entry.get("eligible") is False:
            reason = entry["reason"]
        else:
            reason = decided.get(rep, book.stored_reason.get(rep) or "None")
        vals: dict[str, Any] = {}
        if book.stored_reason.get(jid) != reason:
            vals["reason"] = reason
        if book.stored_estimate.get(jid) is not None:
            vals["start_estimate"] = None
        if vals:
            out.append((jid, ("PENDING",), vals))
    return out


def _preemptor_marks(snap: dict[str, Any], dec: dict[str, Any]) -> list[tuple[int, tuple[str, ...], dict]]:
    """A pending job to start after victims gets `action` PREEMPTOR (unused while pending; a
    start clears it); a marked job the cycle did not start has lost its reservation: unmarked."""
    waiting = {int(st["job"]) for st in dec.get("start", []) if st.get("after")}
    started = {int(st["job"]) for st in dec.get("start", [])}
    marked = {int(j["id"]) for j in snap["jobs"] if j.get("state") == "PENDING" and j.get("preemptor")}
    return ([(jid, ("PENDING",), {"action": PREEMPTOR}) for jid in sorted(waiting - marked)]
            + [(jid, ("PENDING",), {"action": None}) for jid in sorted(marked - started)])


#: How often (seconds) the controller recounts the budgets' use from the accounting.
BUDGET_EVERY_S = 60.0


def _budget_key(accts: list[Any]) -> str:
    return json.dumps(sorted((a.name, a.parent, a.policy) for a in accts if a.policy), default=str)


#: The ended states whose jobs of the last day a snapshot reads (for dependencies).
ENDED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY")

#: At most this many pending jobs are taken out of one cycle (then the cycle fails).
MAX_REFUSED_PER_CYCLE = 50
_JOB_PATH = re.compile(r"^jobs\[(\d+)\]")


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
    from batchd.slurm.hostlist import expand

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
