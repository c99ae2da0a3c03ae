"""GET /metrics on a dev daemon's TCP listener (issue 20, item 1), against what squeue
says, and scraped by a real Prometheus server (Debian's `prometheus`; the test skips
without it) that answers a PromQL query about a running job's account."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from tests.e2e.conftest import merge_toml


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _with_listener(cluster) -> int:
    port = _free_port()
    cluster.stop()
    cluster.cfg.write_text(merge_toml(cluster.cfg.read_text(), f'[http]\nlisten = "127.0.0.1:{port}"\n'))
    cluster.start()
    return port


def _get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_metrics_say_what_squeue_says(cluster):
    port = _with_listener(cluster)
    running = cluster.submit("--gres=gpu:h200:2", "--wrap", "sleep 30")
    cluster.wait(running, ("RUNNING",))
    waiting = cluster.submit("-N", "2", "--gres=gpu:4", "--wrap", "true")
    deadline = time.time() + 20
    while cluster.job(waiting)["reason"] in ("None", ""):
        assert time.time() < deadline
        time.sleep(0.2)
    bad = cluster.run("sbatch", "--gres=gpu:99", "--wrap", "true", check=False)
    assert bad.returncode != 0
    status, ctype, text = _get(f"http://127.0.0.1:{port}/metrics", "application/openmetrics-text; version=1.0.0")
    assert status == 200 and ctype.startswith("application/openmetrics-text") and text.endswith("# EOF\n")
    m = _samples(text)
    account = cluster.job(running)["account"]
    squeue = cluster.run("squeue", "-h", "-o", "%T %a %r").stdout.split("\n")
    n_running = sum(1 for line in squeue if line.startswith("RUNNING"))
    assert m[f'batchd_jobs{{account="{account}",partition="gpu",state="RUNNING"}}'] == n_running == 1
    reason = cluster.job(waiting)["reason"]
    assert m[f'batchd_jobs_pending{{account="{account}",reason="{reason}"}}'] == 1
    assert m['batchd_submissions_total{result="accepted"}'] == 2 and m['batchd_submissions_total{result="refused"}'] == 1
    held = sum(v for k, v in m.items() if k.startswith("batchd_gpus{") and 'state="allocated"' in k)
    assert held == 2
    assert sum(v for k, v in m.items() if k.startswith("batchd_gpus{")) == 8  # every card, once
    assert m[f'batchd_account_gpus{{account="{account}",kind="allocated",resource="gres/gpu"}}'] == 2
    assert m['batchd_controller{node="node1"}'] == 1
    assert m["batchd_cycle_seconds_count"] >= 1
    assert any(k.startswith("batchd_account_billing_seconds_total{") and v > 0 for k, v in m.items())
    # the classic text form for a scraper that does not ask for OpenMetrics; unknown paths
    status, ctype, text = _get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200 and ctype.startswith("text/plain") and "batchd_jobs{" in text
    assert _get(f"http://127.0.0.1:{port}/nothing")[0] == 404


def test_a_real_prometheus_scrapes_the_daemon_and_answers_promql(cluster, tmp_path):
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("no prometheus server (Debian's package `prometheus`)")
    port = _with_listener(cluster)
    jid = cluster.submit("--gres=gpu:h200:3", "-J", "scraped", "--wrap", "sleep 60")
    account = cluster.wait(jid, ("RUNNING",))["account"]
    web = _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: batchd\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n")
    p = subprocess.Popen([prom, f"--config.file={tmp_path / 'prometheus.yml'}",
                          f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{web}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        query = f'sum(batchd_account_gpus{{account="{account}",kind="allocated",resource="gres/gpu"}})'
        url = f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        deadline = time.time() + 60
        result = None
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    body = json.loads(r.read())
                if body["status"] == "success" and body["data"]["result"]:
                    result = body["data"]["result"][0]["value"][1]
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert result == "3", (result, p.poll())
        up = urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/query?query=up", timeout=5).read().decode()
        assert re.search(r'"value":\[[\d.]+,"1"\]', up), up
    finally:
        p.terminate()
        p.wait(20)
