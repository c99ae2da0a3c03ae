"""Several daemons on one PostgreSQL database: one controller at a time, failover,
node failure and return, multi-node gangs."""

import signal
import time


def _running_on(c, node, jid):
    j = c.jobs(node)[jid]
    return j if j["state"] == "RUNNING" else None


def _nodelist(a: str, b: str) -> str:
    """Slurm's compressed list of two nodes `nodeN` (`node[1-2]`, `node[1,3]`)."""
    x, y = sorted(int(n[len("node"):]) for n in (a, b))
    return f"node[{x}-{y}]" if y == x + 1 else f"node[{x},{y}]"


def test_two_node_gang_starts_on_both_at_once(pgcluster):
    c = pgcluster
    for n in ("node1", "node2", "node3"):
        c.start(n)
    # the batch script runs on the first node; srun reaches the second through its own agent
    # (the node list quoted: unquoted, bash globs `node[1-2]` against the node1/ node2/ dirs here)
    jid = c.submit("node2", "-N", "2", "--gres=gpu:4", "-o", str(c.root / "gang.out"), "--wrap",
                   f"echo \"$SLURM_JOB_NODELIST $SLURM_NNODES\"; {c.bin}/srun -l bash -c 'echo $SLURMD_NODENAME'")
    j = c.wait("node3", lambda: (lambda x: x if x["state"] == "COMPLETED" else None)(c.jobs("node3")[jid]),
               "the gang to complete")
    assert j["nodes"] == 2 and len(j["gres"]) == 2
    assert all(len(g) == 4 for g in j["gres"].values())
    out = (c.root / "gang.out").read_text().splitlines()
    first, second = sorted(j["gres"])
    assert out[0] == f"{_nodelist(first, second)} 2", out
    assert sorted(out[1:]) == [f"0: {first}", f"1: {second}"], out
    # the CLI works from any node: node1 sees what node3 saw
    assert c.jobs("node1")[jid]["state"] == "COMPLETED"


def test_controller_failover_keeps_jobs_and_starts_pending(pgcluster):
    c = pgcluster
    for n in ("node1", "node2", "node3"):
        c.start(n)
    ctl = c.wait("node2", lambda: c.controller("node2").get("node"), "a controller")
    others = [n for n in ("node1", "node2", "node3") if n != ctl]
    # fill the cluster: 12 GPUs; 3 x 4-GPU jobs running, 2 more pending
    running = [c.submit(others[0], "--gres=gpu:4", "--wrap", "sleep 12") for _ in range(3)]
    for jid in running:
        c.wait(others[0], lambda jid=jid: _running_on(c, others[0], jid), f"job {jid} to run")
    pending = [c.submit(others[0], "--gres=gpu:4", "--wrap", "sleep 1") for _ in range(2)]

    def looked_at_and_pending():
        jobs = c.jobs(others[0])
        assert all(jobs[p]["state"] == "PENDING" for p in pending), [jobs[p] for p in pending]
        return all(jobs[p]["reason"] in ("Resources", "Priority") for p in pending)

    c.wait(others[0], looked_at_and_pending, "the controller to leave both jobs pending for want of GPUs", timeout=20)
    t0 = time.time()
    c.kill(ctl, signal.SIGKILL)
    new = c.wait(others[0], lambda: (lambda h: h if h.get("node") not in (None, ctl) else None)(
        c.controller(others[0])), "another controller", timeout=20)
    took = time.time() - t0
    assert new["node"] in others and took < 15, (new, took)
    # jobs on the dead controller's node fail over (NODE_FAIL, requeued); the others keep running.
    # Whether that node is marked down first (its heartbeat 5 s old) or its daemon is back in
    # time to take its runs up again is a race the election's seconds decide; a job requeued
    # by NODE_FAIL may start again only after the requeue hold-off (Slurm's BeginTime).
    from batchd.node.runs import REQUEUE_HOLD_S

    c.start(ctl)
    for jid in running + pending:
        c.wait(others[1], lambda jid=jid: c.jobs(others[1])[jid]["state"] == "COMPLETED", f"job {jid} to complete",
               timeout=90 + REQUEUE_HOLD_S)
    from batchd.cli.client import request

    recs = request("GET", "/v1/accounting", query={"duplicates": "1"})["records"]
    runs = [(r["job_id"], r["restarts"], r["state"]) for r in recs if r["step"] is None]
    # exactly one record per (job, run), never two COMPLETED runs of one job
    keys = [(r["job_id_raw"], r["start"]) for r in recs if r["step"] is None]
    assert len(keys) == len(set(keys)), runs
    for jid in running + pending:
        assert sum(1 for r in recs if r["step"] is None and r["job_id_raw"] == str(jid)
                   and r["state"] == "COMPLETED") == 1, runs


def test_dead_agent_node_goes_down_and_its_jobs_are_requeued_then_reconciled(pgcluster):
    c = pgcluster
    for n in ("node1", "node2", "node3"):
        c.start(n)
    ctl = c.wait("node1", lambda: c.controller("node1").get("node"), "a controller")
    victim_node = next(n for n in ("node1", "node2", "node3") if n != ctl)
    other = next(n for n in ("node1", "node2", "node3") if n not in (ctl, victim_node))
    jobs = [c.submit(ctl, "--gres=gpu:4", "--requeue", "--wrap", "sleep 30") for _ in range(3)]
    for jid in jobs:
        c.wait(ctl, lambda jid=jid: _running_on(c, ctl, jid), f"job {jid} running")
    on_victim = [jid for jid in jobs if victim_node in c.jobs(ctl)[jid]["gres"]]
    assert len(on_victim) == 1
    # squeue says RUNNING once the controller allocates; the node's supervisor launches the
    # run a moment later. Kill the node only once the run has begun there (its started.json),
    # or there is no orphaned run for the returning node to end.
    from batchd.node.spool import EXIT, STARTED

    jobdir = c.root / victim_node / "state" / "spool" / f"job.{on_victim[0]}.0"
    c.wait(ctl, lambda: (jobdir / STARTED).exists(), "the run to begin on the victim node", timeout=30)
    c.kill(victim_node, signal.SIGKILL)
    # the controller marks the node DOWN after node_timeout_s and requeues its job
    c.wait(ctl, lambda: "down" in c.run(ctl, "sinfo", "-N", "-h", "-n", victim_node).stdout.lower(),
           "the node to go DOWN", timeout=30)
    j = c.wait(ctl, lambda: (lambda x: x if x["restarts"] == 1 else None)(c.jobs(ctl)[on_victim[0]]),
               "the job to be requeued", timeout=30)
    assert j["state"] in ("PENDING", "RUNNING")
    # the node returns: it kills the run the database gave up on, and comes back IDLE
    c.start(victim_node)
    c.wait(ctl, lambda: "down" not in c.run(ctl, "sinfo", "-N", "-h", "-n", victim_node).stdout.lower(),
           "the node to come back", timeout=30)
    # the run that kept going on the lost node was killed by its agent on return, and the
    # database kept exactly one record of it (NODE_FAIL, written by the controller)
    import json

    exit_file = jobdir / EXIT
    c.wait(ctl, lambda: exit_file.exists(), "the orphaned run to be ended on the returning node", timeout=30)
    assert json.loads(exit_file.read_text())["requested"] == "node_fail"
    from batchd.cli.client import request

    recs = [r for r in request("GET", "/v1/accounting", query={"ids": str(on_victim[0]), "duplicates": "1"})[
        "records"] if r["step"] is None]
    assert [r["state"] for r in recs][0] == "NODE_FAIL" and len(recs) == 2, recs
    del other
