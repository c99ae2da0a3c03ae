"""`batchd simulate` against a real dev daemon (issue 21, item 5): the same workload of real
processes (`sleep`), run by the daemon and by the simulator, starts in the same order and
at the same times within a stated tolerance.

The workload: 300 one-GPU jobs of two teams with 4 GPUs each on 8 GPUs (two nodes),
submitted held and released at once, so that every job waits from the same instant and
the order comes from the scheduler alone: the division of the cards between the teams,
then job id, through chains of 37 or so jobs on each card.

Reclaim is left out here on purpose: with borrowing that the owner takes back, which job
is reclaimed depends on which ends a tenth of a second first, so two runs of the daemon
itself do not agree on it; the simulator's reclaim (grace, requeue hold-off, lost work) is
checked on hand-computed cases in tests/sim/test_simulate.py. Here each team's limit is
its quota and the cycle runs the allocate and backfill passes only (measured: with A
allowed 2 more, or with the preempt pass on, the daemon and the simulator evicted different
jobs after the first few, each choice right for the instant it saw). Jobs of several GPUs
are left out for the same reason: under the suite's load (three workers on two cores) the
daemon's cycle runs late, sees two cards freed where the simulator saw one, and packs
differently (measured: 2- and 4-GPU jobs 7 to 15 s apart); gangs are checked on
hand-computed cases. The simulator is given each
job's real run time (its end − start in the daemon: the launch and end latencies of a real
run are not what is checked, the decisions are), the same config and accounts, and the
release as every job's submission. Priorities are flat (no age, no fair-share weight), so the order
is the scheduler's division of the cards between the teams, then job id.

Tolerance: a job's start in the daemon is within 5 s + 20 % of its simulated start, plus the
daemon's reaction time measured in the same run (the mean time from a job's end on a card
to the next start on that card) for each job before it on its card (its rank among the simulated
starts / 8 cards), and no two jobs whose simulated starts are more than that apart start in
the other order. The daemon notices an end and runs its cycle a fraction of a second later,
and those fractions add up along a chain of jobs on a card. Measured: alone, at most 0.9 s;
beside a unit-test run, 1.45 s; inside the whole suite in CI (three workers on two cores),
3.6 s at 20 s into the run; on 2026-12-07's slower machine, inside the suite, 10 to 15 s
(then past 5 s + 20 %), which the reaction term is for (measured then from the last end
anywhere before a start, it fell short and CI failed there; measured per card since, it
has not been run on such a machine). With 300 jobs (from 2026-12-07's
third session; 120 before): alone, median 0.63 to 0.79 s and at most 1.36 to 1.78 s off,
reaction 0.04 s a job; beside three busy loops on the two cores, median 1.59 to 1.64 s, at
most 3.30 to 3.93 s, reaction 0.09 s (so 37 jobs deep on a card, 3.3 s).
"""

from __future__ import annotations

import json
import os
import pwd
import random
import time
from pathlib import Path

import pytest

from batchd.sim.engine import from_files
from batchd.sim.trace import TraceJob
from tests.e2e.conftest import own_cluster

pytestmark = pytest.mark.slow

CONFIG = """
cluster_name = "simval"
accounts = "accounts.toml"
[scheduler]
interval_s = 1
kill_wait_s = 2
grace_time_s = 2
passes = ["allocate", "backfill"]
[priority]
weight_age = 0
weight_fairshare = 0
weight_jobsize = 0
weight_partition = 0
weight_qos = 0
calc_period_s = 100000
[accounting]
tres_billing_weights = "CPU=0,GRES/gpu=1.0"
[[partition]]
name = "gpu"
nodes = "ALL"
default = true
[[node]]
name = "node1"
cpus = 16
memory_mb = 64000
gpus = [{ type = "h200", count = 4 }]
[[node]]
name = "node2"
cpus = 16
memory_mb = 64000
gpus = [{ type = "h200", count = 4 }]
"""

ACCOUNTS = """
[[account]]
name = "A"
users = ["{me}"]
[account.resources."gres/gpu"]
quota = 4
limit = 4
over_quota_weight = 1

[[account]]
name = "B"
users = ["{me}"]
[account.resources."gres/gpu"]
quota = 4
limit = 4
over_quota_weight = 0
"""

JOBS = 300


@pytest.fixture
def cluster():
    me = pwd.getpwuid(os.getuid()).pw_name
    with own_cluster(CONFIG, "batchd-e2e-simval-", {"accounts.toml": ACCOUNTS.replace("{me}", me)}) as c:
        yield c


