"""The store on SQLite and PostgreSQL: migrations, ids, compare-and-set, usage records
written exactly once."""

import dataclasses
import time

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from batchd.errors import StoreError
from batchd.model import Job, Node, UsageRec
from batchd.store import Store
from batchd.store.migrate import check_at_head, current_revision, head_revision, upgrade
from batchd.store.tables import Base


def _job(jid, **kw):
    base = dict(id=jid, name="j", user="alice", uid=1000, gid=1000, account="default", partition="gpu",
                qos="normal", state="PENDING", submit_time=time.time(), spec={"script": "#!/bin/sh\n"},
                request={"tasks": 1, "per_task": {"cpu": 1}})
    base.update(kw)
    return Job(**base)


def test_upgrade_head_equals_models(db_url):
    s = Store(db_url)
    try:
        with pytest.raises(StoreError, match="batchd migrate"):
            check_at_head(s.engine)
        upgrade(s.engine)
        assert current_revision(s.engine) == head_revision()
        check_at_head(s.engine)
        with s.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == []
        upgrade(s.engine)  # idempotent
    finally:
        s.close()


def test_job_ids_are_consecutive_and_unique(store):
    a = store.next_job_ids(1)
    b = store.next_job_ids(4)
    c = store.next_job_ids(1)
    assert (b, c) == (a + 1, a + 5)


def test_insert_list_and_compare_and_set(store):
    store.insert_jobs([_job(1), _job(2, state="RUNNING")])
    assert [j.id for j in store.list_jobs(states=["PENDING"])] == [1]
    assert store.update_job(1, ("PENDING",), state="RUNNING", allocation={"n1": {"gpus": [0]}})
    assert not store.update_job(1, ("PENDING",), state="CANCELLED")
    j = store.get_job(1)
    assert j.state == "RUNNING" and j.allocation == {"n1": {"gpus": [0]}}
    assert store.get_job(99) is None


def _usage(jid, run, state="COMPLETED"):
    return UsageRec(job_id=jid, run=run, name="j", account="default", user="alice", uid=1000, gid=1000,
                    partition="gpu", qos="normal", node_list="n1", tres_alloc="cpu=1,mem=1G,node=1",
                    tres={"cpu": 1, "mem": 1024, "node": 1}, billing=1.0, submit_time=1.0, start_time=2.0,
                    end_time=12.0, elapsed_s=10, state=state, exit_code=0, exit_signal=0)


def test_usage_record_written_exactly_once(store):
    store.insert_jobs([_job(7, state="RUNNING")])
    assert store.finish_run(7, 0, {"state": "COMPLETED", "end_time": 12.0}, _usage(7, 0))
    # a second attempt (e.g. after a crash before the spool was marked collected) is a no-op
    assert not store.finish_run(7, 0, {"state": "FAILED"}, _usage(7, 0, "FAILED"))
    recs = store.list_usage(job_ids=[7])
    assert len(recs) == 1 and recs[0].state == "COMPLETED"
    assert store.get_job(7).state == "COMPLETED"


def test_requeued_job_keeps_one_record_per_run(store):
    store.insert_jobs([_job(8, state="RUNNING")])
    store.finish_run(8, 0, {"state": "PENDING", "restarts": 1}, _usage(8, 0, "PREEMPTED"))
    store.update_job(8, None, state="RUNNING")
    store.finish_run(8, 1, {"state": "COMPLETED"}, _usage(8, 1))
    assert [(u.run, u.state) for u in store.list_usage(job_ids=[8])] == [(0, "PREEMPTED"), (1, "COMPLETED")]


def test_accounts_nodes_usage_state_audit(store):
    store.ensure_default_account()
    store.ensure_default_account()
    assert {a.name for a in store.list_accounts()} == {"root", "default"}
    store.upsert_node(Node(name="n1", state="IDLE", cpus=8, memory_mb=1000, gpus=[{"type": "h200", "count": 2}],
                           heartbeat=1.0))
    store.upsert_node(Node(name="n1", state="IDLE", cpus=16, memory_mb=1000, gpus=[], heartbeat=2.0))
    (n,) = store.list_nodes()
    assert (n.cpus, n.heartbeat) == (16, 2.0)
    store.put_usage_state({"default": (5.0, 10.0), "default/alice": (5.0, 10.0)})
    store.put_usage_state({"default": (6.0, 11.0)})
    assert store.get_usage_state()["default"] == (6.0, 11.0)
    store.audit(0, "test", {"x": 1})
    assert store.list_audit()[-1]["detail"] == {"x": 1}


