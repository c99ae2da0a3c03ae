"""The service layer: every user-visible operation, with its authorization.

`api.py` parses requests and calls these methods; tests call them without a socket.
A `Caller` (`batchd.server.caller`) is who asked (uid/gid from SO_PEERCRED). Users may see
every job but change only their own; admins (root, the daemon's own uid in dev mode, or
members of the configured admin group) may do anything, and their actions on others'
jobs are audited.

Authorization is two checks, used by every operation that needs one (here, in the
mixins and in the route handlers of `batchd.server.steps`, `batchd.server.accounts` and
`batchd.accounting.routes`): `require_admin(caller)` for what only an administrator may
do (node state, accounts, prices, rollups) and `require_owner(caller, job)` for what only
a job's owner or an administrator may do to it (cancel, signal, hold, release, requeue,
update, steps). Both raise `PermissionDenied` (HTTP 403, code AccessDenied); the job
changes turn it into the per-job error Slurm prints. `is_admin` answers the finer
questions that are no refusal (an admin's hold is JobHeldAdmin, a report's scope).

`Service` holds identity, the cluster facts a submission is resolved against
(`cluster_info`) and the queries (squeue, sacct, nodes, node state); the submit path is
`batchd.server.submission.Submission` and the job changes (scancel, hold, requeue, update) are
`batchd.server.jobchanges.JobChanges`, both mixed in here.
"""

from __future__ import annotations

import dataclasses
import grp
import logging
import os
import pwd
import time
from collections.abc import Callable
from typing import Any

from batchd.config import Config
from batchd.errors import Conflict, InvalidRequest, NotFound, PermissionDenied, SubmitError
from batchd.model import Job, SubmitFacts
from batchd.server import acctrows, views
from batchd.server import messages as m
from batchd.server.caller import Caller, user_name
from batchd.server.jobchanges import JobChanges
from batchd.server.jobfilter import split_csv
from batchd.server.submission import Submission
from batchd.server.tokens import Tokens
from batchd.server.viewmemo import ViewList, ViewMemo, trimmed
from batchd.slurm import hostlist
from batchd.store import Store, jobviews

log = logging.getLogger(__name__)


