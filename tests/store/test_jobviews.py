"""The listing queries (batchd.store.jobviews) on SQLite and PostgreSQL: the views built
from the keys they load equal the views of whole jobs, the filters in the SQL select what
batchd.server.jobfilter selects, and the daemon's folding of pending array tasks gives the rows
the command's own folding gives."""

import dataclasses
import json
import time
import types

import pytest

from batchd.cli.fmt import expand_task_runs, fold_array_tasks
from batchd.cli.sacct import fold_pending_tasks as sacct_fold
from batchd.config import load_config
from batchd.model import Job, UsageRec
from batchd.server import acctrows, views
from batchd.server.jobfilter import filter_jobs
from batchd.store.jobviews import (
    JobQuery,
    list_folded_view_jobs,
    list_task_runs,
    list_view_jobs,
    list_view_usage,
)

NOW = time.time()
KEYS = (views.SPEC_KEYS, views.REQUEST_KEYS)


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, dev=True)


def _spec(**kw):
    base = {"script": "#!/bin/sh\ntrue\n", "environment": {"HOME": "/root", "X": "y" * 2000}, "argv": ["a"],
            "workdir": "/tmp/w", "submit_host": "vm", "output": None, "error": None, "gres": [],
            "exclusive": False, "mem_mb": None}
    base.update(kw)
    return base


def _job(jid, **kw):
    base = dict(id=jid, name="j", user="alice", uid=1000, gid=1000, account="default", partition="gpu",
                qos="normal", state="PENDING", submit_time=NOW - 100, spec=_spec(),
                request={"tasks": 1, "per_task": {"cpu": 2, "mem": 4000}, "nodes": None})
    base.update(kw)
    return Job(**base)


def _jobs():
    arr = {"tasks": 1, "per_task": {"cpu": 1, "mem": 100}, "array_task_ids": list(range(8)),
           "array_max_running": 2}
    return [
        _job(1, state="RUNNING", start_time=NOW - 50, node_list="gpu01", tres_alloc="cpu=2,mem=4000M,node=1",
             allocation={"gpu01": {"tasks": 1, "gpus": [0, 1], "cpus": 2, "memory_mb": 4000, "cpu_ids": [3, 4]}},
             request={"tasks": 1, "per_task": {"cpu": 2, "mem": 4000, "gres/gpu": 2}, "gpu_type": "h200"},
             spec=_spec(gres=[{"name": "gpu", "type": "h200", "count": 2}], output="o-%j.out", error="e.err",
                        constraint="a&b", nodelist="gpu01", exclude="gpu02", cpus_per_task=2, exclusive=True)),
        *[_job(10 + t, array_job_id=10, array_task_id=t, request=dict(arr), spec=_spec(mem_per_gpu_mb=10))
          for t in range(8)],
        _job(30, user="bob", uid=1001, account="physics", qos="low", name="other", state="COMPLETED",
             start_time=NOW - 90, end_time=NOW - 10, spec=_spec(mem_per_cpu_mb=100, input="in.txt")),
        _job(31, state="CANCELLED", end_time=NOW - 5000, spec=_spec(gpus={"type": "a", "count": 1},
                                                                    gpus_per_task={"count": 1})),
        _job(32, array_job_id=32, array_task_id=5, spec="not an object", request=[1, 2]),
        _job(33, spec=_spec(gpus_per_node={"count": 2}, ntasks_per_node=2, script_path="/x/run.sh")),
    ]


def _full_views(store, cfg):
    return [views.job_view(j, cfg, now=NOW) for j in store.list_jobs()]


def test_listing_views_equal_the_views_of_whole_jobs(store, cfg):
    jobs = _jobs()
    jobs[2].state = "RUNNING"  # an array task that left PENDING is its own row
    store.insert_jobs(jobs)
    light = list_view_jobs(store, JobQuery(), *KEYS)
    assert [views.job_view(j, cfg, now=NOW) for j in light] == _full_views(store, cfg)
    assert all("script" not in j.spec and "environment" not in j.spec for j in light if isinstance(j.spec, dict))
    assert all("array_task_ids" not in j.request for j in light if isinstance(j.request, dict))
    full = store.list_jobs()
    usage = [UsageRec(job_id=30, run=0, name="other", account="physics", user="bob", uid=1001, gid=1000,
                      partition="gpu", qos="low", node_list="gpu01", tres_alloc="cpu=1", tres={"cpu": 1},
                      billing=1.0, submit_time=NOW - 100, start_time=NOW - 90, end_time=NOW - 10, elapsed_s=80,
                      state="COMPLETED", exit_code=0, exit_signal=0)]
    assert acctrows.acct_rows(light, usage) == acctrows.acct_rows(full, usage)


