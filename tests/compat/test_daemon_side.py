"""The daemon side of Slurm compatibility, without a socket: dependency text and
EligibleTime kept by the controller, requeuehold/uhold/StartTime= in the service,
the optional JOB_VIEW keys, `--signal=B:` and slurmstepd's CANCELLED lines."""

from __future__ import annotations

import os
import pwd
import signal
import time
from pathlib import Path

import pytest

from batchd.config import load_config
from batchd.control.controller import REQUEUE_HELD, Controller
from batchd.errors import SubmitError
from batchd.model import Job
from batchd.node import launcher
from batchd.node.runs import end_run
from batchd.server.service import Caller, Service
from batchd.server.views import job_view, request_keys, std_paths
from batchd.store import Store
from tests.refstore import reference_store

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "slurm-reference.toml"
ME = Caller(uid=os.getuid(), gid=os.getgid())
OTHER_UID = 54321  # owns jobs the caller did not submit


@pytest.fixture
def cluster(tmp_path: Path):
    """(service, controller, store) over a fresh SQLite store with the reference node."""
    cfg, store = reference_store(tmp_path / "batchd.db", dev=True)
    yield Service(cfg, store), Controller(cfg, store), store
    store.close()


def spec(tmp_path: Path, **kw: object) -> dict:
    base = {"name": "job", "script": "#!/bin/sh\ntrue\n", "workdir": str(tmp_path), "submit_dir": str(tmp_path),
            "environment": {}, "export": "ALL", "argv": [], "account": "default"}
    base.update(kw)
    return base


def submit(svc: Service, tmp_path: Path, **kw: object) -> int:
    return int(svc.submit(ME, spec(tmp_path, **kw))["job_id"])


def finish(store: Store, jid: int, state: str, code: int = 0) -> None:
    store.update_job(jid, None, state=state, end_time=time.time(), exit_code=code)


def view(svc: Service, jid: int) -> dict:
    return svc.list_jobs({"ids": str(jid)})["jobs"][0]


# ---------------------------------------------------------------------- dependencies
def test_dependency_text_follows_the_jobs_it_names(cluster, tmp_path):
    svc, ctl, store = cluster
    a = submit(svc, tmp_path, name="A", hold=True)
    f = submit(svc, tmp_path, name="F", hold=True)
    b = submit(svc, tmp_path, name="B", dependency=f"afterok:{a}")
    y = submit(svc, tmp_path, name="Y", dependency=f"afterany:{a}:{f}")
    c = submit(svc, tmp_path, name="C", dependency=f"afterok:{f}")
    assert view(svc, b)["dependency"] == f"afterok:{a}(unfulfilled)"
    assert view(svc, y)["dependency"] == f"afterany:{a}(unfulfilled),afterany:{f}(unfulfilled)"
    assert view(svc, b)["eligible_time"] is None
    finish(store, a, "COMPLETED")
    finish(store, f, "FAILED", 1)
    ctl.cycle()
    assert view(svc, b)["dependency"] is None and view(svc, b)["eligible_time"] is not None
    assert view(svc, y)["dependency"] is None
    vc = view(svc, c)
    assert (vc["dependency"], vc["reason"]) == (f"afterok:{f}(failed)", "DependencyNeverSatisfied")


def test_dependency_on_a_whole_array_and_or_lists(cluster, tmp_path):
    svc, ctl, store = cluster
    arr = submit(svc, tmp_path, name="arr", array="0-2", hold=True)
    a = submit(svc, tmp_path, name="A", hold=True)
    whole = submit(svc, tmp_path, dependency=f"afterok:{arr}")
    one = submit(svc, tmp_path, dependency=f"afterok:{arr}_1?after:{a}+2")
    assert view(svc, whole)["dependency"] == f"afterok:{arr}_*(unfulfilled)"
    assert view(svc, one)["dependency"] == f"afterok:{arr}_1(unfulfilled)?after:{a}+2(unfulfilled)"
    task1 = next(j.id for j in store.list_jobs() if j.array_job_id == arr and j.array_task_id == 1)
    finish(store, task1, "FAILED", 2)
    ctl.cycle()
    assert view(svc, one)["dependency"] == f"afterok:{arr}_1(failed)?after:{a}+2(unfulfilled)"
    assert view(svc, one)["reason"] == "Dependency"  # one of `?` may still hold
    # the whole array is judged once every task ended (Slurm's test_job_array_completed)
    assert view(svc, whole)["reason"] == "Dependency"
    for j in store.list_jobs():
        if j.array_job_id == arr and j.state == "PENDING":
            finish(store, j.id, "COMPLETED")
    ctl.cycle()
    assert (view(svc, whole)["reason"], view(svc, whole)["dependency"]) == \
        ("DependencyNeverSatisfied", f"afterok:{arr}_*(failed)")


