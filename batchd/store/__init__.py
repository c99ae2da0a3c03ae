"""All SQL of batchd. One public method = one transaction; methods take and return the
plain dataclasses of `batchd.model`, never ORM rows. A database error leaves the store as
a `batchd.errors.StoreError` naming its cause (`batchd.store.dberrors`), never as a
SQLAlchemy exception.

SQLite (embedded default, WAL, file mode 0600, only the daemon opens it) and
PostgreSQL (several nodes) run the same code.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Text,
    and_,
    cast,
    create_engine,
    delete,
    event,
    exc,
    func,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session, sessionmaker

from batchd.model import Account, Job, Node, SubmitFacts, UsageRec, from_row, job_of_fields
from batchd.store import jobscripts, submitpath
from batchd.store.batches import batches
from batchd.store.dberrors import translated
from batchd.store.groupcommit import GroupCommit
from batchd.store.tables import (
    AccountRow,
    Association,
    AuditRow,
    JobRow,
    Meta,
    NodeEvent,
    NodeRow,
    UsageRecord,
    UsageState,
)

log = logging.getLogger(__name__)

ACTIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
NOT_RESPONDING = "Not responding"
#: SQLite's `synchronous` level (see make_engine): FULL keeps every acknowledged commit
#: across a power loss in WAL mode
SQLITE_SYNCHRONOUS = "FULL"
#: execution option of the read-only sessions (Store.read)
_READ_ONLY = "batchd_read_only"
#: first key of the advisory locks that serialize submissions carrying a token ("tokn")
SUBMIT_LOCK_CLASS = 0x746F6B6E


def make_engine(url: str, pool_size: int = 5) -> Engine:
    """The engine of `url`, with a pool of `pool_size` connections (and as many more on
    demand, closed after use): the daemon sizes it to its API threads plus its own loops, so that
    requests do not queue for a connection."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            if not os.path.exists(path):
                fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
        # the pool holds a connection per concurrent user (API threads and the daemon's
        # loops): SQLAlchemy's default of 5 (+10 overflow, closed after each use) made
        # most requests open a new connection and run the pragmas below under load
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               json_serializer=submitpath.json_serializer,
                               pool_size=pool_size, max_overflow=max(10, pool_size))

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _rec: Any) -> None:
            dbapi_conn.isolation_level = None  # BEGIN is ours (below), not pysqlite's
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            # FULL: in WAL mode the WAL is fsynced at every commit, so a transaction that
            # committed (a submission whose job id was acknowledged, a usage record) is on
            # disk before the reply and survives a power loss. NORMAL would sync only at
            # checkpoints: safe against a daemon crash (kill -9) but a power loss could
            # roll back the last acknowledged jobs. The price is one fsync per write
            # transaction, which is why the request path writes once per submission.
            cur.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            # a write transaction takes the write lock at BEGIN (IMMEDIATE) so that
            # read-then-write transactions never deadlock with each other (SQLite's default
            # deferred BEGIN can); a read-only one (Store.read) begins deferred and, in WAL,
            # reads its own snapshot without ever waiting for a writer or blocking one
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(_READ_ONLY) else "BEGIN IMMEDIATE")

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    engine = create_engine(url, pool_size=pool_size, max_overflow=max(10, pool_size),
                           json_serializer=submitpath.json_serializer)
    _ping_when_idle(engine)
    return engine


