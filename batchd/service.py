"""The service layer: every user-visible operation, with its authorization.

`api.py` parses requests and calls these methods; tests call them without a socket.
A `Caller` is who asked (uid/gid from SO_PEERCRED). Users may see every job but
change only their own; admins (root, the daemon's own uid in dev mode, or members of
the configured admin group) may do anything, and their actions on others' jobs are
audited.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import signal as _signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchd import acctrows, jobspec, views
from batchd import dependency as deps
from batchd.config import Config
from batchd.errors import Conflict, InvalidRequest, NotFound, PermissionDenied, SubmitError
from batchd.hostlist import compress
from batchd.jobdeps import dependency_status, lookup_job
from batchd.model import Job
from batchd.store import ACTIVE_STATES, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Caller:
    uid: int
    gid: int
    pid: int = 0

    @property
    def user(self) -> str:
        return user_name(self.uid)


_TOKEN_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_")


def submit_token(spec: dict[str, Any]) -> str | None:
    """The submission's client-made token (`spec["submit_token"]`: 1 to 64 ASCII
    letters, digits, `-` or `_`; sbatch and bsub send 32 hex digits), None without one;
    InvalidRequest for anything else."""
    t = spec.get("submit_token")
    if t is None:
        return None
    if not isinstance(t, str) or not 0 < len(t) <= 64 or not _TOKEN_CHARS.issuperset(t):
        raise InvalidRequest("submit_token: must be a string of 1 to 64 ASCII letters, digits, '-' or '_'")
    return t


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def submit_identity(caller: Caller, spec: dict[str, Any]) -> Caller:
    """Who a submission runs as and is charged to: the caller, or with `--uid`/`--gid`
    (`spec["uid"]`, `spec["gid"]`: numbers, or None) the user and group named there.

    Only root may name them (Slurm's `--uid only permitted by root user`; admins of the
    admin group may not: they would become any user); the uid must be a user of the
    password database and the gid a group of the group database. The job then runs
    with that uid, gid and the user's supplementary groups, and the account, its
    membership and limits are checked as that user. Without `--gid` the job gets the
    user's primary group (Slurm 22.05 keeps root's group there; batchd never hands a
    user root's group by accident). Raises PermissionDenied or InvalidRequest."""
    uid, gid = spec.get("uid"), spec.get("gid")
    if uid is None and gid is None:
        return caller
    for name, v in (("--uid", uid), ("--gid", gid)):
        if v is None:
            continue
        if caller.uid != 0:
            raise PermissionDenied(f"{name} only permitted by root user")
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**32 - 1:
            raise InvalidRequest(f"Invalid {name} specification")
    if uid is not None:
        try:
            primary = pwd.getpwuid(uid).pw_gid
        except KeyError:
            raise InvalidRequest("Invalid --uid specification") from None
    else:
        uid, primary = caller.uid, caller.gid
    if gid is not None:
        try:
            grp.getgrgid(gid)
        except KeyError:
            raise InvalidRequest("Invalid --gid specification") from None
    else:
        gid = primary
    log.info("submission on behalf of another user caller_uid=%s uid=%s gid=%s", caller.uid, uid, gid)
    return Caller(uid=uid, gid=gid, pid=caller.pid)


