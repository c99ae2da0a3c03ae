"""Invariants of decide() on random small clusters (hypothesis): no device handed out twice,
no card both held whole and shared, no CPU id given twice, no node over capacity, account limits held, only preemptible running jobs evicted, every
pending job has a reason, same input -> same output."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchd.scheduler import decide, load_snapshot

from .sched_builders import account, apply, job, node, snapshot


@st.composite
def clusters(draw):
    n_nodes = draw(st.integers(1, 3))
    nodes = [node(f"n{i}", draw(st.integers(1, 4)), cpus=draw(st.integers(2, 8)), memory_mb=1000,
                  state=draw(st.sampled_from(["IDLE", "IDLE", "IDLE", "DRAIN"]))) for i in range(n_nodes)]
    accts = [account(f"q{i}", quota=draw(st.integers(0, 3)), limit=draw(st.sampled_from([-1, -1, 2, 4])),
                     weight=draw(st.integers(0, 2)), priority=draw(st.sampled_from([100, 100, 101])))
             for i in range(draw(st.integers(1, 3)))]
    for n in nodes:
        if draw(st.booleans()):
            n["shards"] = 2 * n["gpus"][0]["count"]  # 2 per card
    free = {n["name"]: list(range(n["gpus"][0]["count"])) for n in nodes}
    shared: dict[str, dict[int, int]] = {n["name"]: {} for n in nodes}  # card -> shards in use
    cpus = {n["name"]: n["cpus"] for n in nodes}
    next_id = {n["name"]: 0 for n in nodes}
    jobs = []
    for k in range(draw(st.integers(0, 8))):
        a = draw(st.sampled_from(accts))["name"]
        g = draw(st.integers(0, 2))
        tasks = draw(st.integers(1, 2))
        prio = draw(st.sampled_from([50, 75, 125]))
        nname = draw(st.sampled_from(sorted(free)))
        shard = draw(st.integers(1, 2)) if nodes[int(nname[1:])].get("shards") and draw(st.booleans()) else 0
        pt = {"gres/shard": shard, "cpu": 1, "mem": 1} if shard else {"gres/gpu": g, "cpu": 1, "mem": 1}
        if shard:
            tasks = 1
            cards = [c for c, u in shared[nname].items() if u + shard <= 2] + free[nname]
        if draw(st.booleans()) and cpus[nname] >= tasks and (cards if shard else len(free[nname]) >= g * tasks):
            ids = list(range(next_id[nname], next_id[nname] + tasks))
            next_id[nname] += tasks
            cpus[nname] -= tasks
            if shard:
                card = cards[0]
                if card in free[nname]:
                    free[nname].remove(card)
                shared[nname][card] = shared[nname].get(card, 0) + shard
                r = job(f"r{k}", a, gpus=0, prio=prio, running_on={nname: []}, per_task=pt)
                r["allocation"][nname].update(shards=shard, shard_gpus=[card])
            else:
                gpus = free[nname][:g * tasks]
                del free[nname][:g * tasks]
                r = job(f"r{k}", a, gpus=g, tasks=tasks, prio=prio, running_on={nname: gpus}, per_task=pt)
            if draw(st.booleans()):
                r["allocation"][nname]["cpu_ids"] = ids
            jobs.append(r)
        else:
            jobs.append(job(f"p{k}", a, gpus=g, tasks=tasks, prio=prio, per_task=pt))
    backfill = draw(st.booleans())
    return snapshot(nodes, accts, jobs, policy={"backfill": backfill})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_invariants(d):
    snap = load_snapshot(d)
    dec = decide(snap).to_dict()
    assert decide(load_snapshot(d)).to_dict() == dec
    jobs = {j["id"]: j for j in d["jobs"]}
    nodes = {n["name"]: n for n in d["nodes"]}
    preempted = {p["job"] for p in dec["preempt"]}
    for p in dec["preempt"]:
        assert jobs[p["job"]]["state"] == "RUNNING" and jobs[p["job"]]["preemptible"]
    used: dict[str, set] = {n: set() for n in nodes}
    cpu: dict[str, float] = dict.fromkeys(nodes, 0.0)
    gpu_by_acct: dict[str, float] = {}
    holders = [(jid, j["allocation"]) for jid, j in jobs.items() if j["state"] == "RUNNING" and jid not in preempted]
    holders += [(s["job"], s["allocation"]) for s in dec["start"]]
    shards: dict[tuple[str, int], float] = {}
    ids: dict[str, set] = {n: set() for n in nodes}
    for jid, alloc in holders:
        for nname, a in alloc.items():
            for g in a["gpus"]:
                assert g not in used[nname], f"GPU {nname}:{g} given twice"
                used[nname].add(g)
            for c in a.get("shard_gpus", []):
                shards[(nname, c)] = shards.get((nname, c), 0) + a["shards"]
            cpu[nname] += a["cpus"]
            acct = jobs[jid]["account"]
            gpu_by_acct[acct] = gpu_by_acct.get(acct, 0) + len(a["gpus"])
    for (nname, c), n_sh in shards.items():
        assert c not in used[nname], f"GPU {nname}:{c} held whole and shared"
        assert n_sh <= 2
    # CPU ids: a job starting now (not after victims) shares none with any running job or other start
    for alloc in [j["allocation"] for j in jobs.values() if j["state"] == "RUNNING"] + \
            [s["allocation"] for s in dec["start"] if not s["after"]]:
        for nname, a in alloc.items():
            mine = set(a.get("cpu_ids", []))
            assert not mine & ids[nname], f"CPU ids {sorted(mine & ids[nname])} of {nname} given twice"
            ids[nname] |= mine
            assert all(0 <= c < nodes[nname]["cpus"] for c in mine)
    for s in dec["start"]:
        for a in s["allocation"].values():
            assert len(a["cpu_ids"]) == a["cpus"] and a["cpu_ids"] == sorted(a["cpu_ids"])
    for nname, n in nodes.items():
        assert cpu[nname] <= n["cpus"]
        assert all(0 <= g < n["gpus"][0]["count"] for g in used[nname])
    for s in dec["start"]:
        assert all(nodes[n]["state"] == "IDLE" for n in s["allocation"])
        want = jobs[s["job"]]
        got = sum(len(a["gpus"]) for a in s["allocation"].values())
        assert got == want["per_task"].get("gres/gpu", 0) * want["tasks"]
        if want["per_task"].get("gres/shard"):
            assert all(len(a["shard_gpus"]) == 1 for a in s["allocation"].values())
    for a in d["accounts"]:
        lim = a["resources"]["gres/gpu"]["limit"]
        started_here = [s for s in dec["start"] if jobs[s["job"]]["account"] == a["name"]
                        and any(x["gpus"] for x in s["allocation"].values())]
        if lim != -1 and started_here:
            assert gpu_by_acct.get(a["name"], 0) <= lim
    pending = {j for j, x in jobs.items() if x["state"] == "PENDING"} - {s["job"] for s in dec["start"]}
    assert {p["job"] for p in dec["pending"]} == pending
    assert all(p["reason"] for p in dec["pending"])


@pytest.mark.parametrize("seed", range(40))
def test_full_cycles_converge_without_ping_pong(seed):
    """Applying the decisions cycle after cycle settles within 8 cycles and no job is
    preempted twice (two accounts never take GPUs from each other in turn)."""
    rnd = random.Random(seed)
    nodes = [node(f"n{i}", rnd.randint(1, 4)) for i in range(rnd.randint(1, 3))]
    accts = [account(f"q{i}", quota=rnd.randint(0, 3), limit=rnd.choice([-1, -1, 3]), weight=rnd.randint(0, 2),
                     priority=rnd.choice([100, 100, 101])) for i in range(rnd.randint(2, 3))]
    jobs = [job(f"j{k}", rnd.choice(accts)["name"], gpus=rnd.randint(1, 2), tasks=rnd.randint(1, 2),
                prio=rnd.choice([50, 50, 75, 125]), time_limit_s=rnd.choice([None, 600, 3600]))
            for k in range(rnd.randint(2, 9))]
    snap = snapshot(nodes, accts, jobs, policy={"backfill": rnd.random() < 0.5})
    preempted: dict = {}
    for _ in range(8):
        d = decide(load_snapshot(snap)).to_dict()
        for p in d["preempt"]:
            preempted[p["job"]] = preempted.get(p["job"], 0) + 1
        if not apply(snap, d):
            break
        snap["now"] += 60
    else:
        pytest.fail("decisions did not settle")
    assert all(n == 1 for n in preempted.values()), preempted


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_unexplained_cycle_takes_the_same_actions(d):
    """decide(explain=False) (batchd simulate's cycle) starts and preempts exactly what the
    full cycle does, and leaves the explanations out."""
    full = decide(load_snapshot(d)).to_dict()
    bare = decide(load_snapshot(d), explain=False).to_dict()
    assert (bare["start"], bare["preempt"]) == (full["start"], full["preempt"])
    assert bare["pending"] == [] and bare["planned_start"] == {} and bare["fair_share"] == {}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.randoms(use_true_random=False))
def test_a_snapshot_loaded_with_reuse_is_the_snapshot(d, rnd):
    """`load_snapshot(d, reuse=earlier)` takes the unchanged job entries from the earlier
    snapshot (at their new places) and parses the others: the same Snapshot, the same cycle."""
    first = load_snapshot(d)
    jobs = list(d["jobs"])
    rnd.shuffle(jobs)
    if jobs:
        jobs[0] = dict(jobs[0])  # one entry rebuilt: parsed anew
        jobs.pop()  # one job gone: the others move
    d2 = {**d, "jobs": jobs}
    reused, fresh = load_snapshot(d2, first), load_snapshot(d2)
    assert [(j.index, j.raw is e) for j, e in zip(reused.jobs, jobs, strict=True)] == \
        [(i, True) for i in range(len(jobs))]
    assert reused == fresh
    assert decide(reused).to_dict() == decide(fresh).to_dict()