def test_concurrent_migrations_apply_once(db_url):
    """Several nodes running `batchd migrate` at once: one migrates (holding the
    advisory lock on PostgreSQL), the others wait and find the schema at head."""
    import threading

    if not db_url.startswith("postgresql"):
        pytest.skip("the migration lock is PostgreSQL's")
    stores = [Store(db_url) for _ in range(3)]
    errors = []

    def go(s):
        try:
            upgrade(s.engine)
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        check_at_head(stores[0].engine)
    finally:
        for s in stores:
            s.close()


def test_store_submission_reserves_ids_and_inserts_in_one_transaction(store):
    """The ids are reserved from the counter (created on a fresh database) and the jobs
    `build` makes from the first are stored; a token already stored returns its jobs."""
    made, repeated = store.store_submission(3, lambda first: [_job(first + i, submit_token="t1") for i in range(3)],
                                            1000, "t1")
    assert not repeated and [j.id for j in made] == [made[0].id + i for i in range(3)]
    assert [j.id for j in store.list_jobs()] == [j.id for j in made]
    again, repeated = store.store_submission(1, lambda first: [_job(first, submit_token="t1")], 1000, "t1")
    assert repeated and [j.id for j in again] == [j.id for j in made]
    assert store.next_job_ids(1) == made[0].id + 3  # the repeat reserved nothing
    other, repeated = store.store_submission(1, lambda first: [_job(first)], 1000, None)
    assert not repeated and other[0].id == made[0].id + 4


def test_submit_facts_reads_the_users_associations_nodes_and_token(store):
    store.ensure_default_account()
    store.put_association("alice", "default", is_default=True)
    store.put_association("bob", "default")
    store.upsert_node(Node(name="n1", state="IDLE", cpus=8, memory_mb=1000, gpus=[], heartbeat=1.0))
    store.insert_jobs([_job(5, uid=1000, submit_token="tok")])
    f = store.submit_facts("alice", 1000, "tok")
    assert [a.name for a in f.accounts] == ["root", "default"]
    assert [(a["user"], a["is_default"]) for a in f.associations] == [("alice", True)]
    assert [n.name for n in f.nodes] == ["n1"]
    assert [j.id for j in f.repeated] == [5]
    assert store.submit_facts("alice", 1001, "tok").repeated == []
    assert store.submit_facts("alice", 1000, None).repeated == []


def test_submit_facts_follow_every_write_of_accounts_associations_and_nodes(store):
    """What submit_facts keeps between submissions (SQLite) is read again after each store
    write of accounts, associations or nodes: no submission is checked against old facts."""
    from batchd.model import Account

    store.ensure_default_account()
    store.upsert_node(Node(name="n1", state="IDLE", cpus=8, memory_mb=1000, gpus=[], heartbeat=1.0))

    def facts():
        f = store.submit_facts("alice", 1000, None)
        return ([a.name for a in f.accounts], [(a["account"], a["shares"]) for a in f.associations],
                [(n.name, n.state, n.heartbeat) for n in f.nodes])
    assert facts() == facts() == (["root", "default"], [], [("n1", "IDLE", 1.0)])
    store.put_association("alice", "default", shares=3)
    assert facts()[1] == [("default", 3)]
    store.put_account(Account(name="physics", parent="root", priority=100, shares=1, resources={}))
    assert facts()[0] == ["root", "default", "physics"]
    store.replace_accounts([Account(name="chem", parent="root", priority=100, shares=1, resources={})],
                           [{"user": "alice", "account": "chem", "shares": 1, "is_default": True}], 0, [])
    assert facts()[:2] == (["chem"], [("chem", 1)])
    store.set_node_state("n1", "DRAIN", "maintenance", 0)
    assert facts()[2][0][1] == "DRAIN"
    store.heartbeat(["n1"], 5.0)
    assert facts()[2][0][2] == 5.0
    store.upsert_node(Node(name="n2", state="IDLE", cpus=8, memory_mb=1000, gpus=[], heartbeat=1.0))
    assert [n for n, _s, _h in facts()[2]] == ["n1", "n2"]
    store.delete_nodes_except(["n2"])
    assert [n for n, _s, _h in facts()[2]] == ["n2"]