class Service:
    def __init__(self, cfg: Config, store: Store, wake: Callable[[], None] = lambda: None,
                 snapshot: Callable[[], dict[str, Any]] | None = None):
        self.cfg = cfg
        self.store = store
        self.wake = wake
        self._snapshot = snapshot

    def snapshot(self) -> dict[str, Any]:
        """The live scheduler snapshot (DESIGN.md section 5), for plan --dump, sshare, sprio."""
        if self._snapshot is None:
            raise NotFound("no snapshot source configured")
        return self._snapshot()

    # ------------------------------------------------------------------ identity
    def is_admin(self, caller: Caller) -> bool:
        if caller.uid == 0 or (self.cfg.dev and caller.uid == os.getuid()):
            return True
        try:
            g = grp.getgrnam(self.cfg.admin_group)
        except KeyError:
            return False
        return caller.gid == g.gr_gid or user_name(caller.uid) in g.gr_mem

    def _may_modify(self, caller: Caller, job: Job) -> bool:
        return caller.uid == job.uid or self.is_admin(caller)

    # ------------------------------------------------------------------ cluster facts
    def cluster_info(self, user: str) -> dict[str, Any]:
        """The plain dict that batchd.jobspec.resolve checks a submission against."""
        accounts = [a.name for a in self.store.list_accounts() if a.name != "root"]
        assoc = [a for a in self.store.list_associations() if a.get("user") == user]
        mine = sorted({a["account"] for a in assoc} | ({"default"} if "default" in accounts else set()))
        default = next((a["account"] for a in assoc if a["is_default"]), None)
        if default is None:
            default = "default" if "default" in mine else (mine[0] if mine else "default")
        nodes = self.store.list_nodes()
        return {
            "name": self.cfg.cluster_name,
            "nodes": [{"name": n.name, "cpus": n.cpus, "memory_mb": n.memory_mb, "gpus": n.gpus,
                       "state": n.state,
                       "partitions": [p.name for p in self.cfg.partitions if n.name in p.nodes]}
                      for n in nodes],
            "partitions": [{"name": p.name, "default": p.default, "nodes": p.nodes,
                            "max_time_s": p.max_time_s, "default_time_s": p.default_time_s}
                           for p in self.cfg.partitions],
            "accounts": accounts,
            "user_accounts": mine,
            "default_account": default,
            "qos": {q.name: {"priority": q.priority, "preemptible": q.preemptible,
                             "usage_factor": q.usage_factor, "max_gpus_per_user": q.max_gpus_per_user,
                             "grace_time_s": q.grace_time_s} for q in self.cfg.qos},
            "default_qos": "normal",
            "shard_per_gpu": self.cfg.shard_per_gpu,
            "def_mem_per_cpu_mb": self.cfg.def_mem_per_cpu_mb,
            "billing_weights": self.cfg.tres_billing_weights,
        }

    # ------------------------------------------------------------------ submit
    def submit(self, caller: Caller, spec: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(spec, dict) or not isinstance(spec.get("script", ""), str):
            raise InvalidRequest("malformed job specification")
        caller = submit_identity(caller, spec)  # --uid/--gid (root only): run and charge as that user
        user = caller.user
        # a client-made token per submission: the retry of one whose reply was lost (the
        # daemon died after the commit) gets the same job ids back instead of a second job
        token = None if spec.get("test_only") else submit_token(spec)
        if token is not None:
            done = self.store.find_submission(caller.uid, token)
            if done:
                return self._repeated_submission(done)
        known = self._dependency_jobs(spec, user)
        lookup = None
        if known is not None:
            by_id = {o.id: o for o in known}

            def lookup(job_id: int, task_id: int | None) -> Any:
                return lookup_job(by_id, known, job_id, task_id, "state")
        req = jobspec.resolve(spec, self.cluster_info(user), user, caller.uid, lookup_state=lookup)
        now = time.time()
        if spec.get("test_only"):
            # Slurm's `Job N to start at T using C processors on nodes NODES in partition P`
            part = next((p for p in self.cfg.partitions if p.name == req["partition"]), None)
            up = {n.name for n in self.store.list_nodes() if n.state not in ("DOWN", "DRAIN", "DRAINED")}
            names = [n for n in (part.nodes if part else []) if n in up][: int(req.get("nodes") or 1)]
            return {"job_id": None, "start_time": max(now, req.get("begin_time") or now),
                    "nodes": compress(names), "partition": req["partition"], "cpus": int(req.get("cpus") or 1)}
        task_ids = req.get("array_task_ids") or [None]
        first = self.store.next_job_ids(len(task_ids))
        begin = req.get("begin_time")
        # Slurm's EligibleTime at submit: the begin time, or now for a job that nothing holds
        # back (a held job, one with a dependency and an array get theirs once eligible)
        eligible = begin if begin else (None if req.get("hold") or req.get("dependency")
                                        or req.get("array_task_ids") else now)
        jobs = []
        for i, task in enumerate(task_ids):
            # Slurm: the last task keeps the array's master id, the others take the ids after it
            if task is None:
                jid = first
            elif i == len(task_ids) - 1:
                jid = first
            else:
                jid = first + 1 + i
            jobs.append(Job(
                id=jid, name=req["name"], user=user, uid=caller.uid, gid=caller.gid,
                account=req["account"], partition=req["partition"], qos=req["qos"],
                state="PENDING", submit_time=now, spec=spec, request=req,
                array_job_id=first if task is not None else None, array_task_id=task,
                reason="JobHeldUser" if req.get("hold") else "None",
                priority=0 if req.get("hold") else 1,
                nice=int(req.get("nice") or 0), hold=bool(req.get("hold")),
                begin_time=begin, eligible_time=eligible,
                time_limit_s=req.get("time_limit_s"),
                requeue=req.get("requeue") is not False,
                dependency=None, comment=spec.get("comment"),
                tres_req=req.get("tres_req", ""), submit_token=token,
            ))
            if req.get("dependency"):
                _verdict, text = dependency_status(req["dependency"], jobs[-1], known or [], now=now)
                jobs[-1].dependency = None if _verdict == "satisfied" else text
        if token is None:
            self.store.insert_jobs(jobs)
        else:
            done = self.store.insert_submission(jobs, caller.uid, token)
            if done:  # a concurrent retry of the same submission stored it first
                return self._repeated_submission(done)
        log.info("job submitted job_id=%s user=%s account=%s tasks=%d", first, user, req["account"],
                 len(task_ids))
        self.wake()
        return {"job_id": first, "array_task_ids": req.get("array_task_ids")}

    @staticmethod
    def _repeated_submission(jobs: list[Job]) -> dict[str, Any]:
        """The reply to a submission whose token is already stored (`jobs`, ordered by id):
        the ids the first one got, with `duplicate`; nothing is stored again."""
        j = jobs[0]
        first = j.array_job_id if j.array_job_id is not None else j.id
        log.info("job submission repeated job_id=%s user=%s tasks=%d token=%s", first, j.user, len(jobs),
                 j.submit_token)
        return {"job_id": first, "array_task_ids": j.request.get("array_task_ids"), "duplicate": True}

    def _dependency_jobs(self, spec: dict[str, Any], user: str) -> list[Job] | None:
        """The stored jobs a submission's `--dependency` may name (and, for `singleton`,
        the active ones), or None without a (parsable) dependency: resolve refuses
        `afterok` on an unknown job with them, and the first `Dependency=` text comes from them."""
        raw = spec.get("dependency") if isinstance(spec, dict) else None
        if not raw or not isinstance(raw, str):
            return None
        try:
            dep = deps.parse(raw)
        except deps.DependencyError:
            return None  # resolve words the error
        ids = {jid for jid, _task in deps.job_refs(dep)}
        found = self.store.list_jobs(ids=ids, array_job_ids=ids) if ids else []
        if any(it["type"] == "singleton" for it in dep["items"]):
            seen = {j.id for j in found}
            found += [j for j in self.store.list_jobs(states=ACTIVE_STATES) if j.id not in seen and j.user == user]
        return found

    # ------------------------------------------------------------------ queries
    def _in_memory_since(self) -> float:
        """Jobs that ended before this (unix s) are gone from squeue, scontrol and scancel,
        as Slurm purges them after MinJobAge (`[scheduler] min_job_age_s`, default 300 s);
        sacct still has them."""
        return time.time() - float(self.cfg.scheduler.get("min_job_age_s", 300))

    def _select(self, ids: list[str] | None, all_jobs: bool, purged: bool = False) -> list[Job]:
        """Jobs by Slurm id strings (`123`, `123_4`, `123_[1-3]`), or without ids the active
        jobs plus those that ended within MinJobAge (squeue shows them as CD/F/CA), every
        job with `all_jobs`. With ids, jobs purged after MinJobAge only when `purged`."""
        if ids:
            since = None if purged else self._in_memory_since()
            plain: set[int] = set()
            arrays: set[int] = set()
            tasks: dict[int, set[int]] = {}
            for raw in ids:
                try:
                    jid, task = views.parse_job_id(raw)
                except ValueError:
                    raise InvalidRequest(f"Invalid job id specified: {raw}") from None
                if task is None:
                    plain.add(jid)
                    arrays.add(jid)
                else:
                    tasks.setdefault(jid, set()).update(task)
                    arrays.add(jid)
            found = self.store.list_jobs(ids=plain, array_job_ids=arrays)
            out = []
            for j in found:
                if j.array_job_id is not None and j.array_job_id in tasks:
                    if j.array_task_id in tasks[j.array_job_id]:
                        out.append(j)
                elif j.id in plain or (j.array_job_id is not None and j.array_job_id in plain):
                    out.append(j)
            return [j for j in out if since is None or j.end_time is None or j.end_time >= since]
        return self.store.list_jobs(since=None if all_jobs else self._in_memory_since())

    def list_jobs(self, query: dict[str, str]) -> dict[str, Any]:
        ids = _csv(query.get("ids"))
        # squeue -t all and scontrol see the jobs still in memory (MinJobAge), like Slurm
        jobs = self._select(ids, False)
        jobs = _filter(jobs, query)
        return {"jobs": [views.job_view(j, self.cfg) for j in jobs]}

    def accounting(self, caller: Caller, query: dict[str, str]) -> dict[str, Any]:
        ids = _csv(query.get("ids"))
        jobs = self._select(ids, True, purged=True) if ids else self.store.list_jobs()
        if not ids and query.get("all_users") != "1" and not query.get("users") and not self.is_admin(caller):
            jobs = [j for j in jobs if j.uid == caller.uid]
        elif not ids and query.get("all_users") != "1" and not query.get("users"):
            jobs = [j for j in jobs if j.uid == caller.uid] if caller.uid != 0 else jobs
        jobs = _filter(jobs, query)
        start = float(query["start"]) if query.get("start") else None
        end = float(query["end"]) if query.get("end") else None
        usage = self.store.list_usage(job_ids=[j.id for j in jobs])
        rows = acctrows.acct_rows(jobs, usage, duplicates=query.get("duplicates") == "1", start=start, end=end)
        return {"records": rows}

    def nodes(self) -> dict[str, Any]:
        running = self.store.list_jobs(states=["RUNNING"])
        return views.node_views(self.store.list_nodes(), running, self.cfg)

    def controller_status(self) -> dict[str, Any]:
        """Who holds the controller role (replaced by the daemon, which knows)."""
        return {"node": None, "pid": None, "since": None}

    def set_node_state(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        """`batchd node drain|resume|down NAME --reason`: admins only; audited. DRAIN takes
        no new jobs while running ones finish; RESUME makes the node schedulable again."""
        if not self.is_admin(caller):
            raise PermissionDenied("only an administrator may change a node's state")
        name, action = body.get("node"), body.get("action")
        states = {"drain": "DRAIN", "resume": "IDLE", "down": "DOWN"}
        if action not in states:
            raise InvalidRequest(f"unknown node action {action!r} (drain, resume, down)")
        reason = body.get("reason") or None
        if action in ("drain", "down") and not reason:
            raise InvalidRequest("a reason is required (--reason)")
        if not self.store.set_node_state(str(name), states[action], None if action == "resume" else reason,
                                         caller.uid):
            raise NotFound(f"Invalid node name specified: {name}")
        self.wake()
        return {"node": name, "state": states[action]}

    # ------------------------------------------------------------------ changes
    def _owned(self, caller: Caller, ids: list[str], verb: str) -> tuple[list[Job], list[dict[str, str]]]:
        jobs, errors = [], []
        for raw in ids:
            try:
                found = self._select([raw], True)
            except ValueError:
                errors.append({"id": raw, "message": "Invalid job id specified"})
                continue
            if not found:
                errors.append({"id": raw, "message": "Invalid job id specified"})
                continue
            for j in found:
                if not self._may_modify(caller, j):
                    errors.append({"id": raw, "message": "Access/permission denied"})
                else:
                    jobs.append(j)
        return jobs, errors

    def signal_jobs(self, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
        """scancel: `signal` None cancels; otherwise the signal goes to running jobs. A
        signal the kernel would refuse never reaches a supervisor (api.py's wire check
        refuses it first; this guards direct callers)."""
        ids = [str(i) for i in body.get("ids") or []]
        filters = body.get("filters") or {}
        sig = body.get("signal")
        if sig is not None and (type(sig) is not int or not 0 <= sig <= _signal.SIGRTMAX):
            raise InvalidRequest(f"signal: must be an integer between 0 and {int(_signal.SIGRTMAX)} (got {sig!r})")
        if ids:
            jobs, errors = self._owned(caller, ids, "cancel")
        else:
            errors = []
            jobs = [j for j in self.store.list_jobs(states=ACTIVE_STATES)]
            jobs = _filter(jobs, {k: ",".join(v) if isinstance(v, list) else v for k, v in filters.items()})
            if not self.is_admin(caller):
                jobs = [j for j in jobs if j.uid == caller.uid]
        if ids and filters:
            jobs = _filter(jobs, {k: ",".join(v) if isinstance(v, list) else v for k, v in filters.items()})
        done = []
        now = time.time()
        for j in jobs:
            if j.state not in ACTIVE_STATES:
                errors.append({"id": j.display_id, "message": "Job/step already completing or completed"})
                continue
            if sig is not None and sig != 0:
                if j.state != "RUNNING":
                    if sig in (_signal.SIGKILL, _signal.SIGTERM) and j.state == "PENDING":
                        pass
                    else:
                        continue
                else:
                    tag = f"signal:{int(sig)}" + (":b" if body.get("batch_only") else "")
                    if self.store.update_job(j.id, ("RUNNING",), action=tag, action_by=caller.uid):
                        done.append(j.display_id)
                    continue
            if j.state == "PENDING":
                # the job keeps its last pending reason, as squeue -t all shows it
                if self.store.update_job(j.id, ("PENDING",), state="CANCELLED", end_time=now,
                                         action_by=caller.uid):
                    done.append(j.display_id)
            elif self.store.update_job(j.id, ("RUNNING", "SUSPENDED"), action="cancel", action_by=caller.uid):
                done.append(j.display_id)
            if caller.uid != j.uid:
                self.store.audit(caller.uid, "job.cancel", {"job": j.id})
        self.wake()
        return {"done": done, "errors": errors}

    def hold(self, caller: Caller, ids: list[str], release: bool = False, user: bool = False) -> dict[str, Any]:
        """scontrol hold / uhold / release of pending jobs. An admin's hold of another
        user's job is JobHeldAdmin (only an admin may release it), unless `user` (uhold);
        a user's own hold is JobHeldUser. Release clears either and lets a job that
        `requeuehold` held wait out its requeue begin time (BeginTime)."""
        jobs, errors = self._owned(caller, ids, "hold")
        admin = self.is_admin(caller)
        done = []
        for j in jobs:
            if j.state != "PENDING":
                errors.append({"id": j.display_id, "message": "Job is no longer pending execution"})
                continue
            if release:
                if j.hold and j.reason == "JobHeldAdmin" and not admin:
                    errors.append({"id": j.display_id, "message": "Access/permission denied"})
                    continue
                req = dict(j.request)
                req.pop("requeue_hold", None)
                ok = self.store.update_job(j.id, ("PENDING",), hold=False, reason="None", priority=1,
                                           request=req)
            else:
                held = "JobHeldAdmin" if admin and caller.uid != j.uid and not user else "JobHeldUser"
                ok = self.store.update_job(j.id, ("PENDING",), hold=True, reason=held, priority=0)
            if ok:
                done.append(j.display_id)
                if caller.uid != j.uid:
                    self.store.audit(caller.uid, "job.release" if release else "job.hold", {"job": j.id})
        self.wake()
        return {"done": done, "errors": errors}

    def requeue(self, caller: Caller, ids: list[str], hold: bool = False) -> dict[str, Any]:
        """scontrol requeue: a running job ends its run (state REQUEUED) and pends again
        with the same id, restarts + 1, begin time two minutes on. `hold` (requeuehold)
        keeps it held afterwards, reason "job requeued in held state", until released."""
        jobs, errors = self._owned(caller, ids, "requeue")
        done = []
        for j in jobs:
            if j.state != "RUNNING":
                errors.append({"id": j.display_id, "message": "Job is not running"})
                continue
            vals: dict[str, Any] = {"action": "requeue", "action_by": caller.uid}
            if hold:
                # the run's end keeps `hold`; the controller words the reason from the flag
                vals.update(hold=True, request={**j.request, "requeue_hold": True})
            if self.store.update_job(j.id, ("RUNNING",), **vals):
                done.append(j.display_id)
                if caller.uid != j.uid:
                    self.store.audit(caller.uid, "job.requeue", {"job": j.id, "hold": hold})
        self.wake()
        return {"done": done, "errors": errors}

    def update(self, caller: Caller, ids: list[str], changes: dict[str, Any]) -> dict[str, Any]:
        allowed = {"time_limit_s", "nice", "account", "name", "comment", "partition", "qos", "begin_time"}
        bad = set(changes) - allowed
        if bad:
            raise InvalidRequest(f"Update of {sorted(bad)[0]} is not supported")
        jobs, errors = self._owned(caller, ids, "update")
        admin = self.is_admin(caller)
        done = []
        for j in jobs:
            vals = dict(changes)
            if "nice" in vals and int(vals["nice"]) < 0 and not admin:
                errors.append({"id": j.display_id, "message": "Access/permission denied"})
                continue
            if j.state != "PENDING" and set(vals) & {"account", "partition", "qos", "begin_time"}:
                errors.append({"id": j.display_id, "message": "Job is no longer pending execution"})
                continue
            if "time_limit_s" in vals and not admin and j.time_limit_s not in (None, -1):
                new = int(vals["time_limit_s"])
                if new == -1 or new > j.time_limit_s:
                    errors.append({"id": j.display_id, "message": "Access/permission denied"})
                    continue
            if "account" in vals:
                info = self.cluster_info(j.user)
                if vals["account"] not in info["user_accounts"]:
                    errors.append({"id": j.display_id,
                                   "message": "Invalid account or account/partition combination specified"})
                    continue
            # the partition and QOS must exist (Slurm's words and exit 1): an unknown one would
            # let the job run outside its partition's nodes or its QOS's limits
            if "partition" in vals and vals["partition"] not in {p.name for p in self.cfg.partitions}:
                errors.append({"id": j.display_id, "message": "Invalid partition name specified"})
                continue
            if "qos" in vals and vals["qos"] not in {q.name for q in self.cfg.qos}:
                errors.append({"id": j.display_id, "message": "Invalid qos specification"})
                continue
            if "begin_time" in vals:
                # StartTime=: the new begin time is the job's EligibleTime too (Slurm)
                begin = float(vals["begin_time"]) if vals["begin_time"] is not None else None
                vals["begin_time"] = begin
                vals["eligible_time"] = begin if begin else time.time()
                if j.reason == "BeginTime":
                    vals["reason"] = "None"
            if self.store.update_job(j.id, tuple(ACTIVE_STATES), **vals):
                done.append(j.display_id)
                if caller.uid != j.uid:
                    self.store.audit(caller.uid, "job.update", {"job": j.id, "changes": vals})
        self.wake()
        return {"done": done, "errors": errors}


def _csv(v: str | None) -> list[str] | None:
    if not v:
        return None
    return [x for x in v.split(",") if x]


def _filter(jobs: list[Job], q: dict[str, Any]) -> list[Job]:
    def want(key: str) -> set[str] | None:
        v = q.get(key)
        return set(_csv(v) or []) or None

    users, accounts, parts = want("users"), want("accounts"), want("partitions")
    states, names, qos = want("states"), want("names"), want("qos")
    out = []
    for j in jobs:
        if users and j.user not in users and str(j.uid) not in users:
            continue
        if accounts and j.account not in accounts:
            continue
        if parts and j.partition not in parts:
            continue
        if states and j.state not in states:
            continue
        if names and j.name not in names:
            continue
        if qos and j.qos not in qos:
            continue
        out.append(j)
    return out


__all__ = ["Caller", "Service", "SubmitError", "NotFound", "PermissionDenied", "Conflict"]
