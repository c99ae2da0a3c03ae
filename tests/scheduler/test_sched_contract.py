"""Contract of the scheduler package: purity (imports), input validation, no mutation,
determinism, output format, and the KAI cases of tests/data/scenarios/kai.

A KAI case (one JSON file) holds `snapshot` (the input of `decide`), `full_cycle` (false:
judge one decision; true: apply each decision, starts become RUNNING and victims PENDING,
and decide again, up to 7 times or until nothing changes) and `expect`: `running` (ids
running at the end), `pending` (ids still pending, evicted ones not counted), `evicted`
(ids preempted in a single decision, or running at first and pending at the end of a full
cycle), `relocated` (rare: a victim evicted and started again at once; it counts as
running). `source` names the KAI test it restates."""

import ast
import copy
import json
from pathlib import Path

import pytest

from batchd.scheduler import Decisions, decide, load_snapshot

from .sched_builders import account, apply, job, node, run, snapshot

PKG = Path(__file__).resolve().parents[2] / "batchd" / "scheduler"
KAI_DIR = Path(__file__).resolve().parents[1] / "data" / "scenarios" / "kai"
FORBIDDEN = {"sqlalchemy", "subprocess", "socket", "psutil", "pynvml", "time", "datetime", "logging",
             "os", "random", "threading", "asyncio"}


