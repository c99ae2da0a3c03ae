"""The dashboard (issue 20, item 3) in headless Chromium (Debian's chromium and
chromedriver, driven over WebDriver by tests/webdriver.py; the test skips without them)
against a dev daemon with a running workload: signing in through the form with a token
from `scontrol token`, a screenshot of each page at two sizes (laptop 1366x768, wall
screen 2560x1440; kept under $BATCHD_SCREENSHOTS when set), the numbers on each page
against squeue, sshare and `batchd report`, and the page refreshing by itself."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.conftest import merge_toml
from tests.webdriver import Browser

SIZES = {"laptop": (1366, 768), "wall": (2560, 1440)}
PAGES = {"cluster": "/ui/", "queues": "/ui/queues", "pending": "/ui/pending", "jobs": "/ui/jobs", "bill": "/ui/bill"}


CONFIG = """
cluster_name = "dash"
shard_per_gpu = 4
accounts = "accounts.toml"
[scheduler]
interval_s = 1
kill_wait_s = 2
grace_time_s = 2
[accounting]
tres_billing_weights = "CPU=0,GRES/gpu=1.0,GRES/gpu:h200=8.0,GRES/gpu:rtxpro6000=4.0"
[[partition]]
name = "gpu"
nodes = "ALL"
default = true
[[node]]
name = "gpu01"
cpus = 16
memory_mb = 64000
gpus = [{ type = "h200", count = 4 }]
[[node]]
name = "gpu02"
cpus = 16
memory_mb = 64000
gpus = [{ type = "h200", count = 4 }]
[[node]]
name = "mig01"
cpus = 8
memory_mb = 32000
gpus = [
  { index = 0, uuid = "GPU-r0", type = "rtxpro6000", mig = [
      { profile = "1g.24gb", uuid = "MIG-r0" }, { profile = "1g.24gb", uuid = "MIG-r1" },
      { profile = "1g.24gb", uuid = "MIG-r2" }, { profile = "1g.24gb", uuid = "MIG-r3" } ] },
]
[[node]]
name = "shard01"
cpus = 8
memory_mb = 32000
gpus = [{ type = "h200", count = 2 }]
"""

ACCOUNTS = """
[[account]]
name = "serving"
users = ["{me}"]
[account.resources."gres/gpu"]
quota = 4
limit = 4
over_quota_weight = 0

[[account]]
name = "training"
users = ["{me}"]
default_for = ["{me}"]
[account.resources."gres/gpu"]
quota = 4
limit = -1
over_quota_weight = 1
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def browser():
    b = Browser.start()
    if b is None:
        pytest.skip("Debian's chromium and chromedriver are not installed")
    yield b
    b.close()


@pytest.fixture
def dash():
    import pwd

    from tests.e2e.conftest import own_cluster

    port = _free_port()
    me = pwd.getpwuid(os.getuid()).pw_name
    config = merge_toml(CONFIG, f'[http]\nlisten = "127.0.0.1:{port}"\n')
    with own_cluster(config, "batchd-e2e-dash-", {"accounts.toml": ACCOUNTS.replace("{me}", me)}) as c:
        token = c.run("scontrol", "token").stdout.strip().partition("=")[2]
        yield c, f"http://127.0.0.1:{port}", token


def _gpus(view: dict) -> float:
    m = re.search(r"gres/gpu=([0-9.]+)", view.get("tres_alloc") or "")
    return float(m.group(1)) if m else 0.0


def _cells(b: Browser, selector: str, attr: str) -> list[str]:
    return b.run(f"return Array.from(document.querySelectorAll({json.dumps(selector)}))"
                 f".map(e => e.getAttribute({json.dumps(attr)}));")


