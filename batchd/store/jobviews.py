"""Read-only job queries for the views (squeue, scontrol show job, sacct): the filters are
in the SQL, only the columns the views read are loaded, and rows become `batchd.model`
dataclasses without ORM objects. Each function is one transaction on a `Store`.

A job's `spec` (its light part: the script, environment and argv are in `job_scripts`,
batchd.store.jobscripts, and no view reads them) and `request` (an array task's carries
the whole array's task list) are loaded with only the keys the caller names
(`spec_keys`, `request_keys`): SQLite extracts them (`json_extract` with several paths
parses each document once); PostgreSQL sends the documents as they are, but drops the
heavy keys of a long request (an older record's task list) from a `jsonb` copy. A key stored as JSON null is left out, as
a missing key: the views read both alike (`.get`). A spec or request that is not a
JSON object (a malformed record) is loaded whole, for the views' fallbacks.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import (
    ColumnElement,
    String,
    Text,
    and_,
    case,
    cast,
    false,
    func,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy.orm import Session, aliased

from batchd.model import Job, UsageRec
from batchd.store import Store
from batchd.store.batches import batches
from batchd.store.tables import JobRow, UsageRecord

#: a document longer than this (characters) has its heavy keys dropped by PostgreSQL (`_extract`)
_LONG = 4096
#: request keys PostgreSQL drops before sending the rest (the rest is filtered to the keys asked)
_HEAVY_REQUEST_KEYS = ("array_task_ids",)
#: Job fields loaded as they are (all but spec, request and the ones no view reads)
_PLAIN = tuple(c for c in ("id", "name", "user", "uid", "gid", "account", "partition", "qos", "state",
                           "submit_time", "array_job_id", "array_task_id", "reason", "priority", "nice",
                           "hold", "eligible_time", "begin_time", "start_time", "end_time", "time_limit_s",
                           "exit_code", "exit_signal", "restarts", "requeue", "dependency", "comment",
                           "node_list", "tres_req", "tres_alloc", "billing", "allocation", "action",
                           "action_by", "start_estimate"))


@dataclass(frozen=True)
class JobQuery:
    """Which jobs: every field given must match (None = any). `users` are login names or
    uids as text; `ids` job ids, `array_job_ids` the arrays whose every task is wanted (a
    job is selected when either matches); `ended_since` keeps jobs not ended or ended at
    or after it (unix s); `owner_uid` only that user's jobs; `window` sacct's -S/-E
    (start, end), kept loosely: every job that may have a row in the window is selected
    (`batchd.server.acctrows` cuts exactly); `pending_tasks` True only the pending tasks of job
    arrays, False everything else; `on_nodes` only jobs with nodes allocated."""
    ids: frozenset[int] | None = None
    array_job_ids: frozenset[int] | None = None
    users: tuple[str, ...] | None = None
    accounts: tuple[str, ...] | None = None
    partitions: tuple[str, ...] | None = None
    states: tuple[str, ...] | None = None
    names: tuple[str, ...] | None = None
    qos: tuple[str, ...] | None = None
    ended_since: float | None = None
    owner_uid: int | None = None
    window: tuple[float | None, float | None] | None = None
    pending_tasks: bool | None = None
    fresh_tasks: bool | None = None
    on_nodes: bool = False


def _conditions(q: JobQuery, store: Store) -> list[ColumnElement[bool]]:
    """`q` as WHERE conditions for `store`'s database. A time condition that is an OR of
    index ranges is, on SQLite, a subquery of ids (see the window below); PostgreSQL
    combines the ranges itself (a bitmap OR), and there the subquery is a self-join whose
    plan, with statistics taken before a 10,000-task array came, was a nested loop over
    both sides (10,000 x 10,000 rows: 17 s for squeue)."""
    c: list[ColumnElement[bool]] = []
    ids_of = ((lambda cond: cond) if store.engine.dialect.name == "postgresql"
              else (lambda cond: JobRow.id.in_(select(JobRow.id).where(cond))))
    if q.ids is not None or q.array_job_ids is not None:
        by_id = JobRow.id.in_(sorted(q.ids)) if q.ids else false()
        by_array = JobRow.array_job_id.in_(sorted(q.array_job_ids)) if q.array_job_ids else false()
        c.append(or_(by_id, by_array))
    if q.users:
        # a number beyond any uid (a 64-bit column would overflow) matches no job as a uid
        uids = [int(u) for u in q.users if u.isascii() and u.isdigit() and str(int(u)) == u and int(u) < 2**32]
        c.append(or_(JobRow.user.in_(q.users), JobRow.uid.in_(uids) if uids else false()))
    for col, vals in ((JobRow.account, q.accounts), (JobRow.partition, q.partitions), (JobRow.state, q.states),
                      (JobRow.name, q.names), (JobRow.qos, q.qos)):
        if vals:
            c.append(col.in_(vals))
    if q.ended_since is not None:
        c.append(ids_of(or_(JobRow.end_time.is_(None), JobRow.end_time >= q.ended_since)))
    if q.owner_uid is not None:
        c.append(JobRow.uid == q.owner_uid)
    if q.window is not None:
        start, end = q.window
        if start is not None:
            # a run's end is never after its job's end; an active job has no end yet. As a
            # subquery of ids: with the outer ORDER BY id beside it, SQLite would read the
            # whole table in id order rather than the three index ranges (end_time NULL,
            # end_time >= start, the active states of ix_jobs_state_end_time_ids)
            c.append(ids_of(or_(JobRow.end_time.is_(None), JobRow.end_time >= start,
                                JobRow.state.in_(("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")))))
        if end is not None:
            # every row of a job starts at or after its submission (kept across requeues)
            c.append(JobRow.submit_time <= end)
    if q.pending_tasks is not None:
        is_task = and_(JobRow.state == "PENDING", JobRow.array_job_id.is_not(None),
                       JobRow.array_task_id.is_not(None))
        c.append(is_task if q.pending_tasks else ~is_task)
    if q.fresh_tasks is not None:
        is_fresh = and_(JobRow.state == "PENDING", JobRow.array_job_id.is_not(None),
                        JobRow.array_task_id.is_not(None), JobRow.restarts == 0)
        c.append(is_fresh if q.fresh_tasks else ~is_fresh)
    if q.on_nodes:
        c.append(JobRow.node_list != "")
    return c or [true()]


def _extract(store: Store, col: Any, keys: Sequence[str], heavy: Sequence[str], label: str) -> list[Any]:
    """The columns that carry `keys` of the JSON document `col` (see the module's doc)."""
    if store.engine.dialect.name == "sqlite":
        # an object by its first character, which costs no parse (json_type would parse the
        # whole document once more than json_extract does): the stored text is json.dumps',
        # and a document that does not start with "{" goes whole to `_document`, which
        # reads an object there too
        obj = func.substr(col, 1, 1) == "{"
        vals = func.json_extract(col, *[f"$.{k}" for k in keys], type_=String)
        return [case((obj, vals), else_=None).label(f"{label}_vals"),
                case((obj, None), else_=func.json(col, type_=String)).label(f"{label}_raw")]
    name = f"{col.table.name}.{col.name}"
    if not heavy:  # the document as it is: a jsonb copy would parse it for nothing
        return [literal_column("NULL").label(f"{label}_vals"),
                literal_column(f"{name}::text", String).label(f"{label}_raw")]
    # the heavy keys dropped from a jsonb copy only where the document is long: the copy
    # parses the whole document (a 600-byte request: 19 ms per 1,000 rows, against 4 ms
    # sent as it is); `_document` keeps only `keys` of what comes. A heavy key is long
    # (older records' array task lists), and the text's length costs no parse.
    drop = "{" + ",".join(heavy) + "}"
    return [literal_column("NULL").label(f"{label}_vals"),
            literal_column(f"CASE WHEN length({name}::text) > {_LONG} AND jsonb_typeof({name}::jsonb) = 'object' "
                           f"THEN ({name}::jsonb - '{drop}'::text[])::text ELSE {name}::text END",
                           String).label(f"{label}_raw")]


def _document(vals: Any, raw: Any, keys: Sequence[str]) -> Any:
    if vals is not None:
        return {k: v for k, v in zip(keys, json.loads(vals), strict=True) if v is not None}
    doc = json.loads(raw) if isinstance(raw, str) else raw
    if isinstance(doc, dict):
        return {k: doc[k] for k in keys if doc.get(k) is not None}
    return doc


def list_view_jobs(store: Store, q: JobQuery, spec_keys: Sequence[str], request_keys: Sequence[str]) -> list[Job]:
    """The jobs `q` selects, ordered by id, with only `spec_keys` of their spec and
    `request_keys` of their request (see the module's doc); `charge`, `submit_token`
    and `launched_run` are not loaded (None)."""
    if len(spec_keys) < 2 or len(request_keys) < 2:
        # SQLite's json_extract returns a JSON array only for two paths or more
        raise ValueError("list_view_jobs: name at least two spec keys and two request keys")
    with store.read() as s:
        return _load(s, store, q, spec_keys, request_keys)


def _select_view(store: Store, q: JobQuery, spec_keys: Sequence[str], request_keys: Sequence[str]) -> Any:
    # the allocation as text, decoded by `_job` (the JSON type would decode every row's, most
    # of them null, also where a kept view makes the job unnecessary: batchd.server.viewmemo)
    cols: list[Any] = [cast(JobRow.allocation, Text).label(c) if c == "allocation" else getattr(JobRow, c)
                       for c in _PLAIN]
    return (select(*cols, *_extract(store, JobRow.spec, spec_keys, (), "spec"),
                   *_extract(store, JobRow.request, request_keys, _HEAVY_REQUEST_KEYS, "request"))
            .where(*_conditions(q, store)).order_by(JobRow.id))


def _job(m: Any, spec_keys: Sequence[str], request_keys: Sequence[str]) -> Job:
    """A Job from one row of `_select_view`."""
    alloc = m["allocation"]
    return Job(spec=_document(m["spec_vals"], m["spec_raw"], spec_keys),
               request=_document(m["request_vals"], m["request_raw"], request_keys),
               **{k: m[k] for k in _PLAIN if k != "allocation"},
               allocation=json.loads(alloc) if isinstance(alloc, str) else alloc)


def _load(s: Session, store: Store, q: JobQuery, spec_keys: Sequence[str], request_keys: Sequence[str]) -> list[Job]:
    return [_job(r._mapping, spec_keys, request_keys)
            for r in s.connection().execute(_select_view(store, q, spec_keys, request_keys)).all()]


def _load_ids(s: Session, store: Store, ids: Iterable[int], spec_keys: Sequence[str], request_keys: Sequence[str],
              q: JobQuery = JobQuery()) -> dict[int, Job]:
    """The jobs of `ids` that `q` also selects, by id (in id order), loaded as `_load` loads
    them, `batches` of ids a query."""
    order = sorted(set(ids))
    out: dict[int, Job] = {}
    for part in batches(order):
        out.update((j.id, j) for j in _load(s, store, replace(q, ids=frozenset(part)), spec_keys, request_keys))
    return out


#: the position of `state` in a row of `list_view_rows`
ROW_STATE = _PLAIN.index("state")


def list_view_rows(store: Store, q: JobQuery, spec_keys: Sequence[str], request_keys: Sequence[str]) -> list[Any]:
    """`list_view_jobs`' rows as the database gives them (tuples: the plain columns, then
    each document's extracted keys), for callers that keep views by row
    (`batchd.server.viewmemo`); `job_of_row` makes the job of one."""
    with store.read() as s:
        return list(s.connection().execute(_select_view(store, q, spec_keys, request_keys)).all())


def job_of_row(row: Any, spec_keys: Sequence[str], request_keys: Sequence[str]) -> Job:
    """The job of a row of `list_view_rows`, as `list_view_jobs` loads it."""
    return _job(row._mapping, spec_keys, request_keys)


#: keeps a job given (id, array_job_id, array_task_id); None keeps every job
Pick = Callable[[int, int | None, int | None], bool] | None


def list_folded_view_jobs(store: Store, q: JobQuery, spec_keys: Sequence[str], request_keys: Sequence[str],
                          pick: Pick = None) -> tuple[list[Job], list[tuple[int, int, int]], list[Job]]:
    """What squeue shows without -r, read in one transaction: (the jobs `q` selects but the
    pending tasks of job arrays, as `list_view_jobs` loads them; (id, array_job_id,
    array_task_id) of those pending tasks, by id; the pending task with the lowest task id
    of each array, loaded whole). `pick` narrows every part in Python (task lists)."""
    rows, tasks, firsts = list_folded_view_rows(store, q, spec_keys, request_keys, pick)
    return [job_of_row(r, spec_keys, request_keys) for r in rows], tasks, firsts


def list_folded_view_rows(store: Store, q: JobQuery, spec_keys: Sequence[str], request_keys: Sequence[str],
                          pick: Pick = None) -> tuple[list[Any], list[tuple[int, int, int]], list[Job]]:
    """`list_folded_view_jobs` with the other jobs as rows (`list_view_rows`)."""
    tasks_stmt = (select(JobRow.id, JobRow.array_job_id, JobRow.array_task_id)
                  .where(*_conditions(replace(q, pending_tasks=True), store)).order_by(JobRow.id))
    with store.read() as s:
        conn = s.connection()
        others = [r for r in conn.execute(_select_view(store, replace(q, pending_tasks=False), spec_keys,
                                                       request_keys)).all()
                  if pick is None or pick(r.id, r.array_job_id, r.array_task_id)]
        # pending_tasks: array tasks only, so both array columns are set
        tasks = [(int(a), int(b), int(c)) for a, b, c in conn.execute(tasks_stmt).all()
                 if b is not None and c is not None and (pick is None or pick(a, b, c))]
        first: dict[int, tuple[int, int]] = {}
        for jid, aj, task in tasks:
            if aj not in first or task < first[aj][0]:
                first[aj] = (task, jid)
        firsts = list(_load_ids(s, store, [jid for _t, jid in first.values()], spec_keys, request_keys,
                                JobQuery(pending_tasks=True)).values())
    return others, tasks, firsts


@dataclass(frozen=True)
class TaskRun:
    """Alike pending tasks of one job array that never ran: every column and document key a
    view reads, but the job id and the task id, is the same, so their views differ in those
    ids alone. `first`: the task with the lowest job id, loaded as `list_view_jobs` loads
    jobs; `tasks`: (job id, task id) of every task of the run, `first`'s included, by job id."""
    first: Job
    tasks: list[tuple[int, int]]


#: the columns of a view's select that do not tell alike tasks apart: the two ids
_IDS = {"id", "array_task_id"}


def list_task_runs(store: Store, q: JobQuery, spec_keys: Sequence[str], request_keys: Sequence[str],
                   pick: Pick = None) -> tuple[list[Job], list[TaskRun]]:
    """What squeue -r shows, read in one transaction without building a job per task: (the
    jobs `q` selects but the pending array tasks that never ran, as `list_view_jobs` loads
    them; those tasks as runs of alike tasks (`TaskRun`), by the first's job id). `pick`
    narrows both parts in Python (task lists). A job array's 10,000 pending tasks are one
    run until a task is changed alone (held, updated): then that task starts a run of its own.

    Alike: the same plain columns (but the ids), and a spec and a request whose stored text
    is the array's first task's (`array_job_id`'s row, compared in SQL: no document is
    parsed or sent per task); a task whose documents differ from it is a run of its own."""
    master = aliased(JobRow)

    def same(col: str) -> Any:
        mine, theirs = cast(getattr(JobRow, col), Text), cast(getattr(master, col), Text)
        return func.coalesce(mine == select(theirs).where(master.id == JobRow.array_job_id).scalar_subquery(),
                             False).label(f"same_{col}")

    cols = [cast(JobRow.allocation, Text).label(c) if c == "allocation" else getattr(JobRow, c) for c in _PLAIN]
    stmt = (select(*cols, same("spec"), same("request"))
            .where(*_conditions(replace(q, fresh_tasks=True), store)).order_by(JobRow.id))
    with store.read() as s:
        conn = s.connection()
        others = [j for j in _load(s, store, replace(q, fresh_tasks=False), spec_keys, request_keys)
                  if pick is None or pick(j.id, j.array_job_id, j.array_task_id)]
        runs: dict[Any, list[tuple[int, int]]] = {}
        res = conn.execute(stmt)
        names = list(res.keys())
        rest = operator.itemgetter(*(i for i, k in enumerate(names) if k not in _IDS and not k.startswith("same_")))
        at_id, at_task = names.index("id"), names.index("array_task_id")
        at_aj, at_spec, at_req = names.index("array_job_id"), names.index("same_spec"), names.index("same_request")
        for r in res.all():
            jid, task = r[at_id], r[at_task]
            if pick is not None and not pick(jid, r[at_aj], task):
                continue
            key = rest(r) if r[at_spec] and r[at_req] else ("alone", jid)
            runs.setdefault(key, []).append((jid, task))
        loaded = _load_ids(s, store, [tasks[0][0] for tasks in runs.values()], spec_keys, request_keys)
    out = [TaskRun(loaded[tasks[0][0]], tasks) for tasks in runs.values() if tasks[0][0] in loaded]
    out.sort(key=lambda run: run.first.id)
    return others, out


def list_fresh_task_groups(store: Store, q: JobQuery, spec_keys: Sequence[str], request_keys: Sequence[str],
                           pick: Pick = None) -> list[tuple[Job, list[int]]]:
    """The pending array tasks that never ran among those `q` selects, grouped by array and
    submit time (what sacct's time window reads of such a task: its row is the same but
    for its ids), in one transaction and without a job per task: per group (its task with
    the lowest task id, loaded as `list_view_jobs` loads jobs; the task ids of the others),
    by that task's job id. `pick` narrows the tasks in Python (task lists)."""
    stmt = (select(JobRow.id, JobRow.array_job_id, JobRow.array_task_id, JobRow.submit_time)
            .where(*_conditions(replace(q, fresh_tasks=True), store)).order_by(JobRow.id))
    groups: dict[tuple[Any, float], list[tuple[Any, int]]] = {}
    with store.read() as s:
        for jid, aj, task, submit in s.connection().execute(stmt).all():
            if pick is None or pick(jid, aj, task):
                groups.setdefault((aj, submit), []).append((task, jid))
        loaded = _load_ids(s, store, [min(tasks)[1] for tasks in groups.values()], spec_keys, request_keys)
    out = []
    for tasks in groups.values():
        tasks.sort()
        first = loaded.get(tasks[0][1])
        if first is not None:
            out.append((first, [t for t, _j in tasks[1:]]))
    out.sort(key=lambda g: g[0].id)
    return out


def list_view_usage(store: Store, q: JobQuery) -> list[UsageRec]:
    """The usage records of the jobs `q` selects, ordered by (job_id, run): one query,
    the job filter as a subquery (never a list of ids, which SQLite limits)."""
    cols = [c for c in UsageRecord.__table__.c if c.name != "id"]
    stmt = (select(*cols).where(UsageRecord.job_id.in_(select(JobRow.id).where(*_conditions(q, store))))
            .order_by(UsageRecord.job_id, UsageRecord.run))
    with store.read() as s:
        return [UsageRec(**r._mapping) for r in s.connection().execute(stmt).all()]


def list_job_heads(store: Store, q: JobQuery) -> list[Job]:
    """The jobs `q` selects, ordered by id, without spec and request ({}): for changes that
    read only ids, states and owners (scancel of an array's 10,000 tasks)."""
    stmt = select(*(getattr(JobRow, c) for c in _PLAIN)).where(*_conditions(q, store)).order_by(JobRow.id)
    with store.read() as s:
        return [Job(spec={}, request={}, **dict(zip(_PLAIN, r, strict=True))) for r in s.connection().execute(stmt).all()]
