"""One job never stops the node agent's pass, the controller's cycle or a job list
(issue 12, isolation of failures), and the faults that lose nothing: a removed run
directory never starts a run twice, a full disk never loses an exit status.

Malformed records are written straight into the store (as a daemon before the socket's
checks could have stored them); launches are made to fail by monkeypatching."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time

import pytest

from batchd.config import parse_config
from batchd.control.controller import BAD_REQUEST, Controller
from batchd.model import Job, Node
from batchd.node import launcher, spool, supervisor
from batchd.node.agent import Agent
from batchd.server.acctrows import acct_rows
from batchd.server.views import job_view
from batchd.store import Store
from batchd.store.migrate import upgrade


@pytest.fixture
def env(tmp_path):
    cfg = parse_config({"state_dir": str(tmp_path), "scheduler": {"kill_wait_s": 1},
                        "node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]})
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    upgrade(store.engine)
    store.ensure_default_account()
    store.upsert_node(Node(name="n1", state="IDLE", cpus=4, memory_mb=1000, gpus=[], heartbeat=time.time()))
    yield cfg, store, tmp_path
    store.close()


def _spec(tmp_path, name, script="#!/bin/sh\necho ran\n", **extra):
    return {"script": script, "workdir": str(tmp_path), "environment": {"PATH": "/usr/bin:/bin"},
            "output": str(tmp_path / f"{name}.out"), **extra}


def _running(store, job_id, spec, **kw):
    store.insert_jobs([Job(id=job_id, name=f"j{job_id}", user="root", uid=os.getuid(), gid=os.getgid(),
                           account="default", partition="batch", qos="normal", state="RUNNING",
                           submit_time=time.time(), spec=spec, request={"tasks": 1, "per_task": {"cpu": 1}},
                           start_time=time.time(),
                           allocation={"n1": {"tasks": 1, "gpus": [], "cpus": 1, "memory_mb": 100}},
                           node_list="n1", tres_alloc="cpu=1,mem=100M,node=1", **kw)])


def _until(agent, store, pred, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        agent.step()
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached; jobs: "
                         + repr([(j.id, j.state, j.reason) for j in store.list_jobs()]))


def _done(store, *ids):
    return lambda: all(store.get_job(i).state not in ("RUNNING", "PENDING") for i in ids)


# ---------------------------------------------------------------- the agent


@pytest.mark.parametrize("bad", [
    {"output": 123},                     # not text (found item 2)
    {"argv": 5},
    {"environment": "A=1"},
    {"signal": [1, 2]},
    {"signal": {"signal": 999, "batch_only": True}},
], ids=["output-int", "argv-int", "env-str", "signal-list", "signal-999"])
def test_a_malformed_job_fails_alone_and_the_other_job_runs(env, bad, caplog):
    cfg, store, tmp = env
    _running(store, 1, {**_spec(tmp, "bad"), **bad})
    _running(store, 2, _spec(tmp, "good"))
    ag = Agent(cfg, store, ["n1"])
    with caplog.at_level(logging.ERROR, logger="batchd.node.agent"):
        _until(ag, store, _done(store, 1, 2))
        for _ in range(3):
            ag.step()
    good, badjob = store.get_job(2), store.get_job(1)
    assert (good.state, good.exit_code) == ("COMPLETED", 0)
    assert (tmp / "good.out").read_text() == "ran\n"
    assert (badjob.state, badjob.reason) == ("FAILED", "JobLaunchFailure")
    assert [u.state for u in store.list_usage(job_ids=[1])] == ["FAILED"]
    failures = [r for r in caplog.records if "job launch failed job_id=1" in r.getMessage()]
    assert len(failures) == 1


def test_a_pattern_that_raises_fails_that_job_only(env, monkeypatch):
    """Found item 1: `int('²')` in the pattern expansion made every pass fail."""
    from batchd.slurm import filepattern

    cfg, store, tmp = env
    _running(store, 1, _spec(tmp, "bad", output=str(tmp / "x-%\u00b2j.out")))
    _running(store, 2, _spec(tmp, "good"))
    real = filepattern.expand_pattern

    def expand(pattern, view, node):
        if "\u00b2" in pattern:
            raise ValueError("invalid literal for int() with base 10: '\u00b2'")
        return real(pattern, view, node)

    monkeypatch.setattr(filepattern, "expand_pattern", expand)
    ag = Agent(cfg, store, ["n1"])
    _until(ag, store, _done(store, 1, 2))
    assert store.get_job(2).state == "COMPLETED"
    assert (store.get_job(1).state, store.get_job(1).reason) == ("FAILED", "JobLaunchFailure")
    # the line goes to Slurm's default output file when the job's own cannot be named
    assert "job 1 could not be launched" in (tmp / "slurm-1.out").read_text()


def test_a_launch_that_raises_fails_that_job_with_a_line_in_its_error_file(env, monkeypatch):
    cfg, store, tmp = env
    _running(store, 1, _spec(tmp, "bad", error=str(tmp / "bad.err")))
    _running(store, 2, _spec(tmp, "good"))
    real = launcher.launch

    def launch(req, spool_dir, **kw):
        if req.job_id == 1:
            raise RuntimeError("supervisor exploded")
        return real(req, spool_dir, **kw)

    monkeypatch.setattr(launcher, "launch", launch)
    ag = Agent(cfg, store, ["n1"])
    _until(ag, store, _done(store, 1, 2))
    assert store.get_job(2).state == "COMPLETED"
    assert (store.get_job(1).state, store.get_job(1).reason) == ("FAILED", "JobLaunchFailure")
    assert "job 1 could not be launched: supervisor exploded" in (tmp / "bad.err").read_text()


def test_bookkeeping_that_keeps_failing_ends_only_that_job(env, monkeypatch, caplog):
    cfg, store, tmp = env
    _running(store, 1, _spec(tmp, "slow1", script="#!/bin/sh\nsleep 30\n"))
    _running(store, 2, _spec(tmp, "good", script="#!/bin/sh\nsleep 0.5; echo ran\n"))
    ag = Agent(cfg, store, ["n1"])
    ag.step()  # both launched
    real = ag.sampler.sample

    def sample(j, pid):
        if j.id == 1:
            raise KeyError("broken bookkeeping")
        return real(j, pid)

    monkeypatch.setattr(ag.sampler, "sample", sample)
    with caplog.at_level(logging.ERROR, logger="batchd.node.agent"):
        _until(ag, store, _done(store, 1, 2))
    assert store.get_job(2).state == "COMPLETED"
    assert (store.get_job(1).state, store.get_job(1).reason) == ("FAILED", "SystemFailure")
    assert len([r for r in caplog.records if "job bookkeeping failed job_id=1" in r.getMessage()]) == 1
    _until(ag, store, lambda: not launcher.list_runs(ag.spool))  # the run was killed and collected


# ---------------------------------------------------------------- a removed run directory


def _remove_tree(path) -> None:
    """`rm -rf` of a tree that live supervisors write into: a file made while it is being
    removed ("Directory not empty") is removed by the next try, as an admin's rm would."""
    deadline = time.monotonic() + 10
    while True:
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_a_removed_run_directory_is_restored_and_the_run_is_not_started_again(env):
    cfg, store, tmp = env
    starts = tmp / "starts"
    for i in (1, 2):
        _running(store, i, _spec(tmp, f"r{i}", script=f"#!/bin/sh\necho {i} >> {starts}\nsleep 2\n"))
    ag = Agent(cfg, store, ["n1"])
    _until(ag, store, lambda: starts.exists() and len(starts.read_text().split()) == 2)
    assert {j.launched_run for j in store.list_jobs()} == {0}
    _remove_tree(ag.spool)
    _until(ag, store, _done(store, 1, 2))
    assert sorted(starts.read_text().split()) == ["1", "2"]  # each started exactly once
    assert [(j.state, j.restarts) for j in store.list_jobs()] == [("COMPLETED", 0)] * 2
    assert sorted((u.job_id, u.run, u.state) for u in store.list_usage()) == [(1, 0, "COMPLETED"),
                                                                               (2, 0, "COMPLETED")]


