"""Time limits against partition limits, and `scontrol update TimeLimit=`, as Slurm 22.05
does them (issue 15.1), in the service and the controller without a socket.

Recorded from the peer (../shared/slurm-peer: partitions `gpu`, default, MaxTime=UNLIMITED,
no DefaultTime; `debug`, DefaultTime=00:10:00, MaxTime=01:00:00; EnforcePartLimits unset,
i.e. NO), 2026-12-04, as root unless marked "user" (a throwaway non-admin user):

submission (`sbatch [-H] OPTS --wrap true`; rc 0, "Submitted batch job N" for every one)::

    OPTS                      scontrol TimeLimit   squeue %l    sacct TimelimitRaw / Timelimit   reason (released)
    -p debug -t 2:00:00       02:00:00             2:00:00      120 / 02:00:00                    PartitionTimeLimit
    -p debug                  00:10:00             10:00        10 / 00:10:00
    (gpu, no -t)              UNLIMITED            UNLIMITED    Partition_Limit (pending),
                                                                UNLIMITED once running
    -p debug -t 0             UNLIMITED            UNLIMITED    UNLIMITED / UNLIMITED             PartitionTimeLimit
    -t 0 / -t UNLIMITED / -t -1   UNLIMITED        UNLIMITED    UNLIMITED / UNLIMITED
    -p debug -t UNLIMITED     UNLIMITED            UNLIMITED    UNLIMITED / UNLIMITED             PartitionTimeLimit
    -p debug -t 45            00:45:00             45:00        45 / 00:45:00
    -t 8-00:00:00             8-00:00:00           8-00:00:00   11520 / 8-00:00:00
    -t -5                     2982611-04:17:00     (Slurm's unsigned wrap; batchd's slurmtime keeps it)
    -t abc                    rc 255, "sbatch: error: Invalid --time specification"

A partition with MaxTime=30 and no DefaultTime (created for a minute with `scontrol create
PartitionName=tlmax Nodes=vm MaxTime=30`, then deleted): no -t -> scontrol 00:30:00, squeue
30:00, sacct Partition_Limit while pending, 30 / 00:30:00 once it ran; -t 45 -> 45:00 and,
released, PartitionTimeLimit.

update (`scontrol update JobId=N TimeLimit=V`; success: rc 0, no output)::

    pending debug job -t 2:00:00 (PartitionTimeLimit), V=30     -> rc 0; the job starts, TimeLimit 00:30:00
    root, pending tlmax job -t 45 (PartitionTimeLimit), V=40    -> rc 0; the job starts with 00:40:00 > MaxTime
                                                                   (an operator's limit: ADMIN_SET_LIMIT)
    root, running job -t 10, V=1                                -> rc 0; TIMEOUT at 00:01:14 (Slurm checks
                                                                   limits every ~30 s)
    user, pending gpu job -t 10: V=5, 20, UNLIMITED, 0, +3      -> rc 0 each (raising a pending job is allowed
                                                                   up to the partition's MaxTime)
    user, pending debug job -t 10: V=50, 1:00:00                -> rc 0
    user, pending debug job: V=1:00:01, 2:00:00, UNLIMITED      -> rc 1, stderr "Access/permission denied for job N"
    user, pending debug job -t 2:00:00: V=3:00:00               -> rc 1, same; V=1:30:00 -> rc 0 (lower)
    user, running gpu job -t 10: V=5                            -> rc 0
    user, running job: V=20, +1, UNLIMITED, 5 (above its 4)     -> rc 1, "Access/permission denied for job N"
    user, running job: V=-1                                     -> rc 0, one minute less (+N/-N are relative)
    user, V=0 on a running job                                  -> rc 0, TimeLimit=00:00:00, TIMEOUT within ~16 s
    user or root, V=abc                                         -> rc 1, "scontrol: error: Invalid TimeLimit value"
    user, a root job                                            -> rc 1, "Invalid user id for job N"
    user, JobId=999999                                          -> rc 1, "Invalid job id specified for job 999999"
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from batchd.control.controller import Controller
from batchd.model import Job
from batchd.server.service import Caller, Service
from batchd.store import Store
from tests.refstore import reference_store

ROOT = Caller(uid=os.getuid(), gid=os.getgid())  # an administrator (dev mode: the daemon's user)
USER = Caller(uid=54321, gid=54321)  # owns the jobs it changes, no administrator
HOUR = 3600


@pytest.fixture
def cluster(tmp_path: Path):
    cfg, store = reference_store(tmp_path / "batchd.db", dev=True)
    yield Service(cfg, store), Controller(cfg, store), store
    store.close()


def submit(svc: Service, tmp_path: Path, **kw: object) -> int:
    spec = {"name": "job", "script": "#!/bin/sh\ntrue\n", "workdir": str(tmp_path), "submit_dir": str(tmp_path),
            "environment": {}, "export": "ALL", "argv": [], "account": "default", **kw}
    return int(svc.submit(ROOT, spec)["job_id"])


def view(svc: Service, jid: int) -> dict:
    return svc.list_jobs({"ids": str(jid)})["jobs"][0]


# ---------------------------------------------------------------------- submission
@pytest.mark.parametrize("opts, want", [
    ({"partition": "debug"}, 600),                      # DefaultTime
    ({}, -1),                                           # gpu: no DefaultTime, MaxTime UNLIMITED
    ({"partition": "debug", "time_limit_s": 45 * 60}, 45 * 60),
    ({"time_limit_s": 8 * 86400}, 8 * 86400),
    ({"time_limit_s": -1}, -1),                         # -t 0, -t -1, -t UNLIMITED (sbatch sends -1)
], ids=["debug-default", "gpu-unlimited", "debug-45", "gpu-8-days", "unlimited"])
def test_limit_at_submit(cluster, tmp_path, opts, want):
    svc, _ctl, _store = cluster
    assert view(svc, submit(svc, tmp_path, hold=True, **opts))["time_limit_s"] == want


@pytest.mark.parametrize("limit_s", [2 * HOUR, -1], ids=["2h", "unlimited"])
def test_over_max_time_pends_then_runs_once_lowered(cluster, tmp_path, limit_s):
    svc, ctl, _store = cluster
    jid = submit(svc, tmp_path, partition="debug", time_limit_s=limit_s)
    ctl.cycle()
    v = view(svc, jid)
    assert (v["state"], v["reason"], v["time_limit_s"]) == ("PENDING", "PartitionTimeLimit", limit_s)
    ctl.cycle()
    assert view(svc, jid)["reason"] == "PartitionTimeLimit"  # stays, cycle after cycle
    assert svc.update(ROOT, [str(jid)], {"time_limit_s": 30 * 60})["errors"] == []
    ctl.cycle()
    assert (view(svc, jid)["state"], view(svc, jid)["time_limit_s"]) == ("RUNNING", 30 * 60)


def test_held_job_over_max_time_shows_its_hold_first(cluster, tmp_path):
    svc, ctl, _store = cluster
    jid = submit(svc, tmp_path, partition="debug", time_limit_s=2 * HOUR, hold=True)
    ctl.cycle()
    assert view(svc, jid)["reason"] == "JobHeldUser"
    svc.hold(ROOT, [str(jid)], release=True)
    ctl.cycle()
    assert view(svc, jid)["reason"] == "PartitionTimeLimit"


def test_an_administrator_limit_may_exceed_max_time(cluster, tmp_path):
    """Slurm's ADMIN_SET_LIMIT: root raised a pending job's limit above MaxTime and it ran."""
    svc, ctl, _store = cluster
    jid = submit(svc, tmp_path, partition="debug", time_limit_s=30 * 60, hold=True)
    assert svc.update(ROOT, [str(jid)], {"time_limit_s": 2 * HOUR})["errors"] == []
    svc.hold(ROOT, [str(jid)], release=True)
    ctl.cycle()
    assert (view(svc, jid)["state"], view(svc, jid)["time_limit_s"]) == ("RUNNING", 2 * HOUR)


# ---------------------------------------------------------------------- update permissions
def _user_job(store: Store, jid: int, state: str, partition: str, limit_s: int) -> None:
    now = time.time()
    store.insert_jobs([Job(id=jid, name="j", user="u54321", uid=USER.uid, gid=USER.gid, account="default",
                           partition=partition, qos="normal", state=state, submit_time=now, spec={},
                           request={"tasks": 1, "per_task": {"cpu": 1}}, time_limit_s=limit_s,
                           start_time=now if state == "RUNNING" else None)])


DENIED = "Access/permission denied"


@pytest.mark.parametrize("state, partition, old, new, error", [
    ("PENDING", "gpu", 10 * 60, 5 * 60, None),
    ("PENDING", "gpu", 10 * 60, 20 * 60, None),           # raising a pending job: up to MaxTime (UNLIMITED)
    ("PENDING", "gpu", 10 * 60, -1, None),
    ("PENDING", "debug", 10 * 60, 50 * 60, None),
    ("PENDING", "debug", 10 * 60, HOUR, None),
    ("PENDING", "debug", 10 * 60, HOUR + 60, DENIED),     # above debug's MaxTime
    ("PENDING", "debug", 10 * 60, -1, DENIED),
    ("PENDING", "debug", 2 * HOUR, 3 * HOUR, DENIED),
    ("PENDING", "debug", 2 * HOUR, 90 * 60, None),        # lower, still above MaxTime
    ("RUNNING", "gpu", 10 * 60, 5 * 60, None),
    ("RUNNING", "gpu", 10 * 60, 10 * 60, None),           # the same limit
    ("RUNNING", "gpu", 4 * 60, 5 * 60, DENIED),           # a running job: only lower
    ("RUNNING", "gpu", 10 * 60, -1, DENIED),
    ("RUNNING", "gpu", -1, 60, None),
], ids=lambda x: None)
def test_user_may_lower_a_limit_and_raise_a_pending_one_up_to_max_time(cluster, state, partition, old, new, error):
    svc, _ctl, store = cluster
    _user_job(store, 7, state, partition, old)
    reply = svc.update(USER, ["7"], {"time_limit_s": new})
    assert reply["errors"] == ([] if error is None else [{"id": "7", "message": error}])
    assert store.get_job(7).time_limit_s == (new if error is None else old)
    assert not store.get_job(7).request.get("time_limit_admin")  # a user's limit is no operator's


def test_administrator_may_raise_a_running_job(cluster):
    svc, _ctl, store = cluster
    _user_job(store, 7, "RUNNING", "debug", 10 * 60)
    assert svc.update(ROOT, ["7"], {"time_limit_s": 2 * HOUR})["errors"] == []
    j = store.get_job(7)
    assert (j.time_limit_s, j.request.get("time_limit_admin")) == (2 * HOUR, True)


# ---------------------------------------------------------------------- no -t, no DefaultTime
def _acct(svc: Service, jid: int) -> dict:
    (row,) = [r for r in svc.accounting(ROOT, {"ids": str(jid)})["records"] if r["job_id"] == str(jid)]
    return row


@pytest.mark.parametrize("partition, max_time_s, shown, raw, text", [
    ("gpu", -1, -1, "UNLIMITED", "UNLIMITED"),
    ("tlmax", 30 * 60, 30 * 60, "30", "00:30:00"),
], ids=["gpu-unlimited", "max-time-only"])
def test_no_limit_until_start_then_the_partitions_max_time(cluster, tmp_path, partition, max_time_s, shown, raw,
                                                           text):
    """Slurm keeps NO_VAL until the job starts: scontrol and squeue show the partition's
    MaxTime, sacct Partition_Limit; at start the job gets MaxTime (recorded: gpu, and a
    partition tlmax with MaxTime=30 and no DefaultTime)."""
    from batchd.cli.sacct_fields import field_value
    from batchd.config import PartitionConfig

    svc, ctl, store = cluster
    svc.cfg.partitions.append(PartitionConfig(name="tlmax", nodes=["vm"], max_time_s=30 * 60))
    jid = submit(svc, tmp_path, partition=partition, hold=True)
    assert store.get_job(jid).time_limit_s is None
    assert view(svc, jid)["time_limit_s"] == shown
    row = _acct(svc, jid)
    assert (field_value(row, "TimelimitRaw"), field_value(row, "Timelimit")) == ("Partition_Limit",) * 2
    svc.hold(ROOT, [str(jid)], release=True)
    ctl.cycle()
    assert (store.get_job(jid).state, store.get_job(jid).time_limit_s) == ("RUNNING", shown)
    row = _acct(svc, jid)
    assert (field_value(row, "TimelimitRaw"), field_value(row, "Timelimit")) == (raw, text)


def test_a_job_without_limit_is_not_over_max_time(cluster, tmp_path):
    """NO_VAL is no limit above MaxTime: the job runs (its limit becomes MaxTime)."""
    from batchd.config import PartitionConfig

    svc, ctl, store = cluster
    svc.cfg.partitions.append(PartitionConfig(name="tlmax", nodes=["vm"], max_time_s=30 * 60))
    jid = submit(svc, tmp_path, partition="tlmax")
    ctl.cycle()
    assert view(svc, jid)["state"] == "RUNNING"


def test_requeue_gives_a_partition_limit_back(cluster, tmp_path):
    """slurm-reference 30_requeue: a gpu job without -t, requeued, shows Partition_Limit in
    sacct again while it pends; a limit of its own stays."""
    from batchd.node.runs import end_run

    svc, ctl, store = cluster
    plain, own = submit(svc, tmp_path), submit(svc, tmp_path, time_limit_s=600)
    ctl.cycle()
    for jid, limit in ((plain, -1), (own, 600)):
        j = store.get_job(jid)
        assert (j.state, j.time_limit_s) == ("RUNNING", limit)
        end_run(store, j, "REQUEUED", 0, 0, j.start_time, time.time(), None, 0)
    assert (store.get_job(plain).state, store.get_job(plain).time_limit_s) == ("PENDING", None)
    assert view(svc, plain)["time_limit_s"] == -1  # scontrol: UNLIMITED, as recorded
    assert store.get_job(own).time_limit_s == 600


@pytest.mark.parametrize("bad", [0, -5, "60", 1.5, None])
def test_service_refuses_a_zero_or_negative_limit_from_a_direct_caller(cluster, bad):
    from batchd.errors import InvalidRequest

    svc, _ctl, store = cluster
    _user_job(store, 7, "RUNNING", "gpu", 600)
    with pytest.raises(InvalidRequest, match="time_limit_s"):
        svc.update(ROOT, ["7"], {"time_limit_s": bad})
    assert store.get_job(7).time_limit_s == 600


def test_sacct_columns_as_recorded():
    """`sacct -j 12,13,... -X -o JobID,Partition,State,TimelimitRaw,Timelimit` on the peer: a
    long header is cut to its width (TimelimitR), a long value ends in '+'."""
    from batchd.cli.sacct import parse_fields, render_table

    rows = [{"job_id": "12", "partition": "debug", "state": "PENDING", "time_limit_s": 600},
            {"job_id": "13", "partition": "gpu", "state": "PENDING", "time_limit_s": None},
            {"job_id": "14", "partition": "debug", "state": "PENDING", "time_limit_s": -1},
            {"job_id": "19", "partition": "gpu", "state": "PENDING", "time_limit_s": 8 * 86400},
            {"job_id": "21", "partition": "gpu", "state": "COMPLETED", "time_limit_s": 4294960097 * 60}]
    fields = parse_fields("JobID,Partition,State,TimelimitRaw,Timelimit")
    assert render_table(rows, fields) == [
        "JobID         Partition      State TimelimitR  Timelimit ",
        "------------ ---------- ---------- ---------- ---------- ",
        "12                debug    PENDING         10   00:10:00 ",
        "13                  gpu    PENDING Partition+ Partition+ ",
        "14                debug    PENDING  UNLIMITED  UNLIMITED ",
        "19                  gpu    PENDING      11520 8-00:00:00 ",
        "21                  gpu  COMPLETED 4294960097 2982611-0+ "]


def test_an_updated_limit_is_the_jobs_own_through_a_requeue(cluster, tmp_path):
    from batchd.node.runs import end_run

    svc, ctl, store = cluster
    jid = submit(svc, tmp_path)
    assert store.get_job(jid).request.get("time_limit_partition") is True
    assert svc.update(ROOT, [str(jid)], {"time_limit_s": 1200})["errors"] == []
    ctl.cycle()
    j = store.get_job(jid)
    end_run(store, j, "REQUEUED", 0, 0, j.start_time, time.time(), None, 0)
    assert (store.get_job(jid).state, store.get_job(jid).time_limit_s) == ("PENDING", 1200)
