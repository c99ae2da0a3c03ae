"""Properties of preemption (issue 16) on random workloads (hypothesis), from the documented
rules rather than the code:

- minimal victim sets (rule 2): no victim of a preemptor J can be spared. Checked on the first
  job J of the cycle that started by preemption, by protecting every other running job with a
  QOS of endless min runtime: with J's victims V open J starts after exactly V (sanity of the
  construction); with V minus any one victim open, J does not start.
- renumbering a node's GPUs (consistently in the running jobs' allocations) changes neither
  which jobs start nor which are preempted, for whom, why and under which policy, nor the
  pending reasons.
- no preemption cycles: applying each cycle's decisions (victims pending again with their
  submit times, started jobs running from `now`) and advancing `now` by 30 s, no job that was
  preempted for J preempts J in the same or the next cycle.

Workloads: 2-3 nodes of 2-4 cards mostly busy, 1-3 accounts (sometimes under a parent with
its own policy) with random quotas, limits, weights and issue-16 policies, running jobs of
QOS priorities 40..125, a few pending jobs. `test_workloads_exercise_preemption` checks on
seeded workloads that the generator does produce preemptions of both kinds, so that the
properties are not vacuous.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchd.scheduler import decide, load_snapshot

from .sched_builders import NOW, account, apply, job, node, snapshot

WITHIN = [None, "never", "lower_priority", "lower_or_newer_equal_priority"]
RECLAIM = [None, None, "never", "lower_priority", "any"]
BORROW = [None, {"policy": "never"}, {"policy": "lower_priority"},
          {"policy": "lower_priority", "max_priority_threshold": 60}, {"policy": "any"}]


class RandPick:
    """Draws from a seeded `random.Random` (for the coverage check)."""

    def __init__(self, rnd: random.Random):
        self.rnd = rnd

    def int(self, lo: int, hi: int) -> int:
        return self.rnd.randint(lo, hi)

    def choice(self, seq):
        return self.rnd.choice(list(seq))


class DrawPick:
    """Draws from hypothesis (shrinkable)."""

    def __init__(self, draw):
        self.draw = draw

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def choice(self, seq):
        return self.draw(st.sampled_from(list(seq)))


def _policy(p, protect: bool) -> dict:
    out = {}
    for key, values in (("within_account", WITHIN), ("reclaim_within_cohort", RECLAIM),
                        ("borrow_within_cohort", BORROW)):
        v = p.choice(values)
        if v is not None:
            out[key] = copy.deepcopy(v)
    if protect:
        for key in ("min_runtime_preempt_s", "min_runtime_reclaim_s"):
            v = p.choice([None, None, 0, 300])
            if v is not None:
                out[key] = v
    return out


def workload(p, protect: bool = True) -> dict:
    """A random snapshot (dict); `protect=False` leaves out every min runtime."""
    nodes = [node(f"n{i}", p.int(2, 4)) for i in range(p.int(2, 3))]
    accts = []
    parent = "default"
    if p.int(0, 2) == 0:
        dept = account("dept", quota=-1, limit=-1, weight=0, parent=None)
        dept["policy"] = _policy(p, protect)
        accts.append(dept)
        parent = "dept"
    limits = {}
    for i in range(p.int(1, 3) if p.int(0, 3) == 0 else 3):
        quota = p.int(0, 4)
        limit = p.choice([-1, -1, 2, 3, 4, 6])
        if limit != -1:
            limit = max(limit, quota)
        a = account(f"a{i}", quota=quota, limit=limit, weight=p.int(0, 2), parent=parent)
        a["policy"] = _policy(p, protect)
        accts.append(a)
        limits[a["name"]] = limit
    leaves = sorted(limits)
    qos = [{"name": "spot", "min_runtime_preempt_s": p.choice([0, 300]) if protect else 0,
            "min_runtime_reclaim_s": p.choice([0, 300]) if protect else 0}]
    used = dict.fromkeys(leaves, 0)
    jobs = []
    k = 0
    for n in nodes:
        free = list(range(n["gpus"][0]["count"]))
        while free:
            if p.int(0, 5) == 0:  # leave the rest of this node idle
                break
            a = p.choice(leaves)
            g = min(p.int(1, 2), len(free))
            if limits[a] != -1 and used[a] + g > limits[a]:
                del free[:g]
                continue
            used[a] += g
            cards, free = free[:g], free[g:]
            extra = {"qos": "spot"} if p.int(0, 2) == 0 else {}
            jobs.append(job(f"r{k}", a, gpus=g, prio=p.choice([40, 50, 60, 75, 125]), running_on={n["name"]: cards},
                            start_time=NOW - p.choice([30, 200, 1000]),
                            submit_time=1_000_000 + 10 * p.int(0, 50) + k, **extra))
            k += 1
    for i in range(p.int(1, 4)):
        jobs.append(job(f"p{i}", p.choice(leaves), gpus=p.int(1, 3), tasks=p.choice([1, 1, 2]),
                        prio=p.choice([50, 60, 75, 90, 125]), submit_time=1_000_000 + 10 * p.int(0, 50) + 500 + i))
    return snapshot(nodes, accts, jobs, qos=qos)


@st.composite
def workloads(draw, protect: bool = True):
    return workload(DrawPick(draw), protect)


def _decide(d: dict, **policy) -> dict:
    return decide(load_snapshot(d), policy or None).to_dict()


# --- minimality ------------------------------------------------------------------------------

PINNED = {"name": "pinned", "min_runtime_preempt_s": 10**9, "min_runtime_reclaim_s": 10**9}


def _first_preemptor(dec: dict):
    """(id of the first job started by preemption, in decision order; its victims) or None."""
    victims: dict[str, set] = {}
    for p in dec["preempt"]:
        victims.setdefault(str(p["for"]), set()).add(p["job"])
    for s in dec["start"]:
        if str(s["job"]) in victims:
            return s["job"], victims[str(s["job"])]
    return None


def pinned(d: dict, free: set) -> dict:
    """`d` with every running job outside `free` in a QOS that protects it for ever: only the
    jobs of `free` may be victims (the accounts' usage, fair shares and demand are unchanged)."""
    snap = copy.deepcopy(d)
    snap["qos"] = [q for q in snap.get("qos", []) if q["name"] != "pinned"] + [dict(PINNED)]
    for j in snap["jobs"]:
        if j["state"] == "RUNNING" and j["id"] not in free:
            j["qos"] = "pinned"
    return snap


def _victims_of(jid, dec: dict) -> set | None:
    """The victims `jid` started after in `dec`, None if it did not start."""
    if jid not in {s["job"] for s in dec["start"]}:
        return None
    return {p["job"] for p in dec["preempt"] if p["for"] == jid}


def check_minimal(d: dict) -> bool:
    """True when the cycle preempted something (and the check ran).

    Taking the first preemptor J: with only J's victims V open to preemption the cycle is the
    same up to J (the jobs before J chose none of them) and J starts; with only V minus one
    victim open, J does not start."""
    found = _first_preemptor(_decide(d))
    if found is None:
        return False
    jid, victims = found
    assert _victims_of(jid, _decide(pinned(d, victims))) == victims, f"{jid} with only {sorted(victims)} open"
    for v in sorted(victims):
        got = _victims_of(jid, _decide(pinned(d, victims - {v})))
        assert got is None, f"victim {v} of {jid} was not needed: {jid} starts after {sorted(got or ())} alone"
    return True


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_no_victim_can_be_spared(d):
    check_minimal(d)


# --- renumbering -----------------------------------------------------------------------------

def _summary(dec: dict) -> tuple:
    return ({s["job"] for s in dec["start"]},
            {(p["job"], p["for"], p["reason"], p.get("policy")) for p in dec["preempt"]},
            {p["job"]: p["reason"] for p in dec["pending"]})


def renumbered(d: dict, seed: int) -> dict:
    rnd = random.Random(seed)
    out = copy.deepcopy(d)
    perm = {}
    for n in out["nodes"]:
        idx = list(range(n["gpus"][0]["count"]))
        rnd.shuffle(idx)
        perm[n["name"]] = idx
    for j in out["jobs"]:
        for nname, a in (j.get("allocation") or {}).items():
            a["gpus"] = sorted(perm[nname][g] for g in a["gpus"])
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.integers(0, 2**32 - 1))
def test_renumbering_gpus_changes_nothing(d, seed):
    assert _summary(_decide(renumbered(d, seed))) == _summary(_decide(d))