def test_a_launched_run_without_directory_or_supervisor_is_node_fail_not_a_relaunch(env, monkeypatch):
    cfg, store, tmp = env
    _running(store, 1, _spec(tmp, "gone"), launched_run=0, requeue=False)
    calls = []
    monkeypatch.setattr(launcher, "launch", lambda req, sp, **kw: calls.append(req))
    ag = Agent(cfg, store, ["n1"])
    _until(ag, store, _done(store, 1))
    assert calls == []
    assert store.get_job(1).state == "NODE_FAIL"
    assert [u.state for u in store.list_usage(job_ids=[1])] == ["NODE_FAIL"]


def test_launched_run_is_recorded_before_the_run_directory_exists(env, monkeypatch):
    cfg, store, tmp = env
    _running(store, 1, _spec(tmp, "a"))
    seen = []
    real = launcher._spawn_supervisor

    def spawn(jobdir, lock_fd):
        seen.append(("spawn", store.get_job(1).launched_run))
        return real(jobdir, lock_fd)

    real_rename = os.rename

    def rename(a, b):
        if b == spool.jobdir_path(Agent(cfg, store, ["n1"]).spool, 1, 0):
            seen.append(("rename", store.get_job(1).launched_run))
        return real_rename(a, b)

    monkeypatch.setattr(launcher, "_spawn_supervisor", spawn)
    monkeypatch.setattr(launcher.os, "rename", rename)
    ag = Agent(cfg, store, ["n1"])
    ag.step()
    monkeypatch.undo()
    assert seen[:2] == [("rename", 0), ("spawn", 0)]
    _until(ag, store, _done(store, 1))
    assert store.get_job(1).state == "COMPLETED"