def test_singleton_waits_for_the_earlier_job_of_its_name(cluster, tmp_path):
    svc, ctl, store = cluster
    first = submit(svc, tmp_path, name="single", dependency="singleton")
    second = submit(svc, tmp_path, name="single", dependency="singleton")
    assert view(svc, first)["dependency"] is None
    assert view(svc, second)["dependency"] == "singleton(unfulfilled)"
    ctl.cycle()
    assert view(svc, first)["state"] == "RUNNING"
    assert view(svc, second)["state"] == "PENDING" and view(svc, second)["reason"] == "Dependency"
    finish(store, first, "COMPLETED")
    ctl.cycle()
    assert view(svc, second)["state"] == "RUNNING" and view(svc, second)["dependency"] is None


def test_afterok_on_an_unknown_job_is_refused(cluster, tmp_path):
    svc, _ctl, store = cluster
    with pytest.raises(SubmitError, match="Job dependency problem"):
        submit(svc, tmp_path, dependency="afterok:999")
    assert store.list_jobs() == []
    # afterany on an unknown job is accepted and satisfied at once, as in Slurm
    jid = submit(svc, tmp_path, dependency="afterany:999")
    assert view(svc, jid)["dependency"] is None


# ---------------------------------------------------------------------- hold / requeue / update
def _running(svc: Service, ctl: Controller, tmp_path: Path) -> int:
    jid = submit(svc, tmp_path)
    ctl.cycle()
    assert view(svc, jid)["state"] == "RUNNING"
    return jid


@pytest.mark.parametrize("key, value", [("nodelist", "gpu09"), ("exclude", "gpu09"), ("nodelist", "vm,gpu09"),
                                        ("nodelist", "vm[")])
def test_unknown_node_names_are_refused_as_slurm(cluster, tmp_path, key, value):
    # Slurm 22.05 (peer, 2026-12-04): `sbatch -w gpu09`, `-x gpu09`, `-w vm,gpu09` ->
    # "Batch job submission failed: Invalid node name specified", exit 1 (batchd accepted
    # the job, which then pended forever); nothing is stored
    svc, _ctl, store = cluster
    known = svc.cluster_info("root")["nodes"][0]["name"]
    with pytest.raises(SubmitError, match="^Invalid node name specified$"):
        submit(svc, tmp_path, **{key: value.replace("vm", known)})
    assert store.list_jobs() == []
    assert submit(svc, tmp_path, nodelist=known) > 0


def test_update_of_node_lists_checks_names_as_submit(cluster, tmp_path):
    # Slurm 22.05 (peer, tests/compat/recorded/errors_slurm2205.json): `scontrol update JobId=N
    # NodeList=gpu09` (and ExcNodeList=) -> "Invalid node name specified for job N", exit 1;
    # a known name is taken; batchd said "Update of this parameter is not supported"
    svc, ctl, store = cluster
    known = svc.cluster_info("root")["nodes"][0]["name"]
    jid = submit(svc, tmp_path, hold=True)
    for key in ("nodelist", "exclude"):
        reply = svc.update(ME, [str(jid)], {key: "gpu09"})
        assert reply == {"done": [], "errors": [{"id": str(jid), "message": "Invalid node name specified"}]}
    assert svc.update(ME, [str(jid)], {"nodelist": known, "exclude": None})["done"] == [str(jid)]
    (job,) = store.list_jobs()
    assert (job.spec["nodelist"], job.spec["exclude"]) == (known, None)
    assert svc.update(ME, [str(jid)], {"nodelist": None})["done"] == [str(jid)]  # NodeList= clears it
    assert store.list_jobs()[0].spec["nodelist"] is None
    # a required node excluded later is taken, as in Slurm (only the submit refuses `-w vm -x vm`)
    assert svc.update(ME, [str(jid)], {"nodelist": known, "exclude": known})["done"] == [str(jid)]
    view = svc.list_jobs({})["jobs"][0]
    assert (view["req_node_list"], view["exc_node_list"]) == (known, known)  # ReqNodeList=, ExcNodeList=
    with pytest.raises(SubmitError, match="^Invalid node name specified$"):
        submit(svc, tmp_path, nodelist=known, exclude=known)
    store.update_job(jid, None, state="RUNNING")
    reply = svc.update(ME, [str(jid)], {"exclude": known})
    assert reply["errors"] == [{"id": str(jid), "message": "Job is no longer pending execution"}]