def test_snapshot_jobs_reads_what_a_cycle_needs(store):
    """Active jobs without their spec but for nodelist/exclude; ended jobs of the window
    with identity, state and times only; by id across both."""
    now = time.time()
    env = {"spec": {"script": "#!/bin/sh\n", "environment": {"A": "x" * 100}, "nodelist": "n[1-2]",
                    "exclude": None}}
    store.insert_jobs([_job(1, **env), _job(2, state="RUNNING", allocation={"n1": {"gpus": [0]}}),
                       _job(3, state="COMPLETED", end_time=now - 10, start_time=now - 20, exit_code=2),
                       _job(4, state="FAILED", end_time=now - 100000),
                       _job(5, state="PENDING", spec={"script": "", "exclude": "n3"}),
                       _job(6, state="COMPLETING"),
                       _job(7, state="FAILED", end_time=None)])  # an ended job with no end time is kept
    jobs = store.snapshot_jobs(("PENDING", "RUNNING"), ("COMPLETED", "FAILED"), since=now - 86400)
    assert [j.id for j in jobs] == [1, 2, 3, 5, 7]
    # every job has every field, and nothing else (an active one is built without Job.__init__)
    assert all(vars(j).keys() == {f.name for f in dataclasses.fields(Job)} for j in jobs)
    by = {j.id: j for j in jobs}
    assert by[1].spec == {"nodelist": "n[1-2]"} and by[1].request == {"tasks": 1, "per_task": {"cpu": 1}}
    assert by[2].spec == {} and by[2].allocation == {"n1": {"gpus": [0]}}
    assert by[5].spec == {"exclude": "n3"}
    assert (by[3].state, by[3].start_time, by[3].end_time, by[3].spec, by[3].request) == (
        "COMPLETED", now - 20, now - 10, {}, {})
    # a request is decoded again only when its stored text changed (scontrol update)
    store.update_job(1, None, request={"tasks": 2})
    again = {j.id: j for j in store.snapshot_jobs(("PENDING", "RUNNING"), ("COMPLETED", "FAILED"), since=now - 86400)}
    assert again[1].request == {"tasks": 2} and again[5].request is by[5].request
    # the tasks of one array with the same stored request share one decoded request
    store.insert_jobs([_job(10 + i, array_job_id=10, array_task_id=i, request={"tasks": 1, "array_task_count": 3})
                       for i in range(3)])
    arr = [j for j in store.snapshot_jobs(("PENDING",), (), since=now) if j.array_job_id == 10]
    assert len(arr) == 3 and arr[0].request is arr[1].request is arr[2].request


def test_snapshot_jobs_reads_ended_jobs_only_when_asked(store):
    """`ended_if`: the day of ended jobs is read only when the predicate wants it for the
    active jobs (the controller: a pending job with a dependency)."""
    now = time.time()
    store.insert_jobs([_job(1), _job(2, state="COMPLETED", end_time=now - 10)])
    seen = []

    def never(active):
        seen.append([j.id for j in active])
        return False
    jobs = store.snapshot_jobs(("PENDING",), ("COMPLETED",), since=now - 86400, ended_if=never)
    assert [j.id for j in jobs] == [1] and seen == [[1]]
    jobs = store.snapshot_jobs(("PENDING",), ("COMPLETED",), since=now - 86400, ended_if=lambda a: True)
    assert [j.id for j in jobs] == [1, 2]


def test_snapshot_jobs_leaves_out_settled_holds_unless_a_dependency_may_name_them(store):
    """`settled_holds` (the cycle's own snapshot): a pending job held with one of these
    reasons stored and no dependency of its own is not read, as no cycle decides anything
    for it; one held but not yet worded (a requeue-hold), one with a dependency, and any
    other job are read; when a job read has a dependency (it may name a held one), the
    held ones are read too."""
    held = dict(hold=True, reason="JobHeldUser", priority=0)
    store.insert_jobs([_job(1), _job(2, **held), _job(3, **held), _job(4, hold=True, reason="None"),
                       _job(5, **dict(held, reason="JobHeldAdmin")),
                       _job(6, state="RUNNING", hold=True, reason="JobHeldUser")])
    now = time.time()
    reasons = ("JobHeldUser", "JobHeldAdmin")

    def ids():
        return [j.id for j in store.snapshot_jobs(("PENDING", "RUNNING"), (), since=now - 86400,
                                                  settled_holds=reasons)]
    assert [j.id for j in store.snapshot_jobs(("PENDING", "RUNNING"), (), since=now - 86400)] == [1, 2, 3, 4, 5, 6]
    assert ids() == [1, 4, 6]
    store.update_job(3, None, request={"tasks": 1, "dependency": "afterok:2"})  # a held job's own dependency
    assert ids() == [1, 2, 3, 4, 5, 6]
    store.update_job(3, None, request={"tasks": 1})
    store.update_job(1, None, request={"tasks": 1, "dependency": "afterok:5"})  # names a held job
    assert ids() == [1, 2, 3, 4, 5, 6]


