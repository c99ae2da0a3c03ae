"""A restarted daemon answers at once, whatever its launch backlog.

24 jobs are placed (RUNNING in the store) but not launched when the daemon is killed
with SIGKILL: launches are made slow (0.5 s each, as systemd-run is on a busy node) by
a `sitecustomize` on the daemon's PYTHONPATH that wraps `batchd.node.launcher.launch`, so
the backlog takes about 12 s. After the restart `squeue` and `sbatch` must answer
while that backlog is still being launched, and every job must run exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from batchd.cli.client import request
from tests.harness import serve_argv, start_daemon

LAUNCH_DELAY_S = 0.5
N_JOBS = 24

SITECUSTOMIZE = """
import os, sys
_delay = float(os.environ.get("BATCHD_TEST_LAUNCH_DELAY_S") or 0)
if _delay and len(sys.argv) > 1 and sys.argv[1] == "serve":
    import time
    from batchd.node import launcher
    _launch = launcher.launch
    def _slow_launch(*args, **kwargs):
        time.sleep(_delay)
        return _launch(*args, **kwargs)
    launcher.launch = _slow_launch
"""


def _start_slow(cluster, hook: Path) -> subprocess.Popen:
    """Start the daemon (only the daemon) with slow launches; returns at once."""
    env = dict(cluster.env, PYTHONPATH=str(hook), BATCHD_TEST_LAUNCH_DELAY_S=str(LAUNCH_DELAY_S))
    return start_daemon(serve_argv("--dev", "--config", str(cluster.cfg)), cwd=cluster.root, env=env,
                        log=cluster.log)


def _launched(cluster, since: int) -> int:
    return cluster.log.read_text()[since:].count("job launched job_id=")


def test_socket_answers_during_the_launch_backlog_and_each_job_runs_once(cluster):
    hook = cluster.root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    runs = cluster.root / "runs.log"
    cluster.stop()
    cluster.proc = _start_slow(cluster, hook)
    deadline = time.time() + 30
    while cluster.run("sinfo", check=False).returncode != 0:
        assert time.time() < deadline and cluster.proc.poll() is None, cluster.log.read_text()[-3000:]
        time.sleep(0.1)

    # 24 one-CPU tasks, all placed by one cycle; each logs its id and run once, then ends
    script = f"#!/bin/sh\necho \"$SLURM_JOB_ID $SLURM_RESTART_COUNT\" >> {runs}\nsleep 1\n"
    first = cluster.submit("-a", f"0-{N_JOBS - 1}", "-c", "1", "--mem=100", "-o", "/dev/null", input=script)
    os.environ["BATCHD_SOCKET"] = cluster.sock
    deadline = time.time() + 30
    while True:
        jobs = request("GET", "/v1/jobs", query={"ids": str(first), "all": "1"})["jobs"]
        if sum(j["state"] == "RUNNING" for j in jobs) == N_JOBS:
            break
        assert time.time() < deadline, jobs
        time.sleep(0.02)
    cluster.proc.send_signal(signal.SIGKILL)
    cluster.proc.wait(timeout=10)
    ids = sorted(j["id"] for j in jobs)
    before = _launched(cluster, 0)
    assert before < N_JOBS // 2, "too many launched before the kill: the test proves nothing"

    mark = len(cluster.log.read_text())
    t0 = time.monotonic()
    cluster.proc = _start_slow(cluster, hook)
    while cluster.run("squeue", check=False).returncode != 0:
        assert time.monotonic() - t0 < 20 and cluster.proc.poll() is None, cluster.log.read_text()[-3000:]
        time.sleep(0.02)
    answered_s = time.monotonic() - t0
    r = cluster.run("sbatch", "--parsable", "-o", "/dev/null", "--wrap", f"echo extra 0 >> {runs}")
    submitted_s = time.monotonic() - t0
    extra = int(r.stdout.strip())
    launched_then = _launched(cluster, mark)
    # the socket answered, and took a submission, while most of the backlog was still to launch
    assert launched_then < N_JOBS - before - 4, (answered_s, submitted_s, launched_then)
    assert answered_s < 5.0, answered_s  # the backlog alone takes N_JOBS * 0.5 s = 12 s

    for jid in ids:
        cluster.wait(jid, ("COMPLETED",), timeout=60)
    cluster.wait(extra, ("COMPLETED",), timeout=30)
    lines = runs.read_text().split("\n")
    logged = sorted(int(x.split()[0]) for x in lines if x and not x.startswith("extra"))
    assert logged == ids, lines  # every placed job ran, and ran once
    assert lines.count("extra 0") == 1
    recs = [x for x in request("GET", "/v1/accounting", query={"ids": ",".join(map(str, ids)),
                                                                 "duplicates": "1"})["records"]
            if x["step"] is None]
    assert sorted(int(x["job_id_raw"]) for x in recs) == ids, recs  # one usage record per run
    print(f"restart: squeue answered after {answered_s:.2f} s, sbatch after {submitted_s:.2f} s, "
          f"{launched_then} of {N_JOBS - before} backlog launches done by then")