@pytest.mark.parametrize("query", [
    {}, {"users": "bob"}, {"users": "1001"}, {"users": "alice,01001"}, {"accounts": "physics,default"},
    {"states": "PENDING"}, {"states": "COMPLETED,CANCELLED"}, {"names": "other"}, {"qos": "low"},
    {"partitions": "gpu", "users": "alice", "states": "RUNNING"},
], ids=lambda q: ",".join(f"{k}={v}" for k, v in q.items()) or "none")
def test_filters_in_the_sql_select_what_jobfilter_selects(store, query):
    store.insert_jobs(_jobs())

    def csv(k):
        return tuple(query[k].split(",")) if k in query else None

    q = JobQuery(users=csv("users"), accounts=csv("accounts"), partitions=csv("partitions"),
                 states=csv("states"), names=csv("names"), qos=csv("qos"))
    want = [j.id for j in filter_jobs(store.list_jobs(), query)]
    assert [j.id for j in list_view_jobs(store, q, *KEYS)] == want


def test_ended_since_ids_owner_and_window(store):
    store.insert_jobs(_jobs())
    ids = [j.id for j in list_view_jobs(store, JobQuery(ended_since=NOW - 60), *KEYS)]
    assert 30 in ids and 31 not in ids
    assert [j.id for j in list_view_jobs(store, JobQuery(ids=frozenset({1}), array_job_ids=frozenset({10})),
                                         *KEYS)] == [1, *range(10, 18)]
    assert [j.id for j in list_view_jobs(store, JobQuery(owner_uid=1001), *KEYS)] == [30]
    # -S after job 31 ended: it has no row in the window; pending and running jobs do
    got = {j.id for j in list_view_jobs(store, JobQuery(window=(NOW - 60, None)), *KEYS)}
    assert 31 not in got and {1, 10, 30} <= got
    assert list_view_jobs(store, JobQuery(window=(None, NOW - 1000)), *KEYS) == []


def test_usage_of_the_selected_jobs_without_an_id_list(store):
    store.insert_jobs(_jobs())
    rec = dict(name="j", account="default", user="alice", uid=1000, gid=1000, partition="gpu", qos="normal",
               node_list="gpu01", tres_alloc="cpu=1", tres={"cpu": 1}, billing=1.0, submit_time=NOW - 100,
               start_time=NOW - 90, end_time=NOW - 10, elapsed_s=80, state="COMPLETED", exit_code=0,
               exit_signal=0)
    for jid in (30, 31):
        store.finish_run(jid, 0, {"exit_code": 0}, UsageRec(job_id=jid, run=0, **rec))
    assert [u.job_id for u in list_view_usage(store, JobQuery(users=("bob",)), )] == [30]
    assert [u.job_id for u in list_view_usage(store, JobQuery())] == [30, 31]


@pytest.mark.parametrize("pick", [None, "tasks"], ids=["all", "task-list"])
def test_folded_rows_equal_the_commands_folding(store, cfg, pick):
    jobs = _jobs()
    jobs[3].state = "RUNNING"  # task 2 runs: tasks 0-1,3-7 stay folded
    jobs[3].node_list = "gpu02"
    jobs[5].reason = "Priority"
    jobs.append(_job(40, array_job_id=10, array_task_id=9, reason="Other"))  # a late id in array 10
    store.insert_jobs(jobs)
    chosen = None if pick is None else (lambda jid, aj, task: aj == 10 and task in (2, 3, 9))
    others, tasks, firsts = list_folded_view_jobs(store, JobQuery(), *KEYS, pick=chosen)
    got = views.fold_pending_tasks([views.job_view(j, cfg, now=NOW) for j in others], tasks,
                                   {j.array_job_id: views.job_view(j, cfg, now=NOW) for j in firsts})
    every = [v for v, j in zip(_full_views(store, cfg), store.list_jobs(), strict=True)
             if chosen is None or chosen(j.id, j.array_job_id, j.array_task_id)]
    assert got == fold_array_tasks(every)
    assert fold_array_tasks(got) == got
    if pick is None:
        assert [v["display_id"] for v in got if v["id"] == 10] == ["10_[0-1,3-7,9%2]"]