@pytest.mark.parametrize("key, value, message", [("reservation", "foo", "Requested reservation is invalid"),
                                                 ("licenses", "foo:1", "Invalid license specification")])
def test_reservations_and_licenses_are_refused_as_slurm(cluster, tmp_path, key, value, message):
    # Slurm 22.05 (peer): `sbatch --reservation=foo` -> "Batch job submission failed: Requested
    # reservation is invalid"; `-L foo:1` -> "... Invalid license specification" (exit 1);
    # batchd has neither, so every name is unknown (it accepted and ignored them)
    svc, _ctl, store = cluster
    with pytest.raises(SubmitError, match=f"^{message}$"):
        submit(svc, tmp_path, **{key: value})
    assert store.list_jobs() == []


@pytest.mark.parametrize("sig", [9, 10, 11])
def test_a_batch_shell_ended_by_a_signal_is_a_cancelled_step(cluster, tmp_path, sig):
    # Slurm 22.05 (peer, 2026-12-04): `sbatch --wrap 'kill -KILL $$'` (and -USR1, -SEGV) ->
    # sacct: N FAILED 0:SIG, N.batch CANCELLED 0:SIG (batchd had FAILED for SIGKILL)
    svc, ctl, store = cluster
    jid = _running(svc, ctl, tmp_path)
    job = store.get_job(jid)
    assert job is not None
    end_run(store, job, "FAILED", 0, sig, job.start_time or time.time(), time.time(), None, job.restarts)
    rows = {r["job_id"]: r for r in svc.accounting(ME, {"ids": str(jid)})["records"]}
    assert (rows[str(jid)]["state"], rows[str(jid)]["exit_code"]) == ("FAILED", f"0:{sig}")
    assert (rows[f"{jid}.batch"]["state"], rows[f"{jid}.batch"]["exit_code"]) == ("CANCELLED", f"0:{sig}")


def test_requeue_of_a_no_requeue_job_is_refused_as_slurm(cluster, tmp_path):
    # Slurm 22.05 (peer, 2026-12-04): `sbatch --no-requeue`, then `scontrol requeue N` ->
    # "Requested operation is presently disabled for job N", exit 1, the job still RUNNING
    svc, ctl, store = cluster
    jid = int(svc.submit(ME, spec(tmp_path, requeue=False))["job_id"])
    ctl.cycle()
    assert view(svc, jid)["state"] == "RUNNING"
    reply = svc.requeue(ME, [str(jid)])
    assert reply == {"done": [], "errors": [{"id": str(jid), "message": "Requested operation is presently disabled"}]}
    job = store.get_job(jid)
    assert job is not None and job.state == "RUNNING" and job.action is None


def test_requeuehold_keeps_the_job_held_until_released(cluster, tmp_path):
    svc, ctl, store = cluster
    jid = _running(svc, ctl, tmp_path)
    assert svc.requeue(ME, [str(jid)], hold=True)["done"] == [str(jid)]
    job = store.get_job(jid)
    assert job is not None and job.action == "requeue"
    end_run(store, job, "REQUEUED", 0, 15, job.start_time or time.time(), time.time(), None, job.restarts)
    ctl.cycle()
    v = view(svc, jid)
    assert (v["state"], v["reason"], v["restarts"]) == ("PENDING", REQUEUE_HELD, 1)
    assert svc.hold(ME, [str(jid)], release=True)["done"] == [str(jid)]
    ctl.cycle()
    v = view(svc, jid)
    assert (v["state"], v["reason"]) == ("PENDING", "BeginTime")
    assert v["eligible_time"] == pytest.approx(v["begin_time"])


