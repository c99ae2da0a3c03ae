"""Fair-share usage accrues while jobs run, and a daemon restart (kill -9) in the middle
of a job neither charges a second twice nor loses one."""

import os
import signal
import time

import pytest

from batchd.cli.client import request

# one usage cycle a second; a half-life so long that decay is negligible over the test
EXTRA = "[priority]\ncalc_period_s = 1\ndecay_half_life_s = 100000000\n"


def _usage(cluster, key):
    os.environ["BATCHD_SOCKET"] = cluster.sock
    return request("GET", "/v1/snapshot")["usage"]["users"].get(key, 0.0)


@pytest.mark.config_extra(EXTRA)
def test_usage_accrues_while_running_and_survives_a_restart(cluster):
    jid = cluster.submit("--gres=gpu:1", "--wrap", "sleep 8")
    j = cluster.wait(jid, ("RUNNING",))
    billing = float(dict(kv.split("=") for kv in j["tres_alloc"].split(","))["billing"])
    key = f"default/{j['user']}"
    time.sleep(3)
    mid = _usage(cluster, key)
    assert mid > 0, "usage must grow while the job runs, not only at its end"
    cluster.stop(signal.SIGKILL)
    time.sleep(2)
    cluster.start()
    j = cluster.wait(jid, ("COMPLETED",), timeout=30)
    time.sleep(2.5)  # a cycle after the end
    total = _usage(cluster, key)
    ran = j["end_time"] - j["start_time"]
    # AllocTRES shows billing truncated to an integer; the rate is at least that
    assert billing * (ran - 1.5) <= total <= (billing + 1) * (ran + 1.5), (total, billing, ran)


#: what the efficiency job holds resident while it burns a CPU
HELD_MB = 256
BURN = f"""import time
held = b"x" * ({HELD_MB} << 20)  # written, so resident
t = time.time()
while time.time() - t < 3:
    pass
"""


@pytest.mark.config_extra("[accounting]\nsample_interval_s = 0.5\n")
def test_agent_samples_running_jobs_for_efficiency(cluster):
    """The agent samples a running job's process tree every 0.5 s (CPU since the previous
    sample, resident memory) into the run's aggregates, the run's record keeps CPU time and
    peak memory, and `batchd eff` prints them: a job holding HELD_MB while it burns a CPU for
    3 s must show all of it."""
    script = cluster.root / "burn.py"
    script.write_text(BURN)
    jid = cluster.submit("--mem=1G", "--wrap", f"python3 {script}")
    cluster.wait(jid, ("COMPLETED",), timeout=60)
    os.environ["BATCHD_SOCKET"] = cluster.sock
    eff = request("GET", "/v1/eff", query={"job": str(jid)})
    sampled = eff["efficiency"]
    assert sampled is not None and sampled["samples"] >= 2, eff
    assert sampled["cpu_pct_max"] > 10.0, sampled  # a busy loop (2 shared CI cores; an idle tree reads ~0)
    assert sampled["rss_mb_max"] >= 0.9 * HELD_MB, sampled
    assert eff["summary"]["max_rss_mb"] == sampled["rss_mb_max"] and eff["summary"]["cpu_pct"] > 0, eff
    (run,) = eff["runs"]
    assert run["state"] == "COMPLETED" and run["cpu_time_s"] > 0.5, run  # the tree's rusage
    assert run["max_rss_mb"] >= 0.9 * HELD_MB, run
    # the run's usage record keeps the peak (sacct MaxRSS on the batch row) and the CPU time
    rows = {x["step"]: x for x in request("GET", "/v1/accounting", query={"ids": str(jid)})["records"]}
    assert rows["batch"]["max_rss_kb"] >= 0.9 * HELD_MB * 1024, rows["batch"]
    assert rows[None]["state"] == "COMPLETED" and rows[None]["total_cpu_s"] > 0.5, rows[None]
    out = dict(line.split(": ", 1) for line in cluster.run("batchd", "eff", str(jid)).stdout.splitlines())
    assert out["Job ID"] == str(jid) and out["CPU Utilized"] != "00:00:00", out
    assert out["Memory Utilized"].endswith(" MB") and float(out["Memory Utilized"][:-3]) >= 0.9 * HELD_MB, out