def _varied_arrays():
    """Arrays whose pending tasks differ in every way a task can be changed alone."""
    jobs = _jobs()
    jobs[3].state = "RUNNING"  # task 2 of array 10 runs
    jobs[3].node_list = "gpu02"
    jobs[5].reason = "Priority"  # task 4: another reason
    jobs[6].hold, jobs[6].reason, jobs[6].priority = True, "JobHeldUser", 0  # task 5 held
    jobs[7].spec = _spec(mem_per_gpu_mb=10, nodelist="gpu01")  # task 6: scontrol update NodeList
    jobs[8].request = {**jobs[8].request, "time_limit_admin": True}  # task 7: an admin's time limit
    jobs[4].restarts = 1  # task 3 was requeued: it ran, so it is no never-run task
    big = {"tasks": 1, "per_task": {"cpu": 1, "mem": 100}, "array_task_ids": list(range(20))}
    jobs += [_job(100 + t, array_job_id=100, array_task_id=t, request=dict(big), name="big") for t in range(20)]
    jobs.append(_job(40, array_job_id=10, array_task_id=9, reason="Other"))  # a late id in array 10
    jobs.append(_job(41, array_job_id=10, array_task_id=10, request=dict(jobs[1].request),
                     spec=_spec(mem_per_gpu_mb=10)))  # and one alike the first tasks
    return jobs


def _tasks_pick(jid, aj, task):
    return aj == 100 and task % 3 != 1 or aj == 10 and task in (0, 1, 4, 10)


@pytest.mark.parametrize("pick", [None, "tasks"], ids=["all", "task-list"])
def test_task_runs_expand_to_the_views_of_every_task(store, cfg, pick):
    store.insert_jobs(_varied_arrays())
    chosen = None if pick is None else _tasks_pick
    others, runs = list_task_runs(store, JobQuery(), *KEYS, pick=chosen)
    reply = [{"view": views.job_view(r.first, cfg, now=NOW), "tasks": views.id_segments(r.tasks)} for r in runs]
    got = expand_task_runs([views.job_view(j, cfg, now=NOW) for j in others], reply)
    every = [v for v, j in zip(_full_views(store, cfg), store.list_jobs(), strict=True)
             if chosen is None or chosen(j.id, j.array_job_id, j.array_task_id)]
    assert got == every
    assert all(j.state != "PENDING" or j.array_job_id is None or j.restarts for j in others)
    if pick is None:
        # array 100 is one run, one segment; array 10's changed tasks are runs of their own
        big = [r for r in runs if r.first.array_job_id == 100]
        assert [(r.first.id, views.id_segments(r.tasks)) for r in big] == [(100, [[100, 0, 20]])]
        ten = [[jid for jid, _t in r.tasks] for r in runs if r.first.array_job_id == 10]
        assert {10, 11, 41} <= set(ten[0])
        # task 7's request differs in a key no view reads: in the first run or alone (PostgreSQL
        # compares the request whole)
        assert [t for t in ten[1:] if t != [17]] == [[14], [15], [16], [40]]


def test_id_segments_step_both_ids():
    assert views.id_segments([]) == []
    assert views.id_segments([(5, 0), (6, 1), (7, 2), (9, 3), (10, 5), (11, 6)]) == [
        [5, 0, 3], [9, 3, 1], [10, 5, 2]]


@pytest.mark.parametrize("window", [None, (NOW - 60, None), (None, NOW - 1000)], ids=["all", "since", "before"])
def test_sacct_folded_by_the_daemon_prints_the_rows_of_every_task_folded(store, cfg, window, monkeypatch):
    from batchd.server.service import Service

    # a running job's elapsed time is counted to now: one clock for both listings compared
    monkeypatch.setattr(acctrows, "time", types.SimpleNamespace(time=lambda: NOW))
    store.insert_jobs(_varied_arrays())
    svc = Service(cfg, store)
    q = {"all_users": "1"}
    if window is not None:
        q.update({k: str(v) for k, v in zip(("start", "end"), window, strict=True) if v is not None})
    plain = svc.accounting(None, q)  # type: ignore[arg-type]
    folded = svc.accounting(None, {**q, "fold": "1"})  # type: ignore[arg-type]
    assert sacct_fold(folded["records"], folded.get("pending_tasks")) == sacct_fold(plain["records"])
    if window is None:
        assert len(folded["records"]) < len(plain["records"]) - 15
        assert folded["pending_tasks"]["100"] == list(range(1, 20))