class Crash(BaseException):
    """The daemon dying (not an error the agent may catch)."""


def test_a_daemon_killed_between_recording_and_making_the_run_directory_launches_it_once(env, monkeypatch):
    cfg, store, tmp = env
    starts = tmp / "starts"
    _running(store, 1, _spec(tmp, "a", script=f"#!/bin/sh\necho x >> {starts}\n"))
    real = os.rename

    def rename(a, b):
        if os.path.basename(b) == "job.1.0":
            raise Crash()
        return real(a, b)

    monkeypatch.setattr(launcher.os, "rename", rename)
    with pytest.raises(Crash):
        Agent(cfg, store, ["n1"]).step()
    monkeypatch.undo()
    assert store.get_job(1).launched_run == 0  # recorded, but the run's directory never appeared
    ag = Agent(cfg, store, ["n1"])
    assert launcher.staged(ag.spool, 1, 0)
    _until(ag, store, _done(store, 1))
    assert (store.get_job(1).state, starts.read_text()) == ("COMPLETED", "x\n")
    assert launcher.staged(ag.spool, 1, 0) == []


# ---------------------------------------------------------------- descriptors above 1024


def test_a_launch_with_descriptors_above_1024_completes(env):
    cfg, store, tmp = env
    launcher.raise_nofile_limit()
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1300:
        pytest.skip("the descriptor limit is below 1300")
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(1200)]
    try:
        assert max(fds) > 1100
        _running(store, 1, _spec(tmp, "fd"))
        ag = Agent(cfg, store, ["n1"])
        _until(ag, store, _done(store, 1))
    finally:
        for fd in fds:
            os.close(fd)
    j = store.get_job(1)
    assert (j.state, j.reason, j.exit_code) == ("COMPLETED", "None", 0)


def test_raise_nofile_limit_sets_the_soft_limit_to_the_hard_one():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard > 64:
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        assert launcher.raise_nofile_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---------------------------------------------------------------- a full disk at the end


def test_the_supervisor_keeps_the_exit_status_until_it_can_be_written(tmp_path, monkeypatch):
    sup = supervisor.Supervisor(str(tmp_path / "job.1.0"), None)
    os.mkdir(sup.jobdir)
    real = supervisor.write_json_atomic
    failures = []

    def write(path, data, mode=0o600):
        if len(failures) < 3:
            failures.append(path)
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data, mode)

    monkeypatch.setattr(supervisor, "write_json_atomic", write)
    monkeypatch.setattr(supervisor.time, "sleep", lambda s: None)
    sup._write_record(spool.EXIT, {"final_state": "COMPLETED", "exit_code": 0})
    assert len(failures) == 3
    assert spool.read_json(os.path.join(sup.jobdir, spool.EXIT)) == {"final_state": "COMPLETED", "exit_code": 0}