class Service(Submission, JobChanges):
    def __init__(self, cfg: Config, store: Store, wake: Callable[[], None] = lambda: None,
                 snapshot: Callable[..., dict[str, Any]] | None = None,
                 controller: Callable[[], dict[str, Any]] | None = None,
                 decisions: Callable[[], dict[str, Any]] | None = None):
        """`wake` wakes the scheduling cycle; the daemon supplies what only it knows: the live
        `snapshot`, who holds the `controller` role, the cycle's last `decisions`."""
        self.cfg = cfg
        self.store = store
        self.wake = wake
        self._snapshot = snapshot
        self._controller = controller
        self._decisions = decisions
        self._view_memo = ViewMemo()
        self.tokens = Tokens(cfg)

    def snapshot(self, query: dict[str, str] | None = None) -> dict[str, Any]:
        """The live scheduler snapshot (docs/snapshot.md), for plan --dump, sshare, sprio;
        `jobs=running` with only the running jobs (sshare), built without reading the others."""
        if self._snapshot is None:
            raise NotFound("no snapshot source configured")
        if query and query.get("jobs") == "running":
            return self._snapshot(running_only=True)
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

    def require_admin(self, caller: Caller, what: str = "do this") -> None:
        """Raise PermissionDenied ("only an administrator may <what>") unless `caller` is an
        administrator."""
        if not self.is_admin(caller):
            raise PermissionDenied(f"only an administrator may {what}")

    def require_owner(self, caller: Caller, job: Job, message: str = "Access/permission denied") -> None:
        """Raise PermissionDenied (Slurm's words by default) unless `caller` owns `job` or is
        an administrator."""
        if caller.uid != job.uid and not self.is_admin(caller):
            raise PermissionDenied(message)

    # ------------------------------------------------------------------ cluster facts
    def cluster_info(self, user: str, facts: SubmitFacts | None = None) -> dict[str, Any]:
        """The plain dict that batchd.server.jobspec.resolve checks a submission against, from
        `facts` (read here, in one transaction, when not given)."""
        if facts is None:
            facts = self.store.submit_facts(user, -1, None)
        accounts = [a.name for a in facts.accounts if a.name != "root"]
        assoc = [a for a in facts.associations if a.get("user") == user]
        mine = sorted({a["account"] for a in assoc} | ({"default"} if "default" in accounts else set()))
        default = next((a["account"] for a in assoc if a["is_default"]), None)
        if default is None:
            default = "default" if "default" in mine else (mine[0] if mine else "default")
        nodes = facts.nodes
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
                             "grace_time_s": q.grace_time_s, "max_wall_s": q.max_wall_s} for q in self.cfg.qos},
            "default_qos": "normal",
            "shard_per_gpu": self.cfg.shard_per_gpu,
            "max_hostlist_names": int(self.cfg.limits["max_hostlist_names"]),
            "max_array_size": min(int(self.cfg.limits["max_array_size"]), 4_000_001),
            "def_mem_per_cpu_mb": self.cfg.def_mem_per_cpu_mb,
            "billing_weights": self.cfg.tres_billing_weights,
        }

    # ------------------------------------------------------------------ queries
    def _in_memory_since(self) -> float:
        """Jobs that ended before this (unix s) are gone from squeue, scontrol and scancel,
        as Slurm purges them after MinJobAge (`[scheduler] min_job_age_s`, default 300 s);
        sacct still has them."""
        return time.time() - float(self.cfg.scheduler.get("min_job_age_s", 300))

    def _select(self, ids: list[str] | None, all_jobs: bool, purged: bool = False,
                light: bool = False) -> list[Job]:
        """Jobs by Slurm id strings (`123`, `123_4`, `123_[1-3]`), or without ids the active
        jobs plus those that ended within MinJobAge (squeue shows them as CD/F/CA), every
        job with `all_jobs`. With ids, jobs purged after MinJobAge only when `purged`.
        `light` (with ids): without their spec and request (the views' columns only)."""
        if ids:
            since = None if purged else self._in_memory_since()
            plain, tasks, pick = _id_pick(ids)
            if light:
                found = jobviews.list_job_heads(self.store, jobviews.JobQuery(
                    ids=frozenset(plain), array_job_ids=frozenset(plain | set(tasks))))
            else:
                found = self.store.list_jobs(ids=plain, array_job_ids=plain | set(tasks))
            out = [j for j in found if pick(j.id, j.array_job_id, j.array_task_id)]
            return [j for j in out if since is None or j.end_time is None or j.end_time >= since]
        return self.store.list_jobs(since=None if all_jobs else self._in_memory_since())

    def _view_query(self, query: dict[str, str], ids: list[str] | None, since: float | None
                    ) -> tuple[jobviews.JobQuery, jobviews.Pick]:
        """The store query for a listing's filters (batchd.server.jobfilter's keys) and job ids
        (as `_select` reads them), and the Python pick that narrows array task lists."""
        def csv(key: str) -> tuple[str, ...] | None:
            return tuple(split_csv(query.get(key)) or ()) or None

        q = jobviews.JobQuery(users=csv("users"), accounts=csv("accounts"), partitions=csv("partitions"),
                              states=csv("states"), names=csv("names"), qos=csv("qos"), ended_since=since)
        if not ids:
            return q, None
        plain, tasks, pick = _id_pick(ids)
        q = dataclasses.replace(q, ids=frozenset(plain), array_job_ids=frozenset(plain | set(tasks)))
        return q, pick

    def list_jobs(self, query: dict[str, str]) -> dict[str, Any]:
        """`_list_jobs`; with `keys` (comma separated JOB_VIEW keys) every view has only those."""
        reply = self._list_jobs(query)
        keys = split_csv(query.get("keys"))
        if not keys:
            return reply
        if "task_runs" in reply:
            reply["task_runs"] = [dict(r, view=trimmed([r["view"]], keys)[0]) for r in reply["task_runs"]]
        reply["jobs"] = self._view_memo.trimmed(reply["jobs"], keys)
        return reply

    def _list_jobs(self, query: dict[str, str]) -> dict[str, Any]:
        """squeue's and scontrol's JOB_VIEWs (by id), filtered in the store. `fold=1`:
        the pending tasks of each job array as one row (`views.fold_pending_tasks`), as
        squeue shows them without -r; `fold=runs`: the pending tasks that never ran as runs
        of alike tasks (`jobviews.list_task_runs`), one view each, which squeue -r expands."""
        ids = split_csv(query.get("ids"))
        # squeue -t all and scontrol see the jobs still in memory (MinJobAge), like Slurm
        q, pick = self._view_query(query, ids, self._in_memory_since())
        keys = (views.SPEC_KEYS, views.REQUEST_KEYS)
        if query.get("nodes"):
            # squeue -w: jobs with nodes in the store; the hostlist is matched here
            try:
                wanted = set(hostlist.expand(query["nodes"]))
            except ValueError as e:
                raise InvalidRequest(f"nodes: {e}") from None
            q = dataclasses.replace(q, on_nodes=True)
            jobs = [j for j in jobviews.list_view_jobs(self.store, q, *keys)
                    if (pick is None or pick(j.id, j.array_job_id, j.array_task_id)) and _on(j, wanted)]
            return {"jobs": [views.job_view(j, self.cfg) for j in jobs]}
        if query.get("fold") == "runs":
            others, runs = jobviews.list_task_runs(self.store, q, *keys, pick=pick)
            return {"jobs": [views.job_view(j, self.cfg) for j in others],
                    "task_runs": [{"view": views.job_view(r.first, self.cfg), "tasks": views.id_segments(r.tasks)}
                                  for r in runs]}
        if query.get("fold") == "1":
            rows, tasks, firsts = jobviews.list_folded_view_rows(self.store, q, *keys, pick=pick)
            first_views = {j.array_job_id: views.job_view(j, self.cfg) for j in firsts
                           if j.array_job_id is not None}
            return {"jobs": views.fold_pending_tasks(self._views_of(rows), tasks, first_views)}
        rows = jobviews.list_view_rows(self.store, q, *keys)
        return {"jobs": self._views_of([r for r in rows if pick is None or
                                        pick(r.id, r.array_job_id, r.array_task_id)])}

    def _views_of(self, rows: list[Any]) -> ViewList:
        """The JOB_VIEWs of rows of `jobviews.list_view_rows`, kept by row (batchd.server.viewmemo)."""
        keys = (views.SPEC_KEYS, views.REQUEST_KEYS)
        return self._view_memo.views(rows, jobviews.ROW_STATE,
                                     lambda r: views.job_view(jobviews.job_of_row(r, *keys), self.cfg))

    def accounting(self, caller: Caller, query: dict[str, str]) -> dict[str, Any]:
        """sacct's ACCT_ROWs: the filters and a loose time window in the store,
        `batchd.server.acctrows` cuts the window exactly. `fold=1`: the pending array tasks that
        never ran as one row per run of alike tasks plus `pending_tasks` (the others' task
        ids by array job id), which sacct folds into the array's one pending row."""
        ids = split_csv(query.get("ids"))
        start = float(query["start"]) if query.get("start") else None
        end = float(query["end"]) if query.get("end") else None
        q, pick = self._view_query(query, ids, None)
        # without ids, all users (-a) or a user list, a user sees their own jobs; root all
        mine = not ids and query.get("all_users") != "1" and not query.get("users") and caller.uid != 0
        q = dataclasses.replace(q, owner_uid=caller.uid if mine else None,
                                window=(start, end) if start is not None or end is not None else None)
        keys = (views.SPEC_KEYS, views.REQUEST_KEYS)
        dup = query.get("duplicates") == "1"
        if query.get("fold") == "1":
            # a never-run pending task has one row, alike every such task's of its array and
            # submit time but for the ids: the first's row stands for them, the others go as
            # task ids (sacct folds them all into the array's one pending row)
            rest = dataclasses.replace(q, fresh_tasks=False)
            jobs = [j for j in jobviews.list_view_jobs(self.store, rest, *keys)
                    if pick is None or pick(j.id, j.array_job_id, j.array_task_id)]
            groups = jobviews.list_fresh_task_groups(self.store, q, *keys, pick=pick)
            usage = jobviews.list_view_usage(self.store, rest)
            rows = acctrows.acct_rows(jobs + [first for first, _t in groups], usage, duplicates=dup,
                                      start=start, end=end)
            more: dict[str, list[int]] = {}
            for first, tasks in groups:
                if tasks and acctrows.acct_rows([first], [], start=start, end=end):
                    more.setdefault(str(first.array_job_id), []).extend(tasks)
            return {"records": rows, "pending_tasks": more} if more else {"records": rows}
        jobs = [j for j in jobviews.list_view_jobs(self.store, q, *keys)
                if pick is None or pick(j.id, j.array_job_id, j.array_task_id)]
        usage = jobviews.list_view_usage(self.store, q)
        rows = acctrows.acct_rows(jobs, usage, duplicates=dup, start=start, end=end)
        return {"records": rows}

    def nodes(self) -> dict[str, Any]:
        running = self.store.list_jobs(states=["RUNNING"])
        return views.node_views(self.store.list_nodes(), running, self.cfg)

    def controller_status(self) -> dict[str, Any]:
        """Who holds the controller role (the daemon knows; without it: nobody known)."""
        if self._controller is None:
            return {"node": None, "pid": None, "since": None}
        return self._controller()

    def last_decisions(self) -> dict[str, Any]:
        """The last scheduling cycle's decisions (`batchd why`), {} without a controller."""
        return {} if self._decisions is None else self._decisions()

    def set_node_state(self, caller: Caller, body: dict[str, Any]) -> m.NodeStateReply:
        """`batchd node drain|resume|down NAME --reason`: admins only; audited. DRAIN takes
        no new jobs while running ones finish; RESUME makes the node schedulable again."""
        self.require_admin(caller, "change a node's state")
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
        return {"node": str(name), "state": states[action]}

    def issue_token(self, caller: Caller, lifespan: int | None, username: str | None) -> m.TokenReply:
        """`scontrol token [lifespan=] [username=]`: a JWT for the caller; for another user
        only an administrator's (Slurm: SlurmUser or root)."""
        user = user_name(caller.uid)
        if username and username != user:
            self.require_admin(caller, "get a token for another user")
            try:
                pwd.getpwnam(username)
            except KeyError:
                raise InvalidRequest(f"Invalid user: {username}") from None
            user = username
        token, expires = self.tokens.issue(user, lifespan)
        log.info("token issued user=%s by_uid=%d expires=%d", user, caller.uid, expires)
        return {"token": token, "user": user, "expires": expires}

    # ------------------------------------------------------------------ changes


