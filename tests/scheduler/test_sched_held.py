"""Preemption holds what it frees (issue 14, point 3): the victims being evicted for a pending
job X (`preempting_for: X`) and the devices they freed once ended are X's until X starts; no
other job takes them and no second victim is chosen for X. Once X starts, is cancelled or
can no longer use them, the normal rules apply again.

Cases are `Scenario`s (tests/scheduler/scenario.py: what each `want_*` compares), one whole
cycle: `want_started`, `want_after` (for every job started), `want_victims_for`."""

import pytest

from batchd.scheduler import load_snapshot

from .scenario import Scenario, ids
from .sched_builders import NOW, account, job, node, run, snapshot


def _later(**kw):
    return {"start_time": NOW - 50, **kw}


CASES = [
    Scenario(id="victim_still_ending_no_second_victim",
             # V is being preempted for X; without the mark R (newer, same priority) is picked too
             nodes=[node("n0", 2)], accounts=[account("q", quota=10)],
             jobs=[job("V", "q", prio=50, running_on={"n0": [0]}, preempting_for="X"),
                   job("R", "q", prio=50, running_on={"n0": [1]}, **_later()),
                   job("X", "q", prio=125, preemptor=True)],
             want_started={"X"}, want_after={"X": ["V"]}, want_victims_for={}),
    Scenario(id="freed_card_not_taken_by_a_higher_job",
             # V ended: n0:0 is idle; Y ranks before X but the card is X's
             nodes=[node("n0", 2)], accounts=[account("q", quota=10)],
             jobs=[job("R", "q", prio=130, preemptible=False, running_on={"n0": [1]}),
                   job("X", "q", prio=125, preemptor=True), job("Y", "q", prio=150)],
             want_started={"X"}, want_after={"X": []}, want_victims_for={}),
    Scenario(id="freed_card_kept_and_no_victim_for_x",
             # without the reservation Y takes n0:0 and X preempts R: two victims for X
             nodes=[node("n0", 2)], accounts=[account("q", quota=10)],
             jobs=[job("R", "q", prio=50, running_on={"n0": [1]}),
                   job("X", "q", prio=125, preemptor=True), job("Y", "q", prio=150)],
             want_started={"X", "Y"}, want_after={"X": [], "Y": ["R"]}, want_victims_for={"R": "Y"}),
    Scenario(id="one_victim_ended_one_still_ending",
             # X needs 2: V1 ended (n0:0 idle), V2 still ending on n0:1; Y may not take n0:0
             nodes=[node("n0", 3)], accounts=[account("q", quota=10)],
             jobs=[job("V2", "q", prio=50, running_on={"n0": [1]}, preempting_for="X"),
                   job("R", "q", prio=130, preemptible=False, running_on={"n0": [2]}),
                   job("X", "q", prio=125, gpus=2, preemptor=True), job("Y", "q", prio=150)],
             want_started={"X"}, want_after={"X": ["V2"]}, want_victims_for={}),
    Scenario(id="victim_card_kept_idle_pair_for_a_bigger_job",
             # X waits on V's card (placed as on any card: pack) and leaves n1's idle pair to Y
             nodes=[node("n0", 2), node("n1", 2)], accounts=[account("q", quota=10)],
             jobs=[job("V", "q", prio=50, running_on={"n0": [0]}, preempting_for="X"),
                   job("R", "q", prio=150, running_on={"n0": [1]}),
                   job("X", "q", prio=125, preemptor=True), job("Y", "q", prio=150, gpus=2)],
             want_started={"X", "Y"}, want_after={"X": ["V"], "Y": []}, want_victims_for={}),
    Scenario(id="preemptor_started_normal_rules",
             # X runs: V's mark reserves nothing; Y may choose V as its own victim
             nodes=[node("n0", 2)], accounts=[account("q", quota=10)],
             jobs=[job("V", "q", prio=50, running_on={"n0": [0]}, preempting_for="X"),
                   job("X", "q", prio=125, running_on={"n0": [1]}), job("Y", "q", prio=150)],
             want_started={"Y"}, want_after={"Y": ["V"]}, want_victims_for={"V": "Y"}),
    Scenario(id="preemptor_cancelled_reservation_gone",
             nodes=[node("n0", 1)], accounts=[account("q", quota=10)],
             jobs=[job("V", "q", prio=50, running_on={"n0": [0]}, preempting_for="X"), job("Y", "q", prio=150)],
             want_started={"Y"}, want_after={"Y": ["V"]}, want_victims_for={"V": "Y"}),
    Scenario(id="preemptor_held_reservation_gone",
             nodes=[node("n0", 2)], accounts=[account("q", quota=10)],
             jobs=[job("V", "q", prio=50, running_on={"n0": [0]}, preempting_for="X"),
                   job("X", "q", prio=125, preemptor=True, eligible=False, reason="JobHeldUser"),
                   job("Y", "q", prio=150)],
             want_started={"Y"}, want_after={"Y": []}, want_victims_for={}),
    Scenario(id="need_no_longer_covered_normal_rules",
             # the freed card's node went down: X gives the reservation up and preempts by the rules
             nodes=[node("n0", 1, state="DOWN"), node("n1", 1)], accounts=[account("q", quota=10)],
             jobs=[job("R", "q", prio=50, running_on={"n1": [0]}), job("X", "q", prio=125, preemptor=True)],
             want_started={"X"}, want_after={"X": ["R"]}, want_victims_for={"R": "X"}),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_held(case):
    case.verify()


def test_freed_card_goes_to_the_preemptor():
    out = run(snapshot([node("n0", 2)], [account("q", quota=10)],
                       [job("R", "q", prio=130, preemptible=False, running_on={"n0": [1]}),
                        job("X", "q", prio=125, preemptor=True), job("Y", "q", prio=150)]))
    assert out.decisions["start"][0]["allocation"]["n0"]["gpus"] == [0]
    assert out.reasons["Y"] in ("Resources", "Priority")


def _daemon_apply(snap: dict, dec: dict) -> None:
    """What the controller does: a victim keeps running, marked for its preemptor; a job to
    start after victims is marked a preemptor; a job started now runs and loses its mark."""
    jobs = {str(j["id"]): j for j in snap["jobs"]}
    for p in dec["preempt"]:
        jobs[str(p["job"])]["preempting_for"] = p["for"]
    for s in dec["start"]:
        j = jobs[str(s["job"])]
        if s["after"]:
            j["preemptor"] = True
            continue
        j.update(state="RUNNING", allocation=s["allocation"], start_time=snap["now"])
        j.pop("preemptor", None)


def test_one_victim_over_the_whole_eviction():
    """Cycle 1 preempts one victim for X; while it ends nothing more is preempted for X; once
    it ended a higher job Y arriving meanwhile does not get its card: X does."""
    snap = snapshot([node("n0", 2)], [account("q", quota=10)],
                    [job("R1", "q", prio=50, running_on={"n0": [0]}),
                     job("R2", "q", prio=50, running_on={"n0": [1]}, **_later()),
                     job("X", "q", prio=125)])
    victims = []
    d1 = run(snap).decisions
    victims += [p["job"] for p in d1["preempt"] if p["for"] == "X"]
    assert len(victims) == 1 and d1["start"][0]["after"] == victims
    _daemon_apply(snap, d1)
    for _ in range(3):  # the victim is trapping its signal: a few cycles pass
        d = run(snap).decisions
        assert d["preempt"] == [] and [(s["job"], s["after"]) for s in d["start"]] == [("X", victims)]
        _daemon_apply(snap, d)
    v = victims[0]
    snap["jobs"] = [j for j in snap["jobs"] if j["id"] != v]  # the victim ended
    snap["jobs"].append(job("Y", "q", prio=150, submit_time=1_000_100))
    d = run(snap).decisions
    x = [s for s in d["start"] if s["job"] == "X"]
    assert [s["after"] for s in x] == [[]]
    assert x[0]["allocation"]["n0"]["gpus"] == [0 if v == "R1" else 1]  # the card its victim freed
    assert [p for p in d["preempt"] if p["for"] == "X"] == []


def test_bad_marks_are_refused():
    for key, val in (("preempting_for", True), ("preempting_for", ""), ("preemptor", "yes")):
        snap = snapshot([node("n0", 1)], [account("q", quota=10)], [job("a", "q", **{key: val})])
        with pytest.raises(ValueError, match=rf"jobs\[0\]\.{key}"):
            load_snapshot(snap)


def test_controller_marks_follow_the_decisions():
    """The controller's side: a job to start after victims is marked; one started or no
    longer waiting loses its mark."""
    from batchd.control.controller import PREEMPTOR, _preemptor_marks

    snap = {"jobs": [{"id": 1, "state": "PENDING"}, {"id": 2, "state": "PENDING", "preemptor": True},
                     {"id": 3, "state": "PENDING", "preemptor": True},
                     {"id": 4, "state": "PENDING", "preemptor": True}]}
    dec = {"start": [{"job": 1, "after": [9]}, {"job": 2, "after": []}, {"job": 4, "after": [8]}]}
    assert _preemptor_marks(snap, dec) == [(1, ("PENDING",), {"action": PREEMPTOR}),
                                           (3, ("PENDING",), {"action": None})]