def test_a_full_disk_while_recording_an_end_is_logged_once_and_recorded_later(env, monkeypatch, caplog):
    cfg, store, tmp = env
    _running(store, 1, _spec(tmp, "a"))
    ag = Agent(cfg, store, ["n1"])
    ag.step()  # launched; no pass until its end is in the spool
    deadline = time.time() + 20
    while launcher.poll(ag.spool, 1, 0).state != "EXITED" and time.time() < deadline:
        time.sleep(0.05)
    real = store.finish_run

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "finish_run", full)
    with caplog.at_level(logging.ERROR, logger="batchd.node.agent"):
        for _ in range(5):
            ag.step()
    lines = [r.getMessage() for r in caplog.records if "no space left on device" in r.getMessage()]
    assert len(lines) == 1
    assert store.get_job(1).state == "RUNNING"
    monkeypatch.setattr(store, "finish_run", real)
    _until(ag, store, _done(store, 1))
    j = store.get_job(1)
    assert (j.state, j.exit_code, j.restarts) == ("COMPLETED", 0, 0)


# ---------------------------------------------------------------- the controller


def _pending(store, job_id, request):
    store.insert_jobs([Job(id=job_id, name=f"p{job_id}", user="root", uid=0, gid=0, account="default",
                           partition="batch", qos="normal", state="PENDING", submit_time=time.time() - 10,
                           spec={"script": "true", "workdir": "/"}, request=request)])


@pytest.mark.parametrize("bad", [
    {"tasks": 1, "per_task": {"cpu": -8}},
    {"tasks": 1, "per_task": {"cpu": 1, "mem": -100}},
    {"tasks": 1, "nodes": 0, "per_task": {"cpu": 1}},
    {"tasks": "x", "per_task": {"cpu": 1}},
    {"tasks": 1, "per_task": "cpu"},
    {"tasks": 1, "per_task": {"cpu": 1}, "dependency": {"op": "and", "items": "junk"}},
], ids=["cpu-neg", "mem-neg", "nodes-0", "tasks-str", "per-task-str", "dependency-junk"])
def test_a_pending_job_the_scheduler_cannot_take_is_left_out_and_the_others_start(env, bad, caplog):
    cfg, store, _tmp = env
    _pending(store, 1, bad)
    _pending(store, 2, {"tasks": 1, "per_task": {"cpu": 1}})
    ctl = Controller(cfg, store)
    with caplog.at_level(logging.ERROR, logger="batchd.control.controller"):
        ctl.cycle()
        ctl.cycle()
    assert store.get_job(2).state == "RUNNING"
    assert (store.get_job(1).state, store.get_job(1).reason) == ("PENDING", BAD_REQUEST)
    assert len([r for r in caplog.records if "job_id=1" in r.getMessage()]) == 1


# ---------------------------------------------------------------- the views


def test_a_malformed_stored_job_is_shown_with_fallbacks(env):
    cfg, store, tmp = env
    _running(store, 1, {**_spec(tmp, "x"), "output": 123, "error": ["no"]})
    _running(store, 2, _spec(tmp, "y"))
    jobs = store.list_jobs()
    views = [job_view(j, cfg) for j in jobs]
    assert [v["id"] for v in views] == [1, 2]
    assert views[1]["stdout"] == str(tmp / "y.out")
    rows = acct_rows(jobs, [])
    assert [r["job_id_raw"] for r in rows] == ["1", "1.batch", "2", "2.batch"]


# ---------------------------------------------------------------- job ids


def test_job_ids_on_a_fresh_database_are_race_free(db_url):
    stores = [Store(db_url) for _ in range(2)]
    upgrade(stores[0].engine)
    firsts: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def take(s):
        try:
            barrier.wait()
            firsts.append(s.next_job_ids(1))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=take, args=(stores[i % 2],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    assert sorted(firsts) == list(range(1, 9))