def test_the_dashboard_shows_what_the_commands_show(dash, browser, tmp_path):
    cluster, base, token = dash
    out = Path(os.environ.get("BATCHD_SCREENSHOTS") or tmp_path / "screens")
    out.mkdir(parents=True, exist_ok=True)
    cluster.run("batchd", "price", "set", "gres/gpu:h200", "2.50", "--currency", "EUR", "--from", "2020-01-01")
    cluster.run("batchd", "price", "set", "gres/gpu:rtxpro6000", "1.20", "--currency", "EUR", "--from", "2020-01-01")
    cluster.run("batchd", "node", "drain", "gpu02", "--reason", "fan replacement")
    done = cluster.submit("-J", "talker", "-o", str(tmp_path / "talk-%j.out"), "--wrap", "echo hello from the job")
    cluster.wait(done, ("COMPLETED",))
    out_dir = ["-o", str(tmp_path / "%x-%j.out")]
    work = [cluster.submit("-J", "pretrain", "--gres=gpu:h200:4", "-t", "30", *out_dir, "--wrap",
                           "echo epoch 1 loss 2.31; echo epoch 2 loss 1.87; sleep 300"),
            cluster.submit("-J", "finetune", "--gres=gpu:h200:1", "-t", "30", *out_dir, "--wrap",
                           "echo step 100 loss 0.42; sleep 300"),
            cluster.submit("-A", "serving", "-J", "llm-api", "--gres=shard:2", "-t", "30", *out_dir, "--wrap",
                           "echo serving on :8000; sleep 300"),
            cluster.submit("-A", "serving", "-J", "embed", "--gres=gpu:1g.24gb:1", "-t", "30", *out_dir, "--wrap",
                           "echo embeddings ready; sleep 300")]
    for jid in work:
        cluster.wait(jid, ("RUNNING",))
    waiting = cluster.submit("-A", "serving", "-N", "2", "--gres=gpu:h200:4", "--wrap", "true")
    deadline = time.time() + 20
    while cluster.job(waiting)["reason"] in ("None", ""):
        assert time.time() < deadline
        time.sleep(0.3)
    # not signed in: every page sends the browser to the login form
    req = urllib.request.Request(base + "/ui/queues")
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as e:
        opener.open(req, timeout=10)
    assert e.value.code == 303 and e.value.headers["Location"] == "/ui/login"

    browser.size(*SIZES["laptop"])
    browser.get(base + "/ui/login")
    _sign_in(browser, "SLURM_JWT=" + token)

    # the cluster: each running job's cards carry it, and the cards' shares add up to the
    # GPUs squeue's allocations count (MIG instances and shards by their card share)
    running = {int(i) for i in cluster.run("squeue", "-h", "-t", "R", "-o", "%i").stdout.split()}
    assert set(work) == running
    holders = {int(j) for j in _cells(browser, ".card li[data-job]", "data-job")}
    assert holders == running
    shares = [float(x) for x in _cells(browser, ".card[data-share]", "data-share")]
    assert sum(shares) == pytest.approx(sum(_gpus(cluster.job(j)) for j in running), abs=1e-3)
    assert set(_cells(browser, ".card[data-state=drained]", "data-node")) == {"gpu02"}
    assert "fan replacement" in browser.run("return document.querySelector('section[data-node=gpu02]').textContent;")
    # the queues, as the scheduler sees them, and sshare's NormShares
    browser.get(base + "/ui/queues")
    alloc = browser.run("return Object.fromEntries(Array.from(document.querySelectorAll("
                        "'tr[data-resource=\"gres/gpu\"]')).map(r => [r.dataset.account, "
                        "r.querySelector('[data-kind=allocated]').textContent]));")
    by_account: dict[str, float] = {}
    for j in running:
        v = cluster.job(j)
        by_account[v["account"]] = by_account.get(v["account"], 0.0) + _gpus(v)
    assert set(by_account) == {"serving", "training"}
    for account, n in by_account.items():
        assert float(alloc[account]) == pytest.approx(n, abs=1e-3), (account, alloc)
    borrowed = browser.run("return document.querySelector('tr[data-account=training][data-resource=\"gres/gpu\"] "
                           "[data-kind=borrowed]').textContent;")
    assert float(borrowed) == pytest.approx(by_account["training"] - 4, abs=1e-3)
    shares = browser.run("return Object.fromEntries(Array.from(document.querySelectorAll('tr[data-share-account]'))"
                         ".map(r => [r.dataset.shareAccount, r.querySelector('[data-kind=norm_shares]').textContent]));")
    sshare = cluster.run("sshare", "-P", "-n", "-o", "Account,User,NormShares").stdout.splitlines()
    for line in sshare:
        account, user, norm = line.split("|")
        if not user and account.strip() in shares:
            assert float(shares[account.strip()]) == pytest.approx(float(norm), abs=1e-6), account
    # the pending jobs: squeue's, with batchd why's sentence
    browser.get(base + "/ui/pending")
    on_page = set(_cells(browser, "tr[data-job]", "data-job"))
    assert on_page == set(cluster.run("squeue", "-h", "-t", "PD", "-o", "%i").stdout.split())
    why = browser.run(f"return document.querySelector('tr[data-job=\"{waiting}\"] .why').textContent;")
    assert why and why in cluster.run("batchd", "why", str(waiting)).stdout
    # the user's own jobs, with the output's tail
    browser.get(base + "/ui/jobs")
    mine = set(_cells(browser, "article[data-job]", "data-job"))
    assert mine == set(cluster.run("squeue", "-h", "-t", "all", "--me", "-o", "%i").stdout.split())
    assert "hello from the job" in browser.run(f"return document.querySelector('article[data-job=\"{done}\"]')"
                                                ".textContent;")
    # the bill: batchd report's GPU-hours per account
    browser.get(base + "/ui/bill")
    hours = browser.run("return Object.fromEntries(Array.from(document.querySelectorAll('table.bill tr[data-account]'))"
                        ".map(r => [r.dataset.account, r.querySelector('[data-kind=gpu_hours]').textContent]));")
    report = json.loads(cluster.run("batchd", "report", "--json").stdout)
    for row in report["rows"]:
        assert float(hours[row["account"]]) == pytest.approx(float(row["gpu_hours"]), abs=0.011), row
    # every page at both sizes
    for size, (w, h) in SIZES.items():
        for name, path in PAGES.items():
            browser.size(w, h)
            browser.get(base + path)
            if name == "bill":
                time.sleep(0.5)  # the report's frame
            png = browser.full_screenshot(out / f"{name}-{size}.png", w, h)
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, (name, size)
    # the page refreshes by itself: a job submitted now appears without a reload
    browser.size(*SIZES["laptop"])
    browser.get(base + "/ui/pending")
    later = cluster.submit("-N", "2", "--gres=gpu:h200:4", "-J", "later", "--wrap", "true")
    deadline = time.time() + 25
    while str(later) not in set(_cells(browser, "tr[data-job]", "data-job")):
        assert time.time() < deadline, "the pending page did not refresh"
        time.sleep(1)


