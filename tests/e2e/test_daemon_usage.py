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


@pytest.mark.config_extra("[accounting]\nsample_interval_s = 0.5\n")
def test_agent_samples_running_jobs_for_efficiency(cluster):
    jid = cluster.submit("--wrap", "python3 -c 'import time\nt=time.time()\nwhile time.time()-t<3: pass'")
    cluster.wait(jid, ("COMPLETED",), timeout=30)
    os.environ["BATCHD_SOCKET"] = cluster.sock
    eff = request("GET", "/v1/eff", query={"job": str(jid)})
    text = str(eff)
    assert "cpu" in text.lower(), eff
    r = cluster.run("batchd", "eff", str(jid))
    assert str(jid) in r.stdout and "CPU" in r.stdout, r.stdout
    # the run's usage record keeps the sampled peak memory
    (row,) = [x for x in request("GET", "/v1/accounting", query={"ids": str(jid)})["records"] if x["step"] is None]
    assert row["state"] == "COMPLETED"