# --- no preemption cycles --------------------------------------------------------------------

def check_no_cycles(d: dict, cycles: int = 5) -> None:
    snap = copy.deepcopy(d)
    prev: set = set()
    for _ in range(cycles):
        dec = _decide(snap)
        pairs = {(str(p["job"]), str(p["for"])) for p in dec["preempt"]}
        for victim, for_ in pairs:
            assert (for_, victim) not in pairs, f"{victim} and {for_} preempt each other in one cycle"
        for victim, for_ in prev:
            assert (for_, victim) not in pairs, f"{victim} was preempted for {for_}, then {for_} for {victim}"
        prev = pairs
        if not apply(snap, dec):
            break
        snap["now"] += 30


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(protect=False))
def test_no_preemption_cycles(d):
    check_no_cycles(d)


# --- the generator is not vacuous ------------------------------------------------------------

def test_workloads_exercise_preemption():
    """On 300 seeded workloads: a fair share of cycles preempt, both within an account and
    across accounts, and the minimality check runs on them."""
    reasons: dict[str, int] = {}
    checked = 0
    for seed in range(300):
        d = workload(RandPick(random.Random(seed)))
        for p in _decide(d)["preempt"]:
            reasons[p["reason"]] = reasons.get(p["reason"], 0) + 1
        checked += check_minimal(d)
    assert checked >= 40, checked
    assert reasons.get("preempt", 0) >= 20 and reasons.get("reclaim", 0) >= 10, reasons


# --- replays: snapshots the properties found a bug on ----------------------------------------

REPLAYS = sorted((Path(__file__).parent / "replays").glob("renumber_*.json"))


@pytest.mark.parametrize("path", REPLAYS, ids=[p.stem for p in REPLAYS])
def test_renumbering_replays(path):
    """Two numberings of the same cluster (`snapshot`, `renumbered`) decide the same."""
    case = json.loads(path.read_text())
    assert _summary(_decide(case["renumbered"])) == _summary(_decide(case["snapshot"])), case["bug"]
    check_minimal(case["snapshot"])
    check_minimal(case["renumbered"])