def test_the_simulator_agrees_with_the_daemon(cluster):
    rng = random.Random(21)
    work = [(rng.choice("AB"), 1, rng.choice((1.0, 1.5, 2.0, 3.0))) for _ in range(JOBS)]
    ids = [cluster.submit("--hold", "-A", team, f"--gres=gpu:h200:{gpus}", "-c", "1", "--mem=1G", "-t", "5",
                          "--wrap", f"sleep {secs}")
           for team, gpus, secs in work]
    cluster.run("scontrol", "release", *map(str, ids))
    deadline = time.time() + 600
    while True:
        views = {jid: cluster.job(jid) for jid in ids}
        if all(v["state"] == "COMPLETED" for v in views.values()):
            break
        assert time.time() < deadline, "the workload did not finish"
        time.sleep(2)
    starts = {jid: float(views[jid]["start_time"]) for jid in ids}
    ends = {jid: float(views[jid]["end_time"]) for jid in ids}
    t0 = min(starts.values())
    me = pwd.getpwuid(os.getuid()).pw_name
    trace = [TraceJob(id=jid, submit_s=0.0, duration_s=max(1.0, ends[jid] - starts[jid]), gpus=gpus, team=team,
                      user=me, time_limit_s=300) for jid, (team, gpus, _s) in zip(ids, work, strict=True)]
    # a reclaimed `sleep` exits at SIGTERM, in well under a second (the daemon's log says ~0.1 s)
    sim = from_files(str(cluster.cfg), str(cluster.root / "accounts.toml"), trace, term_exit_s=0.1)
    res = sim.run(trace)
    # the daemon's view has each job's last run (a reclaimed job ran again): so does this
    simulated = {j.t.id: (j.runs[-1][0] if j.runs else None) for j in res.jobs}
    real = {jid: starts[jid] - t0 for jid in ids}
    assert all(v is not None for v in simulated.values())
    off = {jid: real[jid] - simulated[jid] for jid in ids}
    # the daemon's own reaction time in this run: on each card, from a job's end to the
    # next start there (the simulator's is 0: every team has jobs waiting for its cards until
    # its queue is empty, so a card idles only while the daemon reacts), the mean over the
    # cards' chains; a job's start may be late by that much per job before it on its card
    # (8 cards: depth ~ rank / 8). (Measured from the last end anywhere before a start, as
    # before 2026-12-07's third session, a loaded daemon's stalls were missed: on the slower
    # machine that median read under 0.56 s where starts drifted about 2 s a job deep.)
    chains: dict[str, list[int]] = {}
    for jid in ids:  # "gres": {node: [its GPUs' indices]}
        chains.setdefault(json.dumps(views[jid]["gres"], sort_keys=True), []).append(jid)
    assert len(chains) == 8, sorted(chains)  # one GPU each: a chain per card
    by_start = [sorted(chain, key=lambda j: starts[j]) for chain in chains.values()]
    gaps = [starts[b] - ends[a] for chain in by_start for a, b in zip(chain, chain[1:], strict=False)]
    assert all(g > -0.5 for g in gaps), gaps  # a card holds one job at a time
    lag = max(0.0, sum(gaps) / len(gaps)) if gaps else 0.0
    rank = {jid: k for k, jid in enumerate(sorted(ids, key=lambda j: simulated[j]))}
    tol = {jid: 5.0 + 0.2 * simulated[jid] + lag * rank[jid] / 8 for jid in ids}
    late = {jid: (round(off[jid], 2), work[ids.index(jid)], round(simulated[jid], 1)) for jid in ids
            if abs(off[jid]) > tol[jid]}
    if late and os.environ.get("BATCHD_SIMVAL_DEBUG"):
        Path(os.environ["BATCHD_SIMVAL_DEBUG"]).write_text(json.dumps({
            "ids": ids, "work": work, "starts": starts, "ends": ends, "log": (cluster.root / "daemon.log").read_text(),
            "sim_preemptions": res.preemptions}, default=str))
    assert not late, f"starts off by more than the tolerance: {json.dumps(late)}"
    offsets = sorted(abs(v) for v in off.values())
    print(f"simulate vs daemon: {JOBS} jobs, start offsets median {offsets[len(offsets) // 2]:.2f} s, "
          f"max {offsets[-1]:.2f} s; daemon reaction {lag:.2f} s")  # shown with -s: the figure of the closing note
    order = sorted(ids, key=lambda j: simulated[j])
    swapped = [(a, b) for i, a in enumerate(order) for b in order[i + 1:]
               if simulated[b] - simulated[a] > tol[b] and real[b] < real[a]]
    assert not swapped, swapped[:10]