def _on(j: Job, nodes: set[str]) -> bool:
    """Whether the job's node list names one of `nodes` (an unreadable list: kept, for the
    command's own check)."""
    try:
        return bool(nodes.intersection(hostlist.expand(j.node_list, None)))
    except ValueError:
        return True


__all__ = ["Caller", "Service", "SubmitError", "NotFound", "PermissionDenied", "Conflict"]


def _id_pick(ids: list[str]) -> tuple[set[int], dict[int, set[int]], Callable[[int, int | None, int | None], bool]]:
    """Slurm id strings (`123`, `123_4`, `123_[1-3]`) as (plain ids, {array id: task ids}, a
    pick(id, array id, task id) that says whether a stored job is one of them): a plain id
    names a job or a whole array, a task list only those tasks."""
    plain: set[int] = set()
    tasks: dict[int, set[int]] = {}
    for raw in ids:
        try:
            jid, task = views.parse_job_id(raw)
        except ValueError:
            raise InvalidRequest(f"Invalid job id specified: {raw}") from None
        if task is None:
            plain.add(jid)
        else:
            tasks.setdefault(jid, set()).update(task)

    def pick(jid: int, aj: int | None, task: int | None) -> bool:
        if aj is not None and aj in tasks:
            return task in tasks[aj]
        return jid in plain or (aj is not None and aj in plain)

    return plain, tasks, pick
