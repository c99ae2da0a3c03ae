"""EASY backfill: reservations from time limits, planned start times, lower jobs that fit
before the reservation start."""

from .sched_builders import NOW, account, job, node, run, snapshot


def scene(**policy):
    jobs = [job("r1", "a", gpus=2, running_on={"n0": [0, 1]}, time_limit_s=1000, start_time=NOW - 100),
            job("big", "a", gpus=4, time_limit_s=3600),
            job("short", "a", gpus=2, time_limit_s=600),
            job("long", "a", gpus=2, time_limit_s=3600)]
    return snapshot([node("n0", 4)], [account("a", quota=-1)], jobs, policy={"backfill": True, **policy})


def test_short_job_backfills_long_job_waits():
    out = run(scene())
    assert out.started == {"short"}
    assert out.reasons == {"big": "Resources", "long": "Priority"}
    # big starts when r1 ends; long after big (its 3600 s limit)
    assert out.decisions["planned_start"] == {"big": NOW + 900, "long": NOW + 4500}


def test_without_backfill_any_fitting_job_starts():
    out = run(scene(backfill=False))
    assert out.started == {"short"}  # first fitting job in order takes the 2 free GPUs
    out = run(scene(), passes=["allocate"])
    assert out.decisions["planned_start"] == {}


def test_job_without_time_limit_never_backfills():
    snap = scene()
    snap["jobs"][2]["time_limit_s"] = None
    out = run(snap)
    assert out.started == set()
    assert out.reasons["short"] == "Priority"


def test_no_reservation_when_running_jobs_have_no_limit():
    snap = scene()
    snap["jobs"][0]["time_limit_s"] = None
    out = run(snap)
    assert out.started == {"short"}
    # big can never be planned (r1 never ends); long can, once short has ended
    assert out.decisions["planned_start"] == {"long": NOW + 600}


def test_later_reservation_accounts_for_earlier_one():
    jobs = [job("r1", "a", gpus=2, running_on={"n0": [0, 1]}, time_limit_s=1000, start_time=NOW - 100),
            job("r2", "a", gpus=2, running_on={"n0": [2, 3]}, time_limit_s=2000, start_time=NOW - 100),
            job("big1", "a", gpus=4, time_limit_s=600),
            job("big2", "a", gpus=4, time_limit_s=600)]
    out = run(snapshot([node("n0", 4)], [account("a", quota=-1)], jobs, policy={"backfill": True}))
    assert out.decisions["planned_start"] == {"big1": NOW + 1900, "big2": NOW + 2500}
