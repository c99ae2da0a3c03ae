"""Connections against a real daemon: one user holding thousands of idle connections does
not change how another user's jobs start and are recorded; bursts of clients connecting
at the same instant are all answered; half requests are closed after the read timeout;
an oversized body is a 413 before the daemon reads it."""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.hostlock import account_tool

# runs as a throwaway user: holds N connections open, sending nothing; every connection
# the daemon answers (503 over the cap, 408 after the read timeout) is counted, closed and
# opened again a second later, so the pressure lasts. After stdin closes it goes on until it
# has seen `want_timeouts` 408s (or 60 s) and prints its counts as one JSON line.
HOLDER = r"""
import json, resource, selectors, socket, sys, time
path, n, timeout, want_timeouts = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < n + 100:
    sys.exit(f"RLIMIT_NOFILE hard limit {hard} is too low for {n} connections")
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 100, hard))
sel = selectors.DefaultSelector()
st = {"connect_errors": 0, "refused": 0, "timed_out": 0, "other": 0, "overdue": 0, "reconnects": 0}
opened = {}
def open_one():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)  # blocking: waits for room in the backlog
    except OSError:
        st["connect_errors"] += 1
        s.close()
        return
    s.setblocking(False)
    opened[s] = time.monotonic()
    sel.register(s, selectors.EVENT_READ)
for _ in range(n):
    open_one()
print(json.dumps({"opened": len(opened)}), flush=True)
sel.register(sys.stdin, selectors.EVENT_READ)
stopping, give_up, closed, next_reopen = False, None, 0, time.monotonic() + 1
while not (stopping and (st["timed_out"] >= want_timeouts or time.monotonic() > give_up)):
    for key, _ in sel.select(0.2):
        if key.fileobj is sys.stdin:
            sys.stdin.readline()
            sel.unregister(sys.stdin)
            stopping, give_up = True, time.monotonic() + 60
            continue
        s = key.fileobj
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        st[{b"503": "refused", b"408": "timed_out"}.get(data[9:12], "other")] += 1
        sel.unregister(s)
        s.close()
        del opened[s]
        closed += 1
    now = time.monotonic()
    st["overdue"] = max(st["overdue"], sum(1 for t in opened.values() if now - t > timeout + 3))
    if now >= next_reopen and not stopping:
        for _ in range(closed):
            open_one()
        st["reconnects"] += closed
        closed, next_reopen = 0, now + 1
print(json.dumps(st), flush=True)
"""

PING = b"GET /v1/ping HTTP/1.1\r\nHost: batchd\r\n\r\n"


def other_users_python() -> str:
    """An interpreter a throwaway user can run (the venv's may live under /root)."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


@pytest.fixture
def throwaway_user():
    if os.geteuid() != 0 or not os.path.exists("/usr/sbin/useradd"):
        pytest.skip("needs root and useradd")
    name = f"bdc{uuid.uuid4().hex[:6]}"
    account_tool("useradd", "-M", "-N", "-s", "/bin/sh", name)
    try:
        pw = pwd.getpwnam(name)
        yield pw.pw_uid, pw.pw_gid
    finally:
        subprocess.run(["pkill", "-9", "-u", name], check=False)
        account_tool("userdel", name, check=False)


def raw_exchange(path: str, data: bytes, timeout: float = 20) -> tuple[int, dict]:
    """Send `data` (no retry, as the commands before batchd retried) and read the reply to
    EOF; a daemon that never answers is a socket timeout here."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(data)
        raw = b""
        while b := s.recv(65536):
            raw += b
    finally:
        s.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head[9:12]), json.loads(body)


