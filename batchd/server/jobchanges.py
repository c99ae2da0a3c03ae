"""Changes to stored jobs: scancel (`signal_jobs`), scontrol hold / uhold / release
(`hold`), requeue / requeuehold (`requeue`) and update (`update`).

`JobChanges` is a mixin of `batchd.server.service.Service`, which supplies `cfg`, `store`,
`wake`, `is_admin`, `require_owner`, `_select` and `cluster_info`. Users change only their
own jobs (`require_owner`), admins any (audited when the job is another user's); each job
that cannot be changed gets a Slurm-worded entry in the reply's `errors`, the others'
display ids are in `done`. Every change goes through the store and wakes the controller.
"""

from __future__ import annotations

import signal as _signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from batchd.config import Config
from batchd.errors import InvalidRequest, PermissionDenied, SubmitError
from batchd.model import Job, SubmitFacts
from batchd.server import messages as m
from batchd.server.caller import Caller
from batchd.server.jobfilter import filter_jobs
from batchd.server.jobspec import check_node_names
from batchd.slurm.assocpolicy import Effective
from batchd.store import ACTIVE_STATES, Store, jobviews


class JobChanges:
    """`signal_jobs`, `hold`, `requeue`, `update`; mixed into `batchd.server.service.Service`."""

    cfg: Config
    store: Store
    wake: Callable[[], None]

    if TYPE_CHECKING:
        def is_admin(self, caller: Caller) -> bool: ...

        def require_owner(self, caller: Caller, job: Job, message: str = ...) -> None: ...

        def _select(self, ids: list[str] | None, all_jobs: bool, purged: bool = False,
                    light: bool = False) -> list[Job]: ...

        def policy_of(self, account: str, user: str, facts: SubmitFacts | None = None) -> Effective: ...

        def cluster_info(self, user: str, facts: SubmitFacts | None = None) -> dict[str, Any]: ...

    def _owned(self, caller: Caller, ids: list[str], verb: str,
               light: bool = False) -> tuple[list[Job], list[m.JobError]]:
        """The jobs `ids` name that `caller` may change (require_owner), and an error per id
        it may not (or that names nothing). `light`: without spec and request (see `_select`)."""
        jobs: list[Job] = []
        errors: list[m.JobError] = []
        for raw in ids:
            try:
                found = self._select([raw], True, light=light)
            except ValueError:
                errors.append({"id": raw, "message": "Invalid job id specified"})
                continue
            if not found:
                errors.append({"id": raw, "message": "Invalid job id specified"})
                continue
            for j in found:
                try:
                    # Slurm's words: update_job's ESLURM_USER_ID_MISSING, the others' ACCESS_DENIED
                    self.require_owner(caller, j, "Invalid user id" if verb == "update" else
                                       "Access/permission denied")
                except PermissionDenied as e:
                    errors.append({"id": raw, "message": e.message})
                else:
                    jobs.append(j)
        return jobs, errors

    def signal_jobs(self, caller: Caller, body: dict[str, Any]) -> m.DoneReply:
        """scancel: `signal` None cancels; otherwise the signal goes to running jobs. A
        signal the kernel would refuse never reaches a supervisor (api.py's wire check
        refuses it first; this guards direct callers)."""
        ids = [str(i) for i in body.get("ids") or []]
        filters = body.get("filters") or {}
        sig = body.get("signal")
        if sig is not None and (type(sig) is not int or not 0 <= sig <= _signal.SIGRTMAX):
            raise InvalidRequest(f"signal: must be an integer between 0 and {int(_signal.SIGRTMAX)} (got {sig!r})")
        # the jobs are read without their specs and requests: cancelling an array of
        # 10,000 tasks reads their ids, states and owners, not 10,000 scripts
        errors: list[m.JobError]
        if ids:
            jobs, errors = self._owned(caller, ids, "cancel", light=True)
        else:
            errors = []
            jobs = jobviews.list_job_heads(self.store, jobviews.JobQuery(states=ACTIVE_STATES))
            jobs = filter_jobs(jobs, {k: ",".join(v) if isinstance(v, list) else v for k, v in filters.items()})
            if not self.is_admin(caller):
                jobs = [j for j in jobs if j.uid == caller.uid]
        if ids and filters:
            jobs = filter_jobs(jobs, {k: ",".join(v) if isinstance(v, list) else v for k, v in filters.items()})
        now = time.time()
        # every change is a compare-and-set, all in one transaction (10,000 array tasks: one
        # write, not 10,000)
        changes: list[tuple[int, tuple[str, ...] | None, dict[str, Any]]] = []
        shown: dict[int, str] = {}
        others: dict[int, str] = {}  # another user's job -> the audited action
        for j in jobs:
            if j.id in shown:
                continue  # named twice: once is enough
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
                    changes.append((j.id, ("RUNNING",), {"action": tag, "action_by": caller.uid}))
                    shown[j.id] = j.display_id
                    if caller.uid != j.uid:
                        others[j.id] = "job.signal"
                    continue
            if j.state == "PENDING":
                # the job keeps its last pending reason, as squeue -t all shows it
                changes.append((j.id, ("PENDING",), {"state": "CANCELLED", "end_time": now,
                                                      "action_by": caller.uid}))
            else:
                changes.append((j.id, ("RUNNING", "SUSPENDED"), {"action": "cancel", "action_by": caller.uid}))
            shown[j.id] = j.display_id
            if caller.uid != j.uid:
                others[j.id] = "job.cancel"
        changed = set(self.store.update_jobs(changes)) if changes else set()
        done = [shown[jid] for jid, _, _ in changes if jid in changed]
        for jid, action in others.items():
            self.store.audit(caller.uid, action, {"job": jid, **({"signal": sig} if action == "job.signal" else {})})
        self.wake()
        return {"done": done, "errors": errors}

    def hold(self, caller: Caller, ids: list[str], release: bool = False, user: bool = False) -> m.DoneReply:
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

    def requeue(self, caller: Caller, ids: list[str], hold: bool = False) -> m.DoneReply:
        """scontrol requeue: a running job ends its run (state REQUEUED) and pends again
        with the same id, restarts + 1, begin time two minutes on. `hold` (requeuehold)
        keeps it held afterwards, reason "job requeued in held state", until released."""
        jobs, errors = self._owned(caller, ids, "requeue")
        done = []
        for j in jobs:
            if j.state != "RUNNING":
                errors.append({"id": j.display_id, "message": "Job is not running"})
                continue
            if not j.requeue:
                # submitted --no-requeue: Slurm 22.05 refuses and the job keeps running
                errors.append({"id": j.display_id, "message": "Requested operation is presently disabled"})
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

    def _may_set_limit(self, j: Job, new: int) -> bool:
        """Whether a user who is not an administrator may give job `j` the time limit `new`
        (seconds, -1 UNLIMITED), as Slurm 22.05 decides (tests/compat/test_time_limits.py):
        the same or a lower limit always; a higher one only while the job pends and only up
        to its partition's MaxTime."""
        old = _limit_key(j.time_limit_s)
        if _limit_key(new) <= old:
            return True
        part = next((p for p in self.cfg.partitions if p.name == j.partition), None)
        return j.state == "PENDING" and part is not None and _limit_key(new) <= _limit_key(part.max_time_s)

    def update(self, caller: Caller, ids: list[str], changes: dict[str, Any]) -> m.DoneReply:
        """scontrol update JobId=...: time limit, nice, account, name, comment, partition,
        QOS, begin time. A time limit an administrator sets may exceed the partition's
        MaxTime (the job's request keeps `time_limit_admin`); a new limit of a running job
        reaches its supervisor through the node agent (`batchd.node.agent`)."""
        allowed = {"time_limit_s", "nice", "account", "name", "comment", "partition", "qos", "begin_time",
                   "nodelist", "exclude"}
        bad = set(changes) - allowed
        if bad:
            raise InvalidRequest(f"Update of {sorted(bad)[0]} is not supported")
        tl = changes.get("time_limit_s", -1)
        if type(tl) is not int or (tl < 1 and tl != -1):
            # api.py's wire check refuses it first; this guards direct callers: a zero or
            # negative limit must never reach a supervisor, which reads it as "none"
            raise InvalidRequest(f"time_limit_s: must be an integer >= 1 or -1 (UNLIMITED) (got {tl!r})")
        jobs, errors = self._owned(caller, ids, "update")
        admin = self.is_admin(caller)
        done = []
        for j in jobs:
            vals = dict(changes)
            if "nice" in vals and int(vals["nice"]) < 0 and not admin:
                errors.append({"id": j.display_id, "message": "Access/permission denied"})
                continue
            if j.state != "PENDING" and set(vals) & {"account", "partition", "qos", "begin_time", "nodelist",
                                                     "exclude"}:
                errors.append({"id": j.display_id, "message": "Job is no longer pending execution"})
                continue
            if "time_limit_s" in vals:
                if not admin and not self._may_set_limit(j, int(vals["time_limit_s"])):
                    errors.append({"id": j.display_id, "message": "Access/permission denied"})
                    continue
                # the limit is the job's own now (no partition limit a requeue gives back); an
                # administrator's is Slurm's ADMIN_SET_LIMIT: it may exceed the partition's MaxTime
                req = {k: v for k, v in j.request.items() if k != "time_limit_partition"}
                vals["request"] = {**req, "time_limit_admin": True} if admin else req
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
            if {"qos", "partition", "account"} & set(vals):
                # the association's allowed QOS and partitions hold for changes too (Slurm)
                e = self.policy_of(vals.get("account", j.account), j.user)
                qos, part = vals.get("qos", j.qos), vals.get("partition", j.partition)
                if e.qos is not None and qos not in e.qos:
                    errors.append({"id": j.display_id, "message": "Invalid qos specification"})
                    continue
                if e.partitions is not None and part not in e.partitions:
                    errors.append({"id": j.display_id,
                                   "message": "Invalid account or account/partition combination specified"})
                    continue
            lists = {k: vals.pop(k) for k in ("nodelist", "exclude") if k in vals}
            if lists:
                # NodeList=/ExcNodeList= (-w/-x of a pending job): names the cluster has, as at submit
                try:
                    check_node_names(lists, self.cluster_info(j.user), overlap=False)
                except SubmitError as e:
                    errors.append({"id": j.display_id, "message": e.message})
                    continue
                vals["spec"] = {**j.spec, **lists}
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
                    self.store.audit(caller.uid, "job.update", {"job": j.id, "changes": {
                        k: v for k, v in vals.items() if k != "request"}})
        self.wake()
        return {"done": done, "errors": errors}


def _limit_key(limit_s: int | None) -> float:
    """A time limit for comparison: None and -1 (UNLIMITED) above every number."""
    return float("inf") if limit_s is None or limit_s < 0 else float(limit_s)