def _reserve_engine(engine: Engine) -> Engine:
    """The engine of `Store._reserve_apart`: the same database, autocommit, with
    synchronous_commit off on every connection (see there), a small pool of its own."""
    res = create_engine(engine.url, pool_size=2, max_overflow=14, isolation_level="AUTOCOMMIT",
                        json_serializer=submitpath.json_serializer)

    @event.listens_for(res, "connect")
    def _async_commit(dbapi_conn: Any, _rec: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute("SET synchronous_commit TO OFF")
        dbapi_conn.commit()

    _ping_when_idle(res)
    return res


#: a pooled PostgreSQL connection idle for longer than this is pinged before use
PING_IDLE_S = 1.0


def _ping_when_idle(engine: Engine) -> None:
    """SQLAlchemy's pre-ping, but only for a connection that sat idle in the pool for
    PING_IDLE_S: the ping is a round trip on every checkout, two per submission under load,
    when the connection was in use a moment ago. A connection that fails its ping is
    replaced (DisconnectionError: the pool opens a new one). After a database restart the
    connections idle since then are replaced; one returned to the pool less than
    PING_IDLE_S before the restart fails its request once, and that failure invalidates
    the pool's other connections (SQLAlchemy's disconnect handling)."""

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_conn: Any, rec: Any) -> None:
        rec.info["batchd_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, rec: Any, _proxy: Any) -> None:
        since = rec.info.get("batchd_idle_since")
        if since is None or time.monotonic() - since < PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as e:
            raise exc.DisconnectionError(f"pooled connection failed its ping: {e}") from e


T = TypeVar("T")


def _writes_facts(fn: Callable[..., T]) -> Callable[..., T]:
    """A Store method that writes accounts, associations or nodes: what `submit_facts`
    keeps is read again after it (the generation moves once its transaction is over, so a
    read that ran beside it is not kept as current)."""
    @functools.wraps(fn)
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> T:
        try:
            return fn(self, *args, **kwargs)
        finally:
            self._facts_gen = next(self._facts_counter)  # atomic, unlike += on API threads
    return wrapper


class Store:
    """The database. `tx()` is a write transaction, `read()` a read-only one; every
    public method opens exactly one of them.

    On SQLite only this process writes (file mode 0600; an admin command that opens the
    file itself still serializes through BEGIN IMMEDIATE and the busy timeout), so write
    transactions queue on an in-process lock before BEGIN IMMEDIATE: a waiting writer
    wakes as soon as the previous one commits, instead of sleeping in SQLite's busy
    handler (which backs off up to 100 ms between tries). Read transactions take neither."""

    def __init__(self, url: str, engine: Engine | None = None, pool_size: int = 5):
        self.url = url
        self.engine = engine or make_engine(url, pool_size)
        self._session = sessionmaker(self.engine, expire_on_commit=False)
        sqlite = self.engine.dialect.name == "sqlite"
        self._read_session = (sessionmaker(self.engine.execution_options(**{_READ_ONLY: True}),
                                           expire_on_commit=False) if sqlite else self._session)
        self._write_lock: Any = threading.Lock() if sqlite else nullcontext()
        self._read_engine = self.engine.execution_options(**{_READ_ONLY: True}) if sqlite else self.engine
        self._group = GroupCommit(self.core_tx) if sqlite else None
        # PostgreSQL: submissions reserve their job ids apart (`_reserve_apart`)
        self._reserve_engine = None if sqlite or engine is not None else _reserve_engine(self.engine)
        # job id -> (stored request text, decoded): snapshot_jobs' memo, replaced whole
        self._request_memo: dict[int, tuple[str, dict[str, Any]]] = {}
        # submit_facts' accounts, nodes and associations by user, kept while no write to them
        # (`_writes_facts`) bumped the generation: SQLite only, where this process alone
        # writes the database; on PostgreSQL other daemons write them
        self._facts_cached = sqlite
        self._facts_counter = itertools.count(1)
        self._facts_gen = 0
        self._facts: tuple[int, list[Account], list[Node], dict[str, list[dict[str, Any]]]] | None = None

    # The four transactions below are where every public store function meets the
    # database: a driver error inside one, or at its BEGIN or COMMIT, leaves as a
    # StoreError (batchd.store.dberrors), after the rollback.
    @contextmanager
    def tx(self) -> Iterator[Session]:
        """A write transaction (BEGIN IMMEDIATE on SQLite), committed at the end."""
        with translated(), self._write_lock, self._session.begin() as s:
            yield s

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only transaction: on SQLite a deferred BEGIN (one consistent snapshot, no
        write lock); on PostgreSQL the same as `tx`. Writing in it is a bug."""
        with translated(), self._read_session.begin() as s:
            yield s

    @contextmanager
    def core_tx(self) -> Iterator[Connection]:
        """`tx` on a plain Core connection, for the request path's hot statements (the ORM
        session's own bookkeeping costs more than those statements)."""
        with translated(), self._write_lock, self.engine.begin() as conn:
            yield conn

    @contextmanager
    def core_read(self) -> Iterator[Connection]:
        """`read` on a plain Core connection."""
        with translated(), self._read_engine.begin() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()
        if self._reserve_engine is not None:
            self._reserve_engine.dispose()

    # ------------------------------------------------------------------ meta
    def next_job_ids(self, n: int) -> int:
        """Reserve `n` consecutive job ids; return the first. Race-free on a fresh
        database too (see `_reserve_ids`)."""
        with self.tx() as s:
            return self._reserve_ids(s.connection(), n)

    def _reserve_ids(self, conn: Connection, n: int) -> int:
        """In transaction `conn`: advance the `next_job_id` counter by `n` and return the
        first reserved id. One UPDATE .. RETURNING (the row lock serializes concurrent
        reservations on PostgreSQL, the write lock on SQLite); on a fresh database the
        row is inserted first (INSERT .. ON CONFLICT DO NOTHING: two daemons creating it
        at once both succeed, one row results)."""
        after = submitpath.reserve(conn, n)  # Core, not the ORM's bulk UPDATE: under the write lock
        if after is None:
            conn.execute(self._insert_ignore(Meta).values(key="next_job_id", value=1))
            after = submitpath.reserve(conn, n)
            assert after is not None
        return after - n

    def _reserve_apart(self, n: int) -> int:
        """PostgreSQL: `_reserve_ids` in a transaction of its own, committed at once
        without waiting for its WAL flush (synchronous_commit off), on the reservation
        engine. Inside the submission's transaction the counter's row lock was held until
        that COMMIT's flush, so concurrent submissions committed one flush after another.
        Durable all the same: the reservation's WAL precedes the submission's commit
        record, whose flush (synchronous) writes it too; if the submission never commits,
        the ids it lost were never acknowledged. A reservation whose submission fails
        afterwards leaves a gap in the ids, as an interrupted Slurm submission can."""
        assert self._reserve_engine is not None
        with self._reserve_engine.connect() as conn:
            return self._reserve_ids(conn, n)

    def _insert_ignore(self, table: Any) -> Any:
        """INSERT .. ON CONFLICT DO NOTHING in this database's dialect."""
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table).on_conflict_do_nothing()
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table).on_conflict_do_nothing()

    # ------------------------------------------------------------------ jobs
    def insert_jobs(self, jobs: list[Job]) -> None:
        with self.tx() as s:
            submitpath.insert_jobs(s.connection(), jobs)

    def find_submission(self, uid: int, token: str) -> list[Job]:
        """The jobs (every task of an array) that an earlier submission of `uid` stored
        with the client-made `token`, ordered by id; [] when there is none."""
        with self.core_read() as conn:
            return submitpath.token_jobs(conn, uid, token)

    def insert_submission(self, jobs: list[Job], uid: int, token: str) -> list[Job]:
        """Insert the jobs of one submission carrying `token` (set on every job by the
        caller) unless `uid` already stored one with it: then nothing is inserted and that
        submission's jobs are returned (ordered by id); [] after an insert. The check and
        the insert are one transaction, serialized per (uid, token): by BEGIN IMMEDIATE on
        SQLite, by a transaction-level advisory lock on PostgreSQL (two-key form, whose key
        space never meets the controller's one-key lock)."""
        with self.tx() as s:
            if self.engine.dialect.name == "postgresql":
                key = zlib.crc32(f"{uid}:{token}".encode()) & 0x7FFFFFFF
                s.execute(text("SELECT pg_advisory_xact_lock(:c, :k)"), {"c": SUBMIT_LOCK_CLASS, "k": key})
            done = submitpath.token_jobs(s.connection(), uid, token)
            if done:
                return done
            submitpath.insert_jobs(s.connection(), jobs)
            return []

    def submit_facts(self, user: str, uid: int, token: str | None) -> SubmitFacts:
        """Everything a submission of `user` is resolved and checked against, in one read
        transaction: accounts, `user`'s associations, nodes, and with `token` the jobs
        `uid` already stored with it (a retried submission). Indexed reads only: no job
        is read but those of the token."""
        kept = self._facts
        if kept is not None and kept[0] == self._facts_gen and user in kept[3]:
            if token is not None:
                with self.core_read() as conn:
                    repeated = submitpath.token_jobs(conn, uid, token)
            else:
                repeated = []
            return SubmitFacts(accounts=list(kept[1]), associations=list(kept[3][user]), nodes=list(kept[2]),
                               repeated=repeated)
        gen = self._facts_gen
        with self.core_read() as conn:  # prebuilt Core statements (batchd.store.submitpath)
            accounts = submitpath.accounts(conn)
            assoc = submitpath.associations(conn, user)
            nodes = submitpath.nodes(conn)
            repeated = [] if token is None else submitpath.token_jobs(conn, uid, token)
        if self._facts_cached:
            users = kept[3] if kept is not None and kept[0] == gen and len(kept[3]) < 10_000 else {}
            self._facts = (gen, accounts, nodes, {**users, user: assoc})
        return SubmitFacts(accounts=list(accounts), associations=list(assoc), nodes=list(nodes), repeated=repeated)

    def store_submission(self, n: int, build: Callable[[int], list[Job]], uid: int,
                         token: str | None) -> tuple[list[Job], bool]:
        """One submission in one write transaction: reserve `n` job ids, call `build`
        with the first (it returns the jobs, pure and quick: it runs under the write lock)
        and insert them; returns (the jobs, False). With `token` (set by `build` on every
        job), when `uid` already stored a submission with it, nothing is reserved or
        inserted and (that submission's jobs by id, True) is returned: the check and the
        insert are serialized per (uid, token) by BEGIN IMMEDIATE on SQLite, by a
        transaction-level advisory lock on PostgreSQL (as `insert_submission`). On SQLite
        concurrent submissions are group-committed (`batchd.store.groupcommit`): each in
        its own savepoint, one COMMIT for the group, returned only once that committed."""
        def body(conn: Connection) -> tuple[list[Job], bool]:
            # Core statements on a plain connection (no ORM session): a submission's own
            # cost is under the write lock, and the whole job row is read only for a
            # repeated token
            if token is not None:
                if self.engine.dialect.name == "postgresql":
                    key = zlib.crc32(f"{uid}:{token}".encode()) & 0x7FFFFFFF
                    conn.execute(text("SELECT pg_advisory_xact_lock(:c, :k)"), {"c": SUBMIT_LOCK_CLASS, "k": key})
                if submitpath.token_used(conn, uid, token):
                    return submitpath.token_jobs(conn, uid, token), True
            first = self._reserve_apart(n) if self._reserve_engine is not None else self._reserve_ids(conn, n)
            jobs = build(first)
            submitpath.insert_jobs(conn, jobs)
            return jobs, False

        if self._group is not None:  # SQLite: concurrent submissions share one commit (fsync)
            with translated():  # a body's own failure comes back from its savepoint untranslated
                return self._group.run(body)
        with self.core_tx() as conn:
            return body(conn)

    def get_job(self, job_id: int) -> Job | None:
        with self.read() as s:
            row = s.get(JobRow, job_id)
            return None if row is None else jobscripts.join(s.connection(), [from_row(Job, row)])[0]

    def count_active_jobs(self, user: str, account: str) -> int:
        """The user's pending and running jobs (each array task one) in `account`."""
        q = (select(func.count()).select_from(JobRow)
             .where(JobRow.user == user, JobRow.account == account, JobRow.state.in_(ACTIVE_STATES)))
        with self.read() as s:
            return int(s.execute(q).scalar_one())

    def list_jobs(self, *, states: Iterable[str] | None = None, ids: Iterable[int] | None = None,
                  array_job_ids: Iterable[int] | None = None, since: float | None = None) -> list[Job]:
        """Jobs ordered by id. `since`: only jobs that ended at or after it, or have not ended."""
        q = select(JobRow).order_by(JobRow.id)
        if states is not None:
            q = q.where(JobRow.state.in_(list(states)))
        if ids is not None:
            idl = list(ids)
            aids = list(array_job_ids or [])
            if aids:
                q = q.where(JobRow.id.in_(idl) | JobRow.array_job_id.in_(aids))
            else:
                q = q.where(JobRow.id.in_(idl))
        elif array_job_ids is not None:
            q = q.where(JobRow.array_job_id.in_(list(array_job_ids)))
        if since is not None:
            q = q.where((JobRow.end_time.is_(None)) | (JobRow.end_time >= since))
        with self.read() as s:
            return jobscripts.join(s.connection(), [from_row(Job, r) for r in s.scalars(q)])

    def snapshot_jobs(self, active: Iterable[str], ended: Iterable[str], since: float,
                      ended_if: Callable[[list[Job]], bool] | None = None,
                      settled_holds: tuple[str, ...] = ()) -> list[Job]:
        """The jobs a scheduling cycle reads, ordered by id, in one read transaction: those
        in an `active` state and those in an `ended` state, either only if they ended at
        or after `since` or have not ended. Only the columns a cycle uses are read: an
        active job without its stored spec (script and environment) but for the spec's
        `nodelist` and `exclude` (read from the JSON in SQL), an ended one with its
        identity, state and times only (spec and request {}), enough for dependencies.
        With `ended_if`, the ended jobs are read (in the same transaction) only when it
        returns True for the active ones: a day of ended jobs can be 100,000 rows, and
        only dependencies read them. With `settled_holds` (reasons), a pending job held with
        one of these reasons already stored and no dependency is left out: a cycle has
        nothing to decide for it (a held array of 10,000 tasks cost every cycle its rows);
        if a job it reads has a dependency, the held ones are read too (a dependency may
        name one)."""
        recent = (JobRow.end_time.is_(None)) | (JobRow.end_time >= since)
        # the JSON columns come as text and are decoded here: most are null or alike for
        # pending jobs (SQLAlchemy's JSON type would decode each of them, row by row)
        act_cols = [getattr(JobRow, f) for f in _job_fields() if f not in ("spec", "request", *_TEXT_JSON)]
        q_act = (select(*act_cols, cast(JobRow.request, Text).label("request_text"),
                        *(cast(getattr(JobRow, f), Text).label(f) for f in _TEXT_JSON),
                        cast(JobRow.spec["nodelist"], Text).label("spec_nodelist"),
                        cast(JobRow.spec["exclude"], Text).label("spec_exclude"))
                 .where(JobRow.state.in_(list(active)), recent).order_by(JobRow.id))
        settled: Any = None
        if settled_holds:
            settled = and_(JobRow.state == "PENDING", JobRow.hold.is_(True), JobRow.reason.in_(settled_holds),
                           JobRow.request["dependency"].as_string().is_(None))
            q_held = q_act.where(settled)
            q_act = q_act.where(~settled)
        # Two queries, not one with `recent`: the OR would make the database read every
        # ended job of the history through the state index; each of these is one range of
        # ix_jobs_state_end_time_ids per state. Both ordered by id, merged below.
        end_cols = [getattr(JobRow, f) for f in _ENDED_FIELDS]
        ended_states = list(ended)
        q_end = (select(*end_cols).where(JobRow.state.in_(ended_states), JobRow.end_time >= since)
                 .order_by(JobRow.id))
        q_end_open = (select(*end_cols).where(JobRow.state.in_(ended_states), JobRow.end_time.is_(None))
                      .order_by(JobRow.id))
        # A job's stored request rarely changes (scontrol update) but is read by every
        # cycle: its text is compared with the last snapshot's and decoded only when new.
        # The decoded dicts are shared between snapshots: read-only for their users. The
        # memo is replaced whole (a snapshot on an API thread may run beside the cycle).
        memo = self._request_memo
        fresh: dict[int, tuple[str, dict[str, Any]]] = {}
        same_text: dict[str, dict[str, Any]] = {}
        def jobs_of(res: Any) -> list[Job]:
            # rows become dicts by zipping the result's keys, taken once: Row._asdict()
            # builds the key view again for every row (a third of a cycle's snapshot time)
            keys = tuple(res.keys())
            jobs = []
            for r in res:
                d = dict(zip(keys, r, strict=True))
                for f in _TEXT_JSON:
                    d[f] = _json_text(d[f])
                nodelist, exclude = _json_text(d.pop("spec_nodelist")), _json_text(d.pop("spec_exclude"))
                d["spec"] = {k: v for k, v in (("nodelist", nodelist), ("exclude", exclude)) if v is not None}
                raw = d.pop("request_text")
                seen = memo.get(d["id"])
                if seen is not None and seen[0] == raw:
                    request = seen[1]
                else:  # the tasks of one array share one decoded request (batchd.control.arrayfold)
                    request = same_text.get(raw) or json.loads(raw)
                same_text.setdefault(raw, request)
                fresh[d["id"]] = (raw, request)
                d["request"] = request
                jobs.append(job_of_fields(d))  # d names every field of Job (the select's columns)
            return jobs

        with self.read() as s:
            conn = s.connection()  # Core results: the ORM's row loading costs more than the rows
            out = jobs_of(conn.execute(q_act))
            if settled is not None and any(j.state == "PENDING" and j.request.get("dependency") for j in out):
                out = list(heapq.merge(out, jobs_of(conn.execute(q_held)), key=lambda j: j.id))
            ended_jobs: list[Job] = []
            open_jobs: list[Job] = []
            if ended_if is None or ended_if(out):
                ended_jobs = [Job(**dict(zip(_ENDED_FIELDS, r, strict=True)), spec={}, request={})
                              for r in conn.execute(q_end)]
                open_jobs = [Job(**dict(zip(_ENDED_FIELDS, r, strict=True)), spec={}, request={})
                             for r in conn.execute(q_end_open)]
        self._request_memo = fresh
        return list(heapq.merge(out, ended_jobs, open_jobs, key=lambda j: j.id))

    def update_job(self, job_id: int, expect_states: Iterable[str] | None = None, **changes: Any) -> bool:
        """Set fields of one job; with `expect_states`, only if its state is one of them
        (compare-and-set). True when a row changed. A spec's heavy keys are not stored
        again (they never change: batchd.store.jobscripts)."""
        if "spec" in changes:
            changes["spec"] = jobscripts.light(changes["spec"])
        q = update(JobRow).where(JobRow.id == job_id)
        if expect_states is not None:
            q = q.where(JobRow.state.in_(list(expect_states)))
        with self.tx() as s:
            return s.execute(q.values(**changes)).rowcount > 0  # type: ignore[attr-defined]

    def update_jobs(self, changes: list[tuple[int, tuple[str, ...] | None, dict[str, Any]]]) -> list[int]:
        """Several compare-and-set job updates in one transaction; returns the ids changed.
        Changes with the same expected states and the same values (cancelling an array's
        tasks) go as one UPDATE per 500 ids (when no job is named twice)."""
        changes = [(i, e, {**v, "spec": jobscripts.light(v["spec"])} if "spec" in v else v)
                   for i, e, v in changes]  # as update_job
        done: list[int] = []
        groups: dict[str, tuple[tuple[str, ...] | None, dict[str, Any], list[int]]] = {}
        order: list[tuple[int, tuple[str, ...] | None, dict[str, Any]]] = []
        # a job changed twice keeps the order of its changes: then no grouping at all
        grouped = changes if len({c[0] for c in changes}) == len(changes) else []
        if not grouped:
            order = list(changes)
        for job_id, expect, vals in grouped:
            try:
                key = json.dumps([expect, vals], sort_keys=True)
            except (TypeError, ValueError):  # values JSON cannot key: alone
                order.append((job_id, expect, vals))
                continue
            groups.setdefault(key, (expect, vals, []))[2].append(job_id)
        with self.tx() as s:
            for expect, vals, ids in groups.values():
                if len(ids) == 1:
                    order.append((ids[0], expect, vals))
                    continue
                for part in batches(ids):
                    q = update(JobRow).where(JobRow.id.in_(part))
                    if expect is not None:
                        q = q.where(JobRow.state.in_(list(expect)))
                    done.extend(s.scalars(q.values(**vals).returning(JobRow.id)))
            for job_id, expect, vals in order:
                q = update(JobRow).where(JobRow.id == job_id)
                if expect is not None:
                    q = q.where(JobRow.state.in_(list(expect)))
                if s.execute(q.values(**vals)).rowcount:  # type: ignore[attr-defined]
                    done.append(job_id)
        return done

    def finish_run(self, job_id: int, run: int, job_changes: dict[str, Any], usage: UsageRec | None) -> bool:
        """End one run of a job: write its usage record (at most once per (job, run)) and
        the job's new state, in one transaction. False when the run was already recorded."""
        with self.tx() as s:
            if usage is not None:
                exists = s.scalar(select(UsageRecord.id).where(UsageRecord.job_id == job_id,
                                                               UsageRecord.run == run))
                if exists is not None:
                    return False
                s.add(UsageRecord(**usage.__dict__))
            s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.restarts == run).values(**job_changes))
            return True

    def mark_launched(self, job_id: int, run: int) -> bool:
        """Record that run `run` of a RUNNING job is being launched, before anything of it
        exists (compare-and-set: only when the job is RUNNING in that run and no launch of
        it was recorded). False when another launch of it was recorded or the job moved on."""
        q = update(JobRow).where(JobRow.id == job_id, JobRow.state == "RUNNING", JobRow.restarts == run,
                                 (JobRow.launched_run.is_(None)) | (JobRow.launched_run < run))
        with self.tx() as s:
            return s.execute(q.values(launched_run=run)).rowcount > 0  # type: ignore[attr-defined]

    def clear_launched(self, job_id: int, run: int) -> None:
        """Forget the launch of run `run` (nothing of it was started), so a later pass
        launches it for the first time."""
        with self.tx() as s:
            s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.launched_run == run)
                      .values(launched_run=None))

    def has_usage(self, job_id: int, run: int) -> bool:
        with self.read() as s:
            return s.scalar(select(UsageRecord.id).where(UsageRecord.job_id == job_id,
                                                         UsageRecord.run == run)) is not None

    def list_usage(self, *, job_ids: Iterable[int] | None = None, start: float | None = None,
                   end: float | None = None) -> list[UsageRec]:
        """Usage records ordered by (job_id, run); with start/end only runs overlapping it."""
        q = select(UsageRecord).order_by(UsageRecord.job_id, UsageRecord.run)
        if job_ids is not None:
            q = q.where(UsageRecord.job_id.in_(list(job_ids)))
        if start is not None:
            q = q.where(UsageRecord.end_time >= start)
        if end is not None:
            q = q.where(UsageRecord.start_time <= end)
        with self.read() as s:
            return [from_row(UsageRec, r) for r in s.scalars(q)]

    # ------------------------------------------------------------------ accounts
    @_writes_facts
    def ensure_default_account(self) -> None:
        with self.tx() as s:
            if s.get(AccountRow, "root") is None:
                s.add(AccountRow(name="root", parent=None, priority=100, shares=1, resources={},
                                 created=time.time()))
            if s.get(AccountRow, "default") is None:
                s.add(AccountRow(name="default", parent="root", priority=100, shares=1, resources={},
                                 created=time.time()))

    def job_counts(self) -> list[tuple[str, str, str, str, int]]:
        """(state, account, partition, reason, count) of the jobs not yet ended (squeue's),
        one GROUP BY: what /metrics counts per scrape."""
        q = (select(JobRow.state, JobRow.account, JobRow.partition, JobRow.reason, func.count())
             .where(JobRow.state.in_(ACTIVE_STATES))
             .group_by(JobRow.state, JobRow.account, JobRow.partition, JobRow.reason))
        with self.read() as s:
            return [(str(a), str(b), str(c), str(d or "None"), int(n)) for a, b, c, d, n in s.execute(q)]

    def billing_seconds_since(self, after_id: int) -> tuple[int, dict[str, float]]:
        """(the last usage record id, billing-unit-seconds per account of the usage records
        after `after_id`): usage records are only ever appended, so a caller that keeps
        the sums adds what is new."""
        q = (select(UsageRecord.account, func.sum(UsageRecord.billing * UsageRecord.elapsed_s), func.max(UsageRecord.id))
             .where(UsageRecord.id > after_id).group_by(UsageRecord.account))
        last, out = after_id, {}
        with self.read() as s:
            for account, total, top in s.execute(q):
                out[str(account)] = float(total or 0.0)
                last = max(last, int(top or 0))
        return last, out

    def list_accounts(self) -> list[Account]:
        with self.read() as s:
            return [from_row(Account, r) for r in s.scalars(select(AccountRow).order_by(AccountRow.created,
                                                                                        AccountRow.name))]

    @_writes_facts
    def put_account(self, acct: Account, uid: int = 0) -> None:
        with self.tx() as s:
            row = s.get(AccountRow, acct.name)
            if row is None:
                s.add(AccountRow(name=acct.name, parent=acct.parent, priority=acct.priority,
                                 shares=acct.shares, resources=acct.resources, created=time.time(),
                                 policy=acct.policy or None))
            else:
                row.parent, row.priority, row.shares, row.resources = (acct.parent, acct.priority,
                                                                       acct.shares, acct.resources)
                row.policy = acct.policy or None
            s.add(AuditRow(time=time.time(), uid=uid, action="account.put",
                           detail=json.dumps(acct.__dict__, sort_keys=True)))

    def pending_owners(self) -> list[tuple[str, str]]:
        """(account, user) of every pending job, each pair once, sorted."""
        q = select(JobRow.account, JobRow.user).where(JobRow.state == "PENDING").distinct()
        with self.read() as s:
            return sorted((str(a), str(u)) for a, u in s.connection().execute(q))

    def list_associations(self) -> list[dict[str, Any]]:
        with self.read() as s:
            return [_assoc_dict(a) for a in s.scalars(select(Association).order_by(Association.account,
                                                                                   Association.user))]

    @_writes_facts
    def put_association(self, user: str, account: str, shares: int | None = 1, is_default: bool = False,
                        uid: int = 0, policy: dict[str, Any] | None = None) -> None:
        with self.tx() as s:
            row = s.get(Association, (user, account))
            if row is None:
                s.add(Association(user=user, account=account, shares=shares, is_default=is_default,
                                  policy=policy or None))
            else:
                row.shares, row.is_default = shares, is_default
                if policy is not None:
                    row.policy = policy or None
            s.add(AuditRow(time=time.time(), uid=uid, action="association.put",
                           detail=json.dumps({"user": user, "account": account, "shares": shares})))

    @_writes_facts
    def replace_accounts(self, accounts: list[Account], associations: list[dict[str, Any]], uid: int,
                         changes: list[str]) -> None:
        """Make the account tree and the associations exactly these, in one transaction,
        with one audit row listing the changes."""
        with self.tx() as s:
            keep = {a.name for a in accounts}
            s.execute(delete(AccountRow).where(AccountRow.name.not_in(keep)))
            now = time.time()
            for i, a in enumerate(accounts):
                row = s.get(AccountRow, a.name)
                if row is None:
                    s.add(AccountRow(name=a.name, parent=a.parent, priority=a.priority, shares=a.shares,
                                     resources=a.resources, created=now + i * 1e-6, policy=a.policy or None))
                else:
                    row.parent, row.priority, row.shares, row.resources = (a.parent, a.priority, a.shares,
                                                                           a.resources)
                    row.policy = a.policy or None
            s.execute(delete(Association))
            for x in associations:
                s.add(Association(user=x["user"], account=x["account"], shares=x["shares"],
                                  is_default=x["is_default"], policy=x.get("policy") or None))
            if changes:
                s.add(AuditRow(time=now, uid=uid, action="accounts.apply", detail=json.dumps(changes)))

    # ------------------------------------------------------------------ nodes
    @_writes_facts
    def upsert_node(self, node: Node) -> None:
        """Register or refresh a node's inventory and heartbeat; an admin-set state
        (DRAIN, DOWN with a reason) is kept. A new node is registered at its heartbeat
        time; registration and state changes are recorded in `node_events`."""
        with self.tx() as s:
            row = s.get(NodeRow, node.name)
            if row is None:
                s.add(NodeRow(**node.__dict__, registered=node.heartbeat))
                s.add(NodeEvent(node=node.name, time=node.heartbeat, state=node.state, reason=node.reason))
            else:
                row.cpus, row.memory_mb, row.gpus, row.heartbeat = (node.cpus, node.memory_mb, node.gpus,
                                                                    node.heartbeat)
                if row.state == "DOWN" and row.reason in (None, "", NOT_RESPONDING):
                    row.state, row.reason, row.reason_uid, row.reason_time = "IDLE", None, None, None
                    s.add(NodeEvent(node=node.name, time=node.heartbeat, state="IDLE", reason=None))

    @_writes_facts
    def heartbeat(self, names: list[str], now: float) -> None:
        """The agent of these nodes is alive; a node that was DOWN only for not
        responding comes back (an admin's DOWN/DRAIN with another reason stays)."""
        with self.tx() as s:
            s.execute(update(NodeRow).where(NodeRow.name.in_(names)).values(heartbeat=now))
            back = list(s.scalars(update(NodeRow).where(NodeRow.name.in_(names), NodeRow.state == "DOWN",
                                                        NodeRow.reason == NOT_RESPONDING)
                                  .values(state="IDLE", reason=None, reason_uid=None, reason_time=None)
                                  .returning(NodeRow.name)))
            for name in back:
                s.add(NodeEvent(node=name, time=now, state="IDLE", reason=None))

    @_writes_facts
    def set_node_state(self, name: str, state: str, reason: str | None, uid: int,
                       now: float | None = None) -> bool:
        """Set a node's state (audited; a change of state is recorded in `node_events`
        at `now`, default the clock)."""
        with self.tx() as s:
            row = s.get(NodeRow, name)
            if row is None:
                return False
            t = time.time() if now is None else now
            if row.state != state:
                s.add(NodeEvent(node=name, time=t, state=state, reason=reason))
            if reason != row.reason or row.state != state:
                # sinfo -R: who gave the reason and when (Slurm keeps both with the reason)
                row.reason_uid, row.reason_time = (uid, t) if reason else (None, None)
            row.state, row.reason = state, reason
            s.add(AuditRow(time=t, uid=uid, action="node.state",
                           detail=json.dumps({"node": name, "state": state, "reason": reason})))
            return True

    def node_history(self) -> list[tuple[str, float, list[Any], list[tuple[float, str]]]]:
        """Per node (by name): its registration time, GPU inventory and state changes
        [(time, state)] in time order. Nodes deleted from the table are not listed."""
        with self.read() as s:
            nodes = [(r.name, r.registered, r.gpus) for r in s.scalars(select(NodeRow).order_by(NodeRow.name))]
            events: dict[str, list[tuple[float, str]]] = {}
            for n, t, st in s.execute(select(NodeEvent.node, NodeEvent.time, NodeEvent.state)
                                      .order_by(NodeEvent.node, NodeEvent.time, NodeEvent.id)):
                events.setdefault(n, []).append((float(t), st))
        return [(n, float(reg), list(g or []), events.get(n, [])) for n, reg, g in nodes]

    def list_nodes(self) -> list[Node]:
        with self.read() as s:
            return [from_row(Node, r) for r in s.scalars(select(NodeRow).order_by(NodeRow.name))]

    @_writes_facts
    def delete_nodes_except(self, names: list[str]) -> None:
        with self.tx() as s:
            s.execute(delete(NodeRow).where(NodeRow.name.not_in(names)))

    # ------------------------------------------------------------------ fair-share usage
    def get_usage_state(self) -> dict[str, tuple[float, float]]:
        with self.read() as s:
            return {r.key: (r.usage, r.updated) for r in s.scalars(select(UsageState))}

    def put_usage_state(self, values: dict[str, tuple[float, float]]) -> None:
        with self.tx() as s:
            for key, (usage, updated) in values.items():
                row = s.get(UsageState, key)
                if row is None:
                    s.add(UsageState(key=key, usage=usage, updated=updated))
                else:
                    row.usage, row.updated = usage, updated

    def usage_inputs(self, since: float) -> tuple[list[Job], list[UsageRec]]:
        """Running jobs and the runs that ended at or after `since`, read in one
        transaction so that a job ending meanwhile is seen exactly once."""
        with self.read() as s:
            running = jobscripts.join(s.connection(), [from_row(Job, r) for r in s.scalars(
                select(JobRow).where(JobRow.state == "RUNNING"))])
            ended = [from_row(UsageRec, r) for r in s.scalars(select(UsageRecord).where(UsageRecord.end_time >= since))]
            return running, ended

    # ------------------------------------------------------------------ audit
    def audit(self, uid: int, action: str, detail: dict[str, Any]) -> None:
        with self.tx() as s:
            s.add(AuditRow(time=time.time(), uid=uid, action=action, detail=json.dumps(detail, sort_keys=True)))

    def list_audit(self) -> list[dict[str, Any]]:
        with self.read() as s:
            return [{"time": r.time, "uid": r.uid, "action": r.action, "detail": json.loads(r.detail)}
                    for r in s.scalars(select(AuditRow).order_by(AuditRow.id))]


def _assoc_dict(a: Association) -> dict[str, Any]:
    return {"user": a.user, "account": a.account, "shares": a.shares, "is_default": a.is_default,
            **({"policy": a.policy} if a.policy else {})}


#: the columns of an ended job that a cycle reads (Store.snapshot_jobs): the Job's
#: required fields, and what dependencies look at (state, start and end, array task)
_ENDED_FIELDS = ("id", "name", "user", "uid", "gid", "account", "partition", "qos", "state", "submit_time",
                 "array_job_id", "array_task_id", "start_time", "end_time", "exit_code", "restarts")

#: JSON columns of an active job that `snapshot_jobs` reads as text (see there)
_TEXT_JSON = ("allocation", "charge")


def _json_text(v: Any) -> Any:
    """A JSON column read as text (None for SQL NULL), decoded."""
    if v is None or v == "null":
        return None
    return json.loads(v) if isinstance(v, str) else v


_JOB_FIELDS: list[str] = []


def _job_fields() -> list[str]:
    if not _JOB_FIELDS:
        from dataclasses import fields

        _JOB_FIELDS.extend(f.name for f in fields(Job))
    return _JOB_FIELDS