def test_malformed_documents_are_loaded_whole(store, cfg):
    store.insert_jobs([_job(32, spec="text", request=[1])])
    (j,) = list_view_jobs(store, JobQuery(), *KEYS)
    assert (j.spec, j.request) == ("text", [1])
    assert views.job_view(j, cfg, now=NOW) == views.job_view(dataclasses.replace(store.list_jobs()[0]), cfg, now=NOW)


def test_an_object_stored_with_leading_space_is_read_as_the_object(store):
    # SQLite tells an object by its first character: one written by another hand still reads
    from sqlalchemy import text

    store.insert_jobs([_job(33)])
    with store.engine.begin() as c:
        c.execute(text("UPDATE jobs SET spec = :s WHERE id = 33"), {"s": ' \n{"workdir": "/w", "script": "x"}'})
    (j,) = list_view_jobs(store, JobQuery(), *KEYS)
    assert j.spec == {"workdir": "/w"}


def test_a_long_request_comes_without_its_task_list(store):
    """An older record's request carries its array's whole task list: PostgreSQL drops it
    before sending (a jsonb copy only for a long document); every backend loads the keys."""
    from batchd.store.jobviews import _select_view

    long = {"tasks": 1, "per_task": {"cpu": 1, "mem": 100}, "array_task_ids": list(range(5000))}
    store.insert_jobs([_job(7, request=long), _job(8)])
    with store.engine.connect() as c:
        rows = {r.id: r for r in c.execute(_select_view(store, JobQuery(), *KEYS))}
    if store.engine.dialect.name == "postgresql":
        assert json.loads(rows[7].request_raw) == {"tasks": 1, "per_task": {"cpu": 1, "mem": 100}}
        assert json.loads(rows[8].request_raw) == _job(8).request  # a short one as it is stored
    (a, b) = list_view_jobs(store, JobQuery(), *KEYS)
    assert a.request == {"tasks": 1, "per_task": {"cpu": 1, "mem": 100}} and b.request.get("tasks") == 1


def test_a_null_key_reads_as_a_missing_one(store, cfg):
    # JOB_VIEW's workdir is text: a record whose workdir is JSON null shows "", as one without
    store.insert_jobs([_job(5, spec=_spec(workdir=None)), _job(6, spec={"script": "x"})])
    assert [views.job_view(j, cfg)["workdir"] for j in list_view_jobs(store, JobQuery(), *KEYS)] == ["", ""]


def _plan(store, q, *columns):
    from sqlalchemy import select

    from batchd.store.jobviews import _conditions
    from batchd.store.tables import JobRow

    stmt = select(*(columns or (JobRow.id,))).where(*_conditions(q, store))
    sql = str(stmt.compile(store.engine, compile_kwargs={"literal_binds": True}))
    prefix = "EXPLAIN QUERY PLAN " if store.engine.dialect.name == "sqlite" else "EXPLAIN "
    with store.engine.connect() as c:
        if store.engine.dialect.name == "postgresql":
            c.exec_driver_sql("SET enable_seqscan = off")  # a tiny table: ask whether an index can serve
        return " ".join(str(r[-1]) for r in c.exec_driver_sql(prefix + sql))


@pytest.mark.parametrize("q, index", [
    (JobQuery(ended_since=NOW), "ix_jobs_end_time"),
    (JobQuery(window=(NOW, None)), "ix_jobs_end_time"),
    (JobQuery(window=(None, NOW)), "ix_jobs_submit_time"),
    (JobQuery(users=("bob",)), "ix_jobs_user"),
    (JobQuery(accounts=("physics",)), "ix_jobs_account"),
], ids=["min-job-age", "sacct-S", "sacct-E", "user", "account"])
def test_windows_and_filters_use_an_index(store, q, index):
    store.insert_jobs(_jobs())
    plan = _plan(store, q)
    if store.engine.dialect.name == "sqlite":
        assert index in plan, plan
    else:  # on a table this small PostgreSQL's choice among the indexes is its own: one serves
        assert "Index" in plan and "Seq Scan" not in plan, plan