def _sign_in(browser: Browser, token: str) -> None:
    """The login form, as a person fills it; the browser lands on the cluster page."""
    browser.type("textarea[name=token]", token)
    browser.click("button[type=submit]")
    deadline = time.time() + 15
    while not browser.url().endswith("/ui/"):
        assert time.time() < deadline, browser.run("return document.body.textContent;")
        time.sleep(0.2)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):
        return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a throwaway user")
def test_a_plain_user_sees_their_own_jobs_and_only_their_accounts_bill(dash, browser, tmp_path):
    import uuid

    from tests.hostlock import account_tool

    cluster, base, _token = dash
    name = f"bd{uuid.uuid4().hex[:8]}"
    account_tool("useradd", "-M", "-N", "-s", "/bin/sh", name)
    try:
        cluster.run("batchd", "user", "add", name, "-A", "serving", "--default")
        mine = cluster.submit("-J", "theirs", "--gres=gpu:h200:1", "--wrap", "sleep 60")
        cluster.wait(mine, ("RUNNING",))
        token = cluster.run("scontrol", "token", f"username={name}").stdout.strip().partition("=")[2]
        browser.get(base + "/ui/login")
        _sign_in(browser, token)
        browser.get(base + "/ui/bill")
        accounts = set(_cells(browser, "table.bill tr[data-account]", "data-account"))
        assert accounts <= {"serving"}, accounts  # not training, not default: not theirs
        report_html = browser.run("return document.querySelector('iframe.report').contentDocument.body.textContent;")
        assert "training" not in report_html
        browser.get(base + "/ui/jobs")
        assert _cells(browser, "article[data-job]", "data-job") == []  # root's job is not theirs
        browser.get(base + "/ui/")  # the cluster is everyone's to see, as squeue is
        assert str(mine) in _cells(browser, ".card li[data-job]", "data-job")
        browser.get(base + "/ui/logout")
        assert browser.url().endswith("/ui/login")
        browser.get(base + "/ui/jobs")
        assert browser.url().endswith("/ui/login")
    finally:
        account_tool("userdel", name, check=False)