def test_scheduler_imports_are_pure():
    # gres.py: the GPU model, assocpolicy.py: the association limits the scheduler reads
    for f in [*PKG.glob("*.py"), PKG.parent / "slurm" / "gres.py", PKG.parent / "slurm" / "assocpolicy.py"]:
        tree = ast.parse(f.read_text())
        for n in ast.walk(tree):
            names = []
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names = [n.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{f.name} imports {name}"
                if name.startswith("batchd."):
                    assert name.startswith(("batchd.scheduler", "batchd.priority", "batchd.slurm.gres",
                                                "batchd.slurm.assocpolicy")), f"{f.name} imports {name}"


def base():
    return snapshot([node("n0", 2)], [account("a", quota=1, weight=1), account("b", quota=1, weight=1)],
                    [job("r", "a", running_on={"n0": [0]}), job("p1", "b"), job("p2", "a"), job("p3", "b")])


def test_decide_never_mutates_input_and_is_deterministic():
    d = base()
    before = copy.deepcopy(d)
    snap = load_snapshot(d)
    first = decide(snap).to_dict()
    second = decide(snap).to_dict()
    assert d == before
    assert first == second
    assert json.dumps(first)  # JSON-ready


def test_output_format():
    out = decide(load_snapshot(base())).to_dict()
    assert set(out) == {"start", "preempt", "pending", "fair_share", "planned_start"}
    assert out["start"] == [{"job": "p1", "allocation": {"n0": {"tasks": 1, "gpus": [1], "cpus": 1, "memory_mb": 1,
                                                                       "cpu_ids": [0]}},
                             "after": [],
                             "charge": {"tres": {"cpu": 1, "mem": 1, "node": 1, "gres/gpu:gpu": 1, "gres/gpu": 1},
                                        "parts": [["gres/gpu:gpu", 1, "gpu", 1]]}}]
    assert out["pending"] == [{"job": "p2", "reason": "Resources"}, {"job": "p3", "reason": "Priority"}]
    assert out["fair_share"]["a"] == {"gres/gpu": 1.0}
    assert isinstance(decide(load_snapshot(base())), Decisions)


def test_policy_argument_overrides_snapshot_policy():
    d = base()
    d["policy"] = {"passes": []}
    assert decide(load_snapshot(d)).to_dict()["start"] == []
    assert decide(load_snapshot(d), {"passes": ["allocate"]}).to_dict()["start"] != []


def test_snapshot_round_trip():
    d = base()
    snap = load_snapshot(d)
    again = load_snapshot(snap.to_dict())
    assert decide(again).to_dict() == decide(snap).to_dict()
    assert snap.raw is d


@pytest.mark.parametrize("mutate,where", [
    (lambda d: d.pop("nodes"), "nodes"),
    (lambda d: d["jobs"][1].update(account="nope"), "jobs[1].account"),
    (lambda d: d["jobs"][1]["per_task"].update(cpu="x"), "jobs[1].per_task.cpu"),
    (lambda d: d["jobs"][1]["per_task"].update({"gres/fpga": 1}), "jobs[1].per_task.gres/fpga"),
    (lambda d: d["jobs"][0].pop("allocation"), "jobs[0].allocation"),
    (lambda d: d["jobs"][0]["allocation"]["n0"].update(gpus=[7]), "jobs[0].allocation.n0.gpus"),
    (lambda d: d["jobs"][0]["allocation"].update(ghost={}), "jobs[0].allocation.ghost"),
    (lambda d: d["accounts"][1].update(parent="a"), "accounts[1].parent"),
    (lambda d: d["accounts"][2]["resources"]["gres/gpu"].update(limit=-2), "accounts[2].resources.gres/gpu.limit"),
    (lambda d: d["jobs"].append(dict(d["jobs"][1])), "jobs"),
    (lambda d: d["nodes"][0].update(cpus=-1), "nodes[0].cpus"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d["policy"].update(passes=["allocate", "dance"]), "policy.passes"),
])
def test_bad_snapshot_names_the_key(mutate, where):
    d = base()
    d["accounts"][1]["parent"] = None  # "a" top-level so that a cycle can be made
    mutate(d)
    with pytest.raises(ValueError) as e:
        decide(load_snapshot(d))
    assert str(e.value).startswith(where), str(e.value)


def test_cycle_in_account_tree():
    d = snapshot([node("n0", 1)], [account("x", parent="y"), account("y", parent="x")], [])
    with pytest.raises(ValueError, match="cycle"):
        load_snapshot(d)


def _judge(case: dict) -> tuple[dict, dict]:
    """(what decide() gave, what the case expects) for one KAI case, as {"running",
    "pending", "evicted", "relocated"} sets (the module docstring says what each means).
    This is the project's own verdict; the external judge that runs `batchd plan` over the
    same files is a second opinion."""
    snap = copy.deepcopy(case["snapshot"])
    full = case["full_cycle"]
    initially = {j["id"] for j in snap["jobs"] if j["state"] == "RUNNING"}
    evicted: set = set()
    for _ in range(7 if full else 1):
        dec = decide(load_snapshot(snap)).to_dict()
        evicted |= {p["job"] for p in dec["preempt"]}
        changed = apply(snap, dec)
        snap["now"] += 60
        if not changed:
            break
    running = {j["id"] for j in snap["jobs"] if j["state"] == "RUNNING"}
    pending = {j["id"] for j in snap["jobs"] if j["state"] == "PENDING"}
    if full:
        relocated, got_evicted = set(), {i for i in initially if i in pending}
    else:
        relocated, got_evicted = evicted & running, evicted - running
    exp = {k: set(case["expect"].get(k, [])) for k in ("running", "pending", "evicted", "relocated")}
    got = {"running": running, "pending": pending - got_evicted, "evicted": got_evicted, "relocated": relocated}
    exp["running"] |= exp["relocated"]
    if full:  # a full cycle does not tell relocated victims apart
        got.pop("relocated")
        exp.pop("relocated")
    return got, exp


KAI_CASES = sorted(KAI_DIR.glob("*.json"))


def test_kai_cases_are_present():
    assert len(KAI_CASES) >= 10, f"the KAI cases are missing from {KAI_DIR}"


@pytest.mark.parametrize("path", KAI_CASES, ids=[p.stem for p in KAI_CASES])
def test_kai_case(path):
    got, want = _judge(json.loads(path.read_text()))
    assert got == want


def test_full_cycle_reclaim_then_stable():
    """Notebooks under quota take back borrowed GPUs; the next cycles change nothing."""
    snap = snapshot([node("n0", 4)], [account("train", quota=2, weight=1), account("nb", quota=2, weight=1)],
                    [job(f"t{i}", "train", running_on={"n0": [i]}) for i in range(4)]
                    + [job("nb0", "nb"), job("nb1", "nb")])
    first = run(snap).decisions
    assert {p["job"] for p in first["preempt"]} == {"t2", "t3"}
    apply(snap, first)
    for _ in range(3):
        d = run(snap).decisions
        assert d["preempt"] == []
        apply(snap, d)
    running = {j["id"] for j in snap["jobs"] if j["state"] == "RUNNING"}
    assert running == {"t0", "t1", "nb0", "nb1"}