@pytest.mark.parametrize("q", [JobQuery(pending_tasks=True, ended_since=NOW),
                               JobQuery(fresh_tasks=True, window=(NOW, None))], ids=["squeue", "sacct"])
def test_the_pending_tasks_of_arrays_are_listed_from_an_index(store, q):
    # squeue's and sacct's folded rows read these columns of every pending task: on SQLite
    # from the index alone, not the rows
    from batchd.store.tables import JobRow

    store.insert_jobs(_jobs())
    plan = _plan(store, q, JobRow.id, JobRow.array_job_id, JobRow.array_task_id, JobRow.submit_time)
    if store.engine.dialect.name == "sqlite":
        assert "COVERING INDEX ix_jobs_state_end_time_ids" in plan, plan
    else:  # PostgreSQL: an index serves (which one is its choice on a table this small)
        assert "Index" in plan and "Seq Scan" not in plan, plan


@pytest.mark.parametrize("q", [JobQuery(pending_tasks=True, ended_since=NOW), JobQuery(ended_since=NOW),
                               JobQuery(fresh_tasks=True, window=(NOW, None))], ids=["squeue-tasks", "squeue", "sacct"])
def test_on_postgresql_a_time_window_is_no_self_join(store, q):
    """PostgreSQL reads a window's OR of index ranges in one scan of jobs: as a subquery of
    ids (SQLite's form) its plan, with statistics from before a large array came, was a
    nested loop of both sides, 10,000 x 10,000 rows (squeue took 17 s)."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite keeps the subquery, for its index use (test_windows_and_filters_use_an_index)")
    store.insert_jobs(_jobs())
    plan = _plan(store, q)
    assert "Join" not in plan and "Nested Loop" not in plan and "SubPlan" not in plan, plan


def test_the_daemons_kept_views_follow_every_change_of_a_job(store, cfg, monkeypatch):
    from batchd.server.service import Service
    from batchd.server.viewmemo import dumps

    # a running job's run time is counted to now: one clock for every listing compared
    monkeypatch.setattr(views, "time", types.SimpleNamespace(time=lambda: NOW, monotonic=time.monotonic))
    store.insert_jobs(_jobs())
    svc = Service(cfg, store)
    for query in ({}, {"fold": "1"}):
        before = svc.list_jobs(query)["jobs"]
        again = svc.list_jobs(query)["jobs"]
        assert again == before and dumps({"jobs": again}) == json.dumps({"jobs": again})
        for jid, change in ((33, {"hold": True, "reason": "JobHeldUser", "priority": 0}),
                            (33, {"spec": _spec(gpus_per_node={"count": 2}, ntasks_per_node=2,
                                                script_path="/x/run.sh", nodelist="gpu03")}),
                            (12, {"reason": "Resources"}), (30, {"comment": "seen"})):
            assert store.update_job(jid, **change)
            now = {v["id"]: v for v in svc.list_jobs({**query, "all": "1"})["jobs"]}
            full = {v["id"]: v for v in _full_views(store, cfg)}
            for k, v in now.items():
                if "array_task_str" not in v or v["array_task_str"] is None:
                    assert v == dict(full[k], run_time_s=v["run_time_s"]), k


def test_keys_trim_every_view_and_every_runs_view(store, cfg):
    from batchd.server.service import Service
    from batchd.server.viewmemo import dumps

    store.insert_jobs(_varied_arrays())
    svc = Service(cfg, store)
    for query in ({}, {"fold": "1"}, {"fold": "runs"}):
        whole = svc.list_jobs(query)
        got = svc.list_jobs({**query, "keys": "id,state,display_id,no_such_key"})
        assert [v for v in got["jobs"]] == [{k: v[k] for k in ("id", "state", "display_id")} for v in whole["jobs"]]
        assert [r["view"] for r in got.get("task_runs", [])] == [
            {k: r["view"][k] for k in ("id", "state", "display_id")} for r in whole.get("task_runs", [])]
        assert [r["tasks"] for r in got.get("task_runs", [])] == [r["tasks"] for r in whole.get("task_runs", [])]
        assert dumps(got) == json.dumps(got)