def test_plain_requeue_waits_out_its_begin_time(cluster, tmp_path):
    svc, ctl, store = cluster
    jid = _running(svc, ctl, tmp_path)
    svc.requeue(ME, [str(jid)])
    job = store.get_job(jid)
    end_run(store, job, "REQUEUED", 0, 15, job.start_time or time.time(), time.time(), None, job.restarts)
    ctl.cycle()
    assert view(svc, jid)["reason"] == "BeginTime"
    # scontrol update StartTime=now: eligible now, started by the next cycle
    now = time.time()
    assert svc.update(ME, [str(jid)], {"begin_time": now})["done"] == [str(jid)]
    assert view(svc, jid)["eligible_time"] == pytest.approx(now)
    ctl.cycle()
    assert view(svc, jid)["state"] == "RUNNING"


def test_update_begin_time_of_a_running_job_is_refused(cluster, tmp_path):
    svc, ctl, _store = cluster
    jid = _running(svc, ctl, tmp_path)
    res = svc.update(ME, [str(jid)], {"begin_time": time.time() + 60})
    assert res["done"] == [] and res["errors"][0]["message"] == "Job is no longer pending execution"


def test_admin_hold_of_anothers_job_is_an_admin_hold_but_uhold_a_user_hold(cluster, tmp_path):
    svc, _ctl, store = cluster
    root = Caller(uid=0, gid=0)
    jid = submit(svc, tmp_path)
    store.update_job(jid, None, uid=OTHER_UID)
    svc.hold(root, [str(jid)])
    assert view(svc, jid)["reason"] == "JobHeldAdmin"
    svc.hold(root, [str(jid)], release=True)
    svc.hold(root, [str(jid)], user=True)
    assert view(svc, jid)["reason"] == "JobHeldUser"


# ---------------------------------------------------------------------- views
def _job(tmp_path: Path, state: str = "PENDING", **spec_kw: object) -> Job:
    sp = spec(tmp_path, **spec_kw)
    return Job(id=25, name="patt", user="alice", uid=1000, gid=1000, account="training", partition="gpu",
               qos="normal", state=state, submit_time=0.0, spec=sp, request={"per_task": {"cpu": 1}})


@pytest.mark.parametrize("kw,want", [
    ({"gres": [{"name": "gpu", "type": "h200", "count": 2}]}, {"tres_per_node": "gres:gpu:h200:2"}),
    ({"gres": [{"name": "gpu", "type": None, "count": 1}, {"name": "shard", "type": None, "count": 4}]},
     {"tres_per_node": "gres:gpu:1,gres:shard:4"}),
    ({"gpus_per_node": {"type": None, "count": 3}}, {"tres_per_node": "gres:gpu:3", "tres_per_job": None}),
    ({"gpus": {"type": "h200", "count": 2}}, {"tres_per_job": "gres:gpu:h200:2", "tres_per_node": None}),
    ({"gpus_per_task": {"type": None, "count": 1}}, {"tres_per_task": "gres:gpu:1"}),
    ({"gpus": {"type": None, "count": 1}, "mem_per_gpu_mb": 8192},
     {"mem_per_tres": "gres:gpu:8192", "mem_per_node_mb": 0, "mem_per_cpu_mb": None}),
    ({"mem_mb": 2048}, {"mem_per_node_mb": 2048, "mem_per_cpu_mb": None}),
    ({"mem_per_cpu_mb": 1500}, {"mem_per_cpu_mb": 1500, "mem_per_node_mb": None}),
    ({}, {"mem_per_cpu_mb": 1024, "tres_per_node": None, "tres_per_job": None}),
], ids=["gres-typed", "gres-list", "gpus-per-node", "gpus", "gpus-per-task", "mem-per-gpu", "mem", "mem-per-cpu",
        "defaults"])
