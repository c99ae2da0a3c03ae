"""The submit path of the service: identity, submission token, resolve, insert.

`Submission.submit` (a mixin of `batchd.server.service.Service`, which supplies `cfg`, `store`,
`wake` and `cluster_info`) checks who the job runs as (`submit_identity`: `--uid`/`--gid`,
root only), answers a retried submission from its stored token (`submit_token`) with the
first one's ids, resolves the spec against the cluster facts (`batchd.server.jobspec.resolve`,
with the stored jobs a `--dependency` names) and stores the job or array tasks in one
transaction. `--test-only` stores nothing.
"""

from __future__ import annotations

import grp
import logging
import pwd
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from batchd.config import Config
from batchd.control.jobdeps import dependency_status, lookup_job
from batchd.errors import BatchdError, InvalidRequest, PermissionDenied, SubmitError
from batchd.metrics import SUBMISSIONS
from batchd.model import Job, SubmitFacts
from batchd.server import jobspec
from batchd.server.caller import Caller
from batchd.slurm import dependency as deps
from batchd.slurm.assocpolicy import Effective, PolicyRefusal, check_submit, effective
from batchd.slurm.hostlist import compress
from batchd.store import ACTIVE_STATES, Store

log = logging.getLogger(__name__)

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


class Submission:
    """`submit` and its helpers; mixed into `batchd.server.service.Service`."""

    cfg: Config
    store: Store
    wake: Callable[[], None]

    if TYPE_CHECKING:
        def cluster_info(self, user: str, facts: SubmitFacts | None = None) -> dict[str, Any]: ...

    def submit(self, caller: Caller, spec: dict[str, Any]) -> dict[str, Any]:
        """Store the job (or array) `spec` describes for `caller`; counted by result."""
        try:
            reply = self._submit(caller, spec)
        except BatchdError:
            SUBMISSIONS.labels(result="refused").inc()
            raise
        SUBMISSIONS.labels(result="accepted").inc()
        return reply

    def _submit(self, caller: Caller, spec: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(spec, dict) or not isinstance(spec.get("script", ""), str):
            raise InvalidRequest("malformed job specification")
        caller = submit_identity(caller, spec)  # --uid/--gid (root only): run and charge as that user
        user = caller.user
        # a client-made token per submission: the retry of one whose reply was lost (the
        # daemon died after the commit) gets the same job ids back instead of a second job
        token = None if spec.get("test_only") else submit_token(spec)
        # one read snapshot for every fact the submission is checked against (and the
        # jobs of an earlier try with the same token), one write transaction to store it
        facts = self.store.submit_facts(user, caller.uid, token)
        if facts.repeated:
            return self._repeated_submission(facts.repeated)
        known = self._dependency_jobs(spec, user)
        lookup = None
        if known is not None:
            by_id = {o.id: o for o in known}

            def lookup(job_id: int, task_id: int | None) -> Any:
                return lookup_job(by_id, known, job_id, task_id, "state")
        req = jobspec.resolve(spec, self.cluster_info(user, facts), user, caller.uid, lookup_state=lookup)
        self._check_policy(user, spec, req, facts)
        now = time.time()
        if spec.get("test_only"):
            # Slurm's `Job N to start at T using C processors on nodes NODES in partition P`
            part = next((p for p in self.cfg.partitions if p.name == req["partition"]), None)
            up = {n.name for n in facts.nodes if n.state not in ("DOWN", "DRAIN", "DRAINED")}
            names = [n for n in (part.nodes if part else []) if n in up][: int(req.get("nodes") or 1)]
            return {"job_id": None, "start_time": max(now, req.get("begin_time") or now),
                    "nodes": compress(names), "partition": req["partition"], "cpus": int(req.get("cpus") or 1)}
        task_ids = req.get("array_task_ids") or [None]
        begin = req.get("begin_time")
        # Slurm's EligibleTime at submit: the begin time, or now for a job that nothing holds
        # back (a held job, one with a dependency and an array get theirs once eligible)
        eligible = begin if begin else (None if req.get("hold") or req.get("dependency")
                                        or req.get("array_task_ids") else now)

        stored = req
        if req.get("array_task_ids"):
            # each task stores the array's extent, not its task list (10,000 tasks x 10,000 ids)
            ids = req["array_task_ids"]
            stored = {k: v for k, v in req.items() if k != "array_task_ids"}
            stored.update(array_task_min=min(ids), array_task_max=max(ids), array_task_count=len(ids))

        def build(first: int) -> list[Job]:
            # runs inside the store's write transaction, with the first reserved id
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
                    state="PENDING", submit_time=now, spec=spec, request=stored,
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
            return jobs

        jobs, repeated = self.store.store_submission(len(task_ids), build, caller.uid, token)
        if repeated:  # a concurrent retry of the same submission stored it first
            return self._repeated_submission(jobs)
        first = jobs[-1].id  # a single job's id, or the array's master id (its last task's)
        log.info("job submitted job_id=%s user=%s account=%s tasks=%d", first, user, req["account"],
                 len(task_ids))
        if not req.get("hold"):
            # a held job cannot start, preempt or change another job's chances until it is
            # released (which wakes the cycle); the periodic cycle still sees it
            self.wake()
        return {"job_id": first, "array_task_ids": req.get("array_task_ids")}

    def _check_policy(self, user: str, spec: dict[str, Any], req: dict[str, Any],
                      facts: SubmitFacts | None = None) -> None:
        """The association's policy (batchd.slurm.assocpolicy) at submit: allowed and default QOS,
        allowed partitions, MaxSubmitJobs; sets req["qos"] to the default QOS it applies.
        The active jobs are counted (one indexed COUNT) only under a MaxSubmitJobs limit."""
        e = self.policy_of(req["account"], user, facts)
        new = len(req.get("array_task_ids") or [None])
        active = self.store.count_active_jobs(user, req["account"]) if e.max_submit_jobs is not None else 0
        try:
            qos = check_submit(e, req["qos"], bool(spec.get("qos")), req["partition"], active, new)
        except PolicyRefusal as r:
            raise SubmitError(r.message, exit_code=1, code=r.reason) from None
        if qos != req["qos"]:
            if qos not in {q.name for q in self.cfg.qos} | {"normal"}:
                raise SubmitError("Invalid qos specification", exit_code=1, code="InvalidQOS")
            req["qos"] = qos

    def policy_of(self, account: str, user: str, facts: SubmitFacts | None = None) -> Effective:
        """The association policy `user` works under in `account` (inheritance applied),
        from `facts` (read here when not given)."""
        if facts is None:
            facts = self.store.submit_facts(user, -1, None)
        accts = facts.accounts
        return effective(account, user, {a.name: a.parent for a in accts},
                         {a.name: a.policy or {} for a in accts},
                         {(x["user"], x["account"]): x.get("policy") or {} for x in facts.associations
                          if x["user"] == user})

    @staticmethod
    def _repeated_submission(jobs: list[Job]) -> dict[str, Any]:
        """The reply to a submission whose token is already stored (`jobs`, ordered by id):
        the ids the first one got, with `duplicate`; nothing is stored again."""
        j = jobs[0]
        first = j.array_job_id if j.array_job_id is not None else j.id
        log.info("job submission repeated job_id=%s user=%s tasks=%d token=%s", first, j.user, len(jobs),
                 j.submit_token)
        return {"job_id": first, "array_task_ids": array_task_ids(j), "duplicate": True}

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


def array_task_ids(j: Job) -> list[int] | None:
    """The task ids of the array `j` is a task of (None for a plain job): stored in the
    request by older versions, else read again from its `--array` text."""
    r = j.request
    if r.get("array_task_ids"):
        return list(r["array_task_ids"])
    if j.array_task_id is None:
        return None
    from batchd.slurm import arrayspec

    try:
        return arrayspec.parse(j.spec.get("array") or "", 4_000_001)[0]
    except arrayspec.ArraySpecError:
        return None