@pytest.mark.config_extra("[limits]\nrequest_timeout_s = 2\n")
@pytest.mark.root
def test_thousands_of_idle_connections_of_one_user_do_not_touch_another_users_jobs(cluster, throwaway_user):
    uid, gid = throwaway_user
    script = cluster.root / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                               other_users_python(), str(script), cluster.sock, "2000", "2", "64"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = holder.stdout.readline()
        assert json.loads(first) == {"opened": 2000}, first
        jobs = [cluster.submit("--wrap", f"sleep 3; echo ran-{i}") for i in range(6)]
        for jid in jobs:
            cluster.wait(jid, ("COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED"), timeout=90)
        t0 = time.monotonic()
        cluster.run("squeue")
        squeue_s = time.monotonic() - t0
        holder.stdin.close()
        stats = json.loads(holder.stdout.readline())
        print("holder", stats, "squeue_s", round(squeue_s, 3))
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    for jid in jobs:
        j = cluster.job(jid)
        assert (j["state"], j["exit_code"]) == ("COMPLETED", "0:0"), (j, cluster.log.read_text()[-3000:])
        assert (cluster.root / f"slurm-{jid}.out").read_text().split() == [f"ran-{jobs.index(jid)}"]
    assert "JobLaunchFailure" not in cluster.log.read_text()
    assert squeue_s < 5, squeue_s  # a coarse bound: normally a tenth of a second
    # beyond the per-user cap (64) every connection was refused at once, the held ones were
    # closed after the 2 s timeout, and none stayed unanswered
    assert stats["connect_errors"] == 0 and stats["overdue"] == 0, stats
    assert stats["refused"] >= 2000 - 64 and stats["timed_out"] >= 64, stats
    # refusals are logged a few times, not once per connection
    log = cluster.log.read_text()
    assert 1 <= log.count("api connection refused") <= 10 and 1 <= log.count("api request timed out") <= 10


def burst(n: int, one) -> list:
    barrier = threading.Barrier(n)

    def run(_):
        barrier.wait()
        try:
            return one()
        except Exception as e:  # noqa: BLE001 - reported as the result
            return repr(e)

    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(run, range(n)))


@pytest.mark.config_extra("[limits]\nmax_connections_per_user = 1000\nmax_connections = 1000\n")
@pytest.mark.parametrize("n", [20, 200])
def test_clients_connecting_at_the_same_instant_all_get_in(cluster, n):
    """No retries here: what the backlog admits. The old backlog of 5 refused most of a
    burst with EAGAIN."""
    results = burst(n, lambda: raw_exchange(cluster.sock, PING)[0])
    assert results == [200] * n


def test_a_burst_of_real_clients_beyond_the_per_user_cap_is_answered(cluster, monkeypatch):
    """200 clients of one user, over the cap of 64: those refused retry and are served."""
    from batchd.cli import client

    monkeypatch.setenv("BATCHD_SOCKET", cluster.sock)
    results = burst(200, lambda: client.request("GET", "/v1/ping")["cluster"])
    assert results == ["e2e"] * 200


@pytest.mark.config_extra("[limits]\nrequest_timeout_s = 1\n")
@pytest.mark.parametrize("send", [b"", b"POST /v1/jobs HTTP/1.1\r\nContent-Len",
                                  b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 500\r\n\r\n{\"spec\": "],
                         ids=["nothing", "half-head", "half-body"])
def test_a_half_request_is_closed_after_the_timeout(cluster, send):
    status, r = raw_exchange(cluster.sock, send)
    assert status == 408 and r["error"]["code"] == "RequestTimeout"
    assert cluster.run("squeue").returncode == 0


def test_an_oversized_content_length_is_413_before_the_body(cluster):
    status, r = raw_exchange(cluster.sock, b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n")
    assert status == 413 and r["error"] == {
        "code": "RequestTooLarge", "exit": 1,
        "message": "request body of 1000000000 bytes is over the daemon's limit of 16777216 bytes "
                   "(limits.max_request_bytes)"}


def test_sbatch_of_a_script_over_the_request_cap_is_one_error_line(cluster):
    big = cluster.root / "big.sh"
    big.write_text("#!/bin/sh\n" + ("# padding\n" * (2 << 20)))  # 20 MiB
    r = cluster.run("sbatch", str(big), check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("sbatch: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "limits.max_request_bytes" in r.stderr
    assert cluster.run("squeue", "-h").stdout.strip() == ""