def test_history_is_read_through_indexes(store):
    """The cycle's last day and the views' time windows are index ranges, never a scan of
    the jobs table (issue 17: 100,000 finished jobs cost each cycle ~200 ms through the
    state index). SQLite's plan is checked; PostgreSQL's planner decides by statistics."""
    from sqlalchemy import event

    from batchd.store import jobviews
    from batchd.store.jobviews import JobQuery

    if store.engine.dialect.name != "sqlite":
        pytest.skip("query plans are checked on SQLite")
    seen: list[str] = []

    def plan(conn, cursor, statement, params, context, executemany):  # noqa: ARG001
        if statement.lstrip().upper().startswith("SELECT") and "FROM jobs" in statement:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).fetchall()
            seen.append(" / ".join(str(r[-1]) for r in rows))

    event.listen(store.engine, "before_cursor_execute", plan)
    try:
        store.snapshot_jobs(("PENDING", "RUNNING"), ("COMPLETED", "FAILED"), since=time.time() - 86400)
        jobviews.list_view_jobs(store, JobQuery(window=(time.time() - 3600, None)), ("a", "b"), ("c", "d"))
        jobviews.list_view_jobs(store, JobQuery(ended_since=time.time() - 300), ("a", "b"), ("c", "d"))
    finally:
        event.remove(store.engine, "before_cursor_execute", plan)
    assert len(seen) == 5, seen
    for p in seen:
        assert "SCAN jobs" not in p, p
    assert all("ix_jobs_state_end_time_ids (state=? AND end_time>?)" in p or "end_time=?" in p for p in seen[1:3]), seen


def test_account_policy_round_trip(store):
    # the preemption keys (issue 16) and the association limits survive the store on both backends
    from batchd.server.accounts import parse_accounts, to_doc

    pol = {"max_jobs": 2, "grp_tres_mins": {"gres/gpu": 600}, "within_account": "never",
           "reclaim_within_cohort": "lower_priority",
           "borrow_within_cohort": {"policy": "lower_priority", "max_priority_threshold": 50},
           "min_runtime_reclaim_s": "30:00", "min_runtime_preempt_s": 0}
    parsed = parse_accounts({"account": [{"name": "a", "policy": pol}, {"name": "b", "parent": "a"}]})
    store.replace_accounts(parsed.accounts, parsed.associations, 0, ["+ account a"])
    got = {a.name: a for a in store.list_accounts()}
    assert got["a"].policy == {**pol, "min_runtime_reclaim_s": 1800}
    assert not got["b"].policy
    again = parse_accounts(to_doc(store.list_accounts(), store.list_associations()))
    assert {a.name: a.policy for a in again.accounts} == {a.name: a.policy for a in parsed.accounts}


def test_update_jobs_groups_equal_changes_and_keeps_compare_and_set(store):
    """1,200 equal cancels (grouped: three UPDATEs of at most 500 ids) change only the jobs in
    an expected state; a job named twice keeps the order of its changes."""
    store.insert_jobs([_job(i, state="RUNNING" if i % 10 == 0 else "PENDING") for i in range(1, 1201)])
    changes = [(i, ("PENDING",), {"state": "CANCELLED", "end_time": 5.0}) for i in range(1, 1201)]
    done = store.update_jobs(changes)
    assert sorted(done) == [i for i in range(1, 1201) if i % 10]
    states = {j.id: j.state for j in store.list_jobs()}
    assert all(states[i] == ("RUNNING" if i % 10 == 0 else "CANCELLED") for i in range(1, 1201))
    # the same job twice: applied in order (the second expects the first's result)
    done = store.update_jobs([(10, ("RUNNING",), {"state": "SUSPENDED"}), (10, ("SUSPENDED",), {"state": "RUNNING"}),
                              (20, ("RUNNING",), {"reason": "x"})])
    assert done == [10, 10, 20]
