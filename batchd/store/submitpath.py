"""The statements of the submit path, built once and run as Core (no ORM unit of work).

A submission reads the accounts, the user's associations and the nodes, checks its token
and stores its jobs: at hundreds of submissions a second, building each `select()` again
(SQLAlchemy's operator coercion) and loading ORM instances cost more than running the
statements. Here they are built once, with bind parameters, and their rows are copied
straight into the `batchd.model` dataclasses. Same SQL, same results as the ORM path.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

from sqlalchemy import Connection, Table, bindparam, insert, select, update

from batchd.model import Account, Job, Node
from batchd.store import jobscripts
from batchd.store.tables import AccountRow, Association, JobRow, Meta, NodeRow

_ACCOUNTS: Table = AccountRow.__table__  # type: ignore[assignment]
_ASSOC: Table = Association.__table__  # type: ignore[assignment]
_NODES: Table = NodeRow.__table__  # type: ignore[assignment]
_JOBS: Table = JobRow.__table__  # type: ignore[assignment]
_META: Table = Meta.__table__  # type: ignore[assignment]


def _names(cls: type, table: Table) -> tuple[str, ...]:
    """The dataclass fields of `cls` that are columns of `table` (what `from_row` copies)."""
    return tuple(f.name for f in fields(cls) if f.name in table.c)


ACCOUNT_FIELDS = _names(Account, _ACCOUNTS)
NODE_FIELDS = _names(Node, _NODES)
JOB_FIELDS = _names(Job, _JOBS)

ACCOUNTS = select(*(_ACCOUNTS.c[n] for n in ACCOUNT_FIELDS)).order_by(_ACCOUNTS.c.created, _ACCOUNTS.c.name)
ASSOCIATIONS = (select(_ASSOC.c.user, _ASSOC.c.account, _ASSOC.c.shares, _ASSOC.c.is_default, _ASSOC.c.policy)
                .where(_ASSOC.c.user == bindparam("user")).order_by(_ASSOC.c.account))
NODES = select(*(_NODES.c[n] for n in NODE_FIELDS)).order_by(_NODES.c.name)
_BY_TOKEN = (_JOBS.c.uid == bindparam("uid")) & (_JOBS.c.submit_token == bindparam("token"))
TOKEN_USED = select(_JOBS.c.id).where(_BY_TOKEN).limit(1)
TOKEN_JOBS = select(*(_JOBS.c[n] for n in JOB_FIELDS)).where(_BY_TOKEN).order_by(_JOBS.c.id)
RESERVE = (update(_META).where(_META.c.key == "next_job_id").values(value=_META.c.value + bindparam("n"))
           .returning(_META.c.value))


def accounts(conn: Connection) -> list[Account]:
    return [Account(**dict(zip(ACCOUNT_FIELDS, r, strict=True))) for r in conn.execute(ACCOUNTS)]


def associations(conn: Connection, user: str) -> list[dict[str, Any]]:
    """`user`'s associations as `Store.list_associations` gives them."""
    out = []
    for u, acct, shares, default, policy in conn.execute(ASSOCIATIONS, {"user": user}):
        d = {"user": u, "account": acct, "shares": shares, "is_default": default}
        if policy:
            d["policy"] = policy
        out.append(d)
    return out


def nodes(conn: Connection) -> list[Node]:
    return [Node(**dict(zip(NODE_FIELDS, r, strict=True))) for r in conn.execute(NODES)]


def token_used(conn: Connection, uid: int, token: str) -> bool:
    return conn.execute(TOKEN_USED, {"uid": uid, "token": token}).first() is not None


def token_jobs(conn: Connection, uid: int, token: str) -> list[Job]:
    """The jobs `uid` stored with `token`, by id, with their whole specs."""
    return jobscripts.join(conn, [Job(**dict(zip(JOB_FIELDS, r, strict=True)))
                                  for r in conn.execute(TOKEN_JOBS, {"uid": uid, "token": token})])


def reserve(conn: Connection, n: int) -> int | None:
    """Advance the job id counter by `n`; the counter after, None when its row is missing."""
    after = conn.execute(RESERVE, {"n": n}).scalar_one_or_none()
    return None if after is None else int(after)


def insert_jobs(conn: Connection, jobs: list[Job]) -> None:
    """Insert the jobs, their specs split (batchd.store.jobscripts): one multi-row INSERT
    into the jobs table, one into job_scripts."""
    rows, scripts = jobscripts.split(jobs, JOB_FIELDS)
    with shared_json():  # an array's tasks share spec and request: encoded once
        conn.execute(insert(_JOBS), rows)
    if scripts:
        conn.execute(insert(jobscripts.TABLE), scripts)


_memo = threading.local()


def json_serializer(obj: Any) -> str:
    """The engines' JSON encoder: `json.dumps`, except inside `shared_json`, where each
    distinct object (by identity) is encoded once."""
    memo: dict[int, tuple[Any, str]] | None = getattr(_memo, "active", None)
    if memo is None:
        return json.dumps(obj)
    hit = memo.get(id(obj))
    if hit is None or hit[0] is not obj:
        text = json.dumps(obj)
        if isinstance(obj, dict | list):  # worth keeping; the object is held, so its id stays its own
            memo[id(obj)] = (obj, text)
        return text
    return hit[1]


@contextmanager
def shared_json() -> Iterator[None]:
    """Within: this thread's JSON parameters that are the same object are encoded once
    (the 10,000 tasks of an array carry one spec and one request object). The objects
    must not change inside the block."""
    _memo.active = {}
    try:
        yield
    finally:
        _memo.active = None