def test_request_keys(tmp_path, kw, want):
    cfg = load_config(str(CONFIG), dev=True)
    got = request_keys(_job(tmp_path, **kw), cfg)
    assert {k: got[k] for k in want} == want


def test_cpu_keys_follow_the_resolved_request(tmp_path):
    cfg = load_config(str(CONFIG), dev=True)
    j = _job(tmp_path, ntasks_per_node=2)
    j.request = {"per_task": {"cpu": 4}}
    got = request_keys(j, cfg)
    assert (got["cpus_per_task"], got["min_cpus"]) == (4, 8)


def test_std_paths_are_slurms_own_expansion(tmp_path):
    j = _job(tmp_path, output="o-%x-%j-%u-%N.out", error="/abs/e-%x-%j.err", input="in-%j")
    got = std_paths(j)
    assert got == {"stdout": f"{tmp_path}/o-patt-25-alice-%N.out", "stderr": "/abs/e-patt-25.err",
                   "stdin": f"{tmp_path}/in-25"}
    plain = std_paths(_job(tmp_path))
    assert plain == {"stdout": f"{tmp_path}/slurm-25.out", "stderr": f"{tmp_path}/slurm-25.out",
                     "stdin": "/dev/null"}


def test_std_paths_of_an_array_pending_record_and_a_started_task(tmp_path):
    j = _job(tmp_path, output="list-%A_%a-%j.out")
    j.id, j.array_job_id, j.array_task_id = 26, 24, 3
    assert std_paths(j)["stdout"] == f"{tmp_path}/list-24_4294967294-24.out"
    j.state = "RUNNING"
    assert std_paths(j)["stdout"] == f"{tmp_path}/list-24_3-26.out"
    j.spec.pop("output")
    assert std_paths(j)["stdout"] == f"{tmp_path}/slurm-24_3.out"


def test_pending_begin_time_shows_as_eligible_time(tmp_path):
    cfg = load_config(str(CONFIG), dev=True)
    j = _job(tmp_path)
    j.eligible_time, j.begin_time = 100.0, 5000.0
    assert job_view(j, cfg, now=200.0)["eligible_time"] == 5000.0
    j.state = "RUNNING"
    assert job_view(j, cfg, now=200.0)["eligible_time"] == 100.0


# ---------------------------------------------------------------------- supervisor
def _launch(tmp_path: Path, script: str, **kw: object) -> tuple[launcher.LaunchRequest, str]:
    spool = str(tmp_path / "spool")
    pw = pwd.getpwuid(os.getuid())
    out = str(tmp_path / "slurm-7.out")
    req = launcher.LaunchRequest(
        job_id=7, run=0, user=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid, groups=None, home=pw.pw_dir,
        workdir=str(tmp_path), script=script, argv=[], env={"PATH": "/usr/bin:/bin"}, stdout=out, stderr=out,
        kill_wait_s=1, node="vm", **kw)  # type: ignore[arg-type]
    launcher.launch(req, spool)
    return req, spool


def _wait(spool: str, req: launcher.LaunchRequest, timeout_s: float = 30) -> launcher.RunStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        st = launcher.poll(spool, req.job_id, req.run)
        if st.state != "RUNNING":
            return st
        assert time.monotonic() < deadline, "job still running"
        time.sleep(0.05)


TRAP_SCRIPT = "#!/bin/bash\ntrap 'echo got USR1' USR1\nfor i in $(seq 1 30); do sleep 0.5; done\necho never\n"


def test_signal_b_reaches_only_the_batch_shell_then_time_limit_line(tmp_path):
    req, spool = _launch(tmp_path, TRAP_SCRIPT, time_limit_s=3, signal=(int(signal.SIGUSR1), 2),
                         signal_batch_only=True)
    st = _wait(spool, req)
    lines = Path(req.stdout).read_text().splitlines()
    assert st.final_state == "TIMEOUT"
    # a child (sleep) killed by USR1 would make bash print "User defined signal 1"
    assert lines[0] == "got USR1" and not any("User defined signal" in ln for ln in lines)
    assert lines[-1].startswith("slurmstepd-vm: error: *** JOB 7 ON vm CANCELLED AT ")
    assert lines[-1].endswith(" DUE TO TIME LIMIT ***")


@pytest.mark.parametrize("cause,tail", [
    ("cancel", " ***"), ("requeue", " DUE TO JOB REQUEUE ***"), ("preempt", " DUE TO PREEMPTION ***")])
def test_terminate_writes_slurmstepds_line(tmp_path, cause, tail):
    req, spool = _launch(tmp_path, "#!/bin/sh\necho start\nsleep 30\n")
    time.sleep(0.3)
    reason = "cancel" if cause == "cancel" else "preempt"
    launcher.terminate(spool, req.job_id, req.run, reason, grace_s=1, cause=cause)
    _wait(spool, req)
    last = Path(req.stdout).read_text().splitlines()[-1]
    assert last.startswith("slurmstepd-vm: error: *** JOB 7 ON vm CANCELLED AT ") and last.endswith(tail)
    assert "DUE TO" not in last[: -len(tail)]


def test_node_failure_writes_no_line(tmp_path):
    req, spool = _launch(tmp_path, "#!/bin/sh\necho start\nsleep 30\n")
    time.sleep(0.3)
    launcher.terminate(spool, req.job_id, req.run, "node_fail", grace_s=0)
    _wait(spool, req)
    assert Path(req.stdout).read_text().splitlines() == ["start"]


# ---------------------------------------------------------------------- sacct rows, purge, reasons
def test_sacct_rows_of_a_preempted_requeued_run_and_a_running_job(cluster, tmp_path):
    svc, ctl, store = cluster
    jid = _running(svc, ctl, tmp_path)
    rows = svc.accounting(ME, {"ids": str(jid), "duplicates": "1"})["records"]
    assert [(r["job_id"], r["state"]) for r in rows] == [(str(jid), "RUNNING"), (f"{jid}.batch", "RUNNING")]
    job = store.get_job(jid)
    end_run(store, job, "PREEMPTED", 0, 15, job.start_time, time.time(), None, job.restarts)
    rows = svc.accounting(ME, {"ids": str(jid), "duplicates": "1"})["records"]
    got = [(r["job_id"], r["state"], r["exit_code"]) for r in rows]
    assert got == [(str(jid), "PREEMPTED", "0:0"), (f"{jid}.batch", "CANCELLED", "0:15"), (str(jid), "PENDING", "0:0")]
    assert rows[1]["submit"] == rows[1]["start"] == rows[0]["start"]  # a step is submitted as it starts


def test_jobs_purged_after_min_job_age_leave_squeue_and_scancel_but_not_sacct(cluster, tmp_path):
    svc, _ctl, store = cluster
    old, recent = submit(svc, tmp_path), submit(svc, tmp_path)
    store.update_job(old, None, state="COMPLETED", end_time=time.time() - 301)
    store.update_job(recent, None, state="COMPLETED", end_time=time.time() - 10)
    assert [j["id"] for j in svc.list_jobs({"ids": f"{old},{recent}", "all": "1"})["jobs"]] == [recent]
    assert [j["id"] for j in svc.list_jobs({"all": "1"})["jobs"]] == [recent]
    assert svc.signal_jobs(ME, {"ids": [str(old)]})["errors"] == [{"id": str(old), "message": "Invalid job id specified"}]
    assert svc.signal_jobs(ME, {"ids": [str(recent)]})["errors"][0]["message"] == \
        "Job/step already completing or completed"
    assert {r["job_id"] for r in svc.accounting(ME, {"ids": str(old)})["records"]} == {str(old)}


def test_output_open_failure_reads_joblaunchfailure_in_scontrol_only(tmp_path):
    cfg = load_config(str(CONFIG), dev=True)
    j = _job(tmp_path, state="FAILED")
    j.exit_signal = 53
    assert job_view(j, cfg)["reason"] == "JobLaunchFailure"
    j.exit_signal, j.exit_code = 0, 1
    assert job_view(j, cfg)["reason"] == "None"
