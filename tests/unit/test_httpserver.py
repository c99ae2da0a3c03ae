"""The API transport (batchd/server/httpserver.py) on a real Unix socket, with a recording
handler instead of the service: framing, the caller from SO_PEERCRED, read deadlines,
size caps, connection caps per uid and in total, and workers that idle clients never hold."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from batchd.config import parse_config
from batchd.errors import BatchdError
from batchd.server.httpserver import ApiServer, Limits
from batchd.server.httpwire import FairQueue

NODE = [{"name": "n1", "cpus": 1, "memory_mb": 1}]


def echo(service, caller, method, target, raw):
    if target == "/boom":
        raise RuntimeError("a bug")
    if target == "/big":
        return 200, {"data": "x" * (8 << 20)}
    return 200, {"uid": caller.uid, "pid": caller.pid, "method": method, "target": target,
                 "body": raw.decode()}


@pytest.fixture
def serve():
    started: list[tuple[ApiServer, str]] = []

    def start(handler=echo, **limits) -> str:
        d = tempfile.mkdtemp(prefix="batchd-http-")
        os.chmod(d, 0o777)  # other users' clients too
        path = os.path.join(d, "api.sock")
        srv = ApiServer(path, None, Limits(**limits), handler=handler)
        srv.start()
        started.append((srv, d))
        return path

    yield start
    for srv, d in started:
        srv.stop()
        shutil.rmtree(d, ignore_errors=True)


def connect(path: str, timeout: float = 15) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def read_reply(s: socket.socket) -> tuple[int, dict]:
    """Read to EOF (the server closes every connection): (status, JSON body)."""
    raw = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:  # after the reply of a refusal: what came is what counts
            break
        if not b:
            break
        raw += b
    s.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 ") and b"Connection: close" in head, raw[:200]
    return int(head[9:12]), json.loads(body)


def exchange(path: str, data: bytes) -> tuple[int, dict]:
    """One request, as batchd's client sends it: a refusal (503) may be answered and the
    connection closed before the request is all sent (EPIPE then); its reply is read."""
    s = connect(path)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return read_reply(s)


def get(target: str = "/v1/ping") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: batchd\r\n\r\n".encode()


def other_users_python() -> str:
    """An interpreter another uid can run (a venv under /root may not be reachable)."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def is_closed(s: socket.socket) -> bool:
    try:
        return s.recv(10) == b""
    except ConnectionResetError:  # closed before it was accepted
        return True


def until(cond, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_request_reaches_the_handler_with_the_callers_credentials(serve):
    path = serve()
    body = json.dumps({"spec": {"script": "y" * 300_000}}).encode()
    s = connect(path)
    head = f"POST /v1/jobs?x=1 HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    s.sendall(head + body[:1000])
    s.sendall(body[1000:])  # the body in pieces
    status, r = read_reply(s)
    assert status == 200
    assert (r["uid"], r["pid"], r["method"], r["target"]) == (os.getuid(), os.getpid(), "POST", "/v1/jobs?x=1")
    assert r["body"].encode() == body


def test_a_handler_bug_is_a_500_envelope_and_the_server_goes_on(serve):
    path = serve()
    status, r = exchange(path, get("/boom"))
    assert status == 500 and r["error"]["code"] == "Internal"
    assert exchange(path, get())[0] == 200


@pytest.mark.parametrize("send", [b"", b"GET /v1/ping HTTP/1.1\r\nHost: bat",
                                  b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"spec\""],
                         ids=["nothing", "half-head", "half-body"])
def test_an_incomplete_request_is_answered_408_and_closed_after_the_timeout(serve, send):
    path = serve(request_timeout_s=0.3)
    s = connect(path)
    s.sendall(send)
    status, r = read_reply(s)  # the old server waited forever: a socket timeout here
    assert status == 408 and r["error"]["code"] == "RequestTimeout"
    assert "limits.request_timeout_s" in r["error"]["message"]


@pytest.mark.parametrize("head,status", [
    ("POST /v1/jobs HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n", 413),
    ("POST /v1/jobs HTTP/1.1\r\nContent-Length: 12x\r\n\r\n", 400),
    ("POST /v1/jobs HTTP/1.1\r\nContent-Length: \u00b2\r\n\r\n", 400),
    ("POST /v1/jobs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
    ("NOT-HTTP\r\n\r\n", 400),
    ("GET /v1/ping HTTP/1.1\r\nX: " + "a" * 70_000 + "\r\n\r\n", 431),
    ("GET /v1/ping HTTP/1.1\r\nX: " + "a" * 70_000, 431),
], ids=["content-length-over-cap", "bad-length", "unicode-digit", "chunked", "request-line", "big-head",
        "big-unfinished-head"])
def test_requests_the_transport_refuses_get_an_envelope_before_any_body(serve, head, status):
    path = serve()
    s, r = exchange(path, head.encode("utf-8"))
    assert s == status and set(r["error"]) == {"code", "message", "exit"} and r["error"]["exit"] == 1
    if status == 413:
        assert r["error"]["code"] == "RequestTooLarge" and "limits.max_request_bytes" in r["error"]["message"]


def test_idle_connections_hold_no_worker(serve):
    path = serve(api_threads=1, max_connections_per_user=100)
    idle = [connect(path) for _ in range(40)]
    for s in idle[:20]:
        s.sendall(b"GET /v1/ping HTTP/1.1\r\n")  # half a head
    assert exchange(path, get())[0] == 200
    for s in idle:
        s.close()


def test_a_client_that_does_not_read_its_reply_holds_no_worker(serve):
    path = serve(api_threads=1)
    stalled = connect(path)
    stalled.sendall(get("/big"))  # 8 MB reply, never read
    assert exchange(path, get())[0] == 200
    stalled.close()


def test_per_user_cap_refuses_quickly_and_frees_when_connections_close(serve):
    path = serve(max_connections_per_user=3)
    idle = [connect(path) for _ in range(3)]
    until(lambda: exchange(path, get())[0] == 503)
    status, r = exchange(path, get())
    assert status == 503 and r["error"]["code"] == "TooManyConnections"
    assert "limits.max_connections_per_user" in r["error"]["message"]
    idle.pop().close()
    until(lambda: exchange(path, get())[0] == 200)
    for s in idle:
        s.close()


def test_total_cap(serve):
    path = serve(max_connections=4, max_connections_per_user=10)
    idle = [connect(path) for _ in range(4)]
    status, r = until(lambda: (x := exchange(path, get()))[0] == 503 and x)
    assert r["error"]["code"] == "TooManyConnections" and "limits.max_connections)" in r["error"]["message"]
    for s in idle:
        s.close()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_one_users_connections_at_the_cap_do_not_refuse_another_user(serve):
    path = serve(max_connections_per_user=3)
    idle = [connect(path) for _ in range(3)]
    until(lambda: exchange(path, get())[0] == 503)
    code = ("import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(15); s.connect(sys.argv[1]);"
            "s.sendall(b'GET /v1/ping HTTP/1.1\\r\\n\\r\\n'); print(s.recv(100).split(b' ')[1].decode())")
    out = subprocess.run([other_users_python(), "-c", code, path], user=65534, group=65534, capture_output=True,
                         text=True, timeout=30)
    assert out.stdout.strip() == "200", out.stderr
    for s in idle:
        s.close()


def test_descriptors_above_1024(serve):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2500:
        pytest.skip("RLIMIT_NOFILE hard limit below 2500")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2500), hard))
    filler = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        path = serve(max_connections_per_user=200)
        idle = [connect(path) for _ in range(100)]
        assert idle[-1].fileno() > 1024
        assert exchange(path, get())[0] == 200
        for s in idle:
            s.close()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_requests_run_on_at_most_api_threads_workers(serve):
    gate, lock = threading.Event(), threading.Lock()
    active, peak = [0], [0]

    def slow(service, caller, method, target, raw):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        gate.wait(30)
        with lock:
            active[0] -= 1
        return 200, {}

    path = serve(handler=slow, api_threads=2)
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(exchange(path, get())[0])) for _ in range(6)]
    for t in threads:
        t.start()
    until(lambda: active[0] == 2)
    gate.set()
    for t in threads:
        t.join(30)
    assert results == [200] * 6 and peak[0] == 2


def test_waiting_requests_are_taken_round_robin_per_uid():
    q = FairQueue()
    for uid, item in [(1, "a1"), (1, "a2"), (1, "a3"), (2, "b1"), (3, "c1"), (2, "b2")]:
        q.put(uid, item)  # type: ignore[arg-type]
    assert [q.get() for _ in range(6)] == ["a1", "b1", "c1", "a2", "b2", "a3"]


def test_stop_closes_connections_and_removes_the_socket(serve):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "api.sock")
    srv = ApiServer(path, None, Limits(), handler=echo)
    srv.start()
    idle = connect(path)
    srv.stop()
    assert is_closed(idle) and not os.path.exists(path)
    shutil.rmtree(d)


def test_a_stale_socket_is_replaced_and_a_live_one_refused(serve):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "api.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # a socket file nobody listens on: a dead daemon's
    dead.close()
    srv = ApiServer(path, None, Limits(), handler=echo)
    srv.start()
    assert exchange(path, get())[0] == 200
    with pytest.raises(BatchdError, match="already listening"):
        ApiServer(path, None, Limits(), handler=echo)
    srv.stop()
    shutil.rmtree(d)


def test_limits_come_from_the_config():
    cfg = parse_config({"node": NODE, "limits": {"max_connections": 9, "request_timeout_s": 1.5,
                                                 "max_connections_per_user": 2, "api_threads": 3,
                                                 "max_request_bytes": 2048}})
    lim = Limits.of(cfg.limits)
    assert (lim.max_connections, lim.max_connections_per_user, lim.request_timeout_s, lim.api_threads,
            lim.max_request_bytes) == (9, 2, 1.5, 3, 2048)
    assert Limits.of(parse_config({"node": NODE}).limits) == Limits()
    assert Limits().backlog >= 1024


@pytest.mark.parametrize("key,value", [("max_connections", 0), ("api_threads", 1.5),
                                       ("request_timeout_s", "5"), ("max_connections_per_user", True),
                                       ("max_sockets", 3)])
def test_bad_limits_are_refused_naming_the_key(key, value):
    with pytest.raises(BatchdError, match=f"limits.{key}"):
        parse_config({"node": NODE, "limits": {key: value}})


def _reply_on(s: socket.socket, buf: bytearray) -> tuple[bytes, dict]:
    """One whole reply read from a connection that stays open: (head, JSON body)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, "closed before a reply"
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(rest) < length:
        rest += s.recv(65536)
    buf[:] = rest[length:]
    return head, json.loads(rest[:length])


def keep_alive(target: str, body: bytes = b"") -> bytes:
    return (f"POST {target} HTTP/1.1\r\nHost: batchd\r\nContent-Length: {len(body)}\r\n"
            f"Connection: keep-alive\r\n\r\n").encode() + body


def test_keep_alive_is_opt_in_and_serves_requests_in_turn_then_closes_when_idle(serve):
    path = serve(request_timeout_s=0.5)
    s = connect(path)
    buf = bytearray()
    s.sendall(keep_alive("/one", b"1"))
    head, body = _reply_on(s, buf)
    assert b"Connection: keep-alive" in head and body["target"] == "/one" and body["body"] == "1"
    # two requests in one send: both answered, in order
    s.sendall(keep_alive("/two", b"2") + keep_alive("/three", b"33"))
    assert _reply_on(s, buf)[1]["body"] == "2"
    assert _reply_on(s, buf)[1]["body"] == "33"
    # a request without keep-alive gets `Connection: close` and the connection ends
    s.sendall(get("/last"))
    head, body = _reply_on(s, buf)
    assert b"Connection: close" in head and body["target"] == "/last" and is_closed(s)
    # an idle kept-alive connection is closed after request_timeout_s, without a reply
    s2 = connect(path)
    s2.sendall(keep_alive("/x"))
    _reply_on(s2, bytearray())
    t0 = time.monotonic()
    assert s2.recv(100) == b"" and time.monotonic() - t0 < 5


def test_a_kept_alive_connection_counts_against_the_per_user_cap(serve):
    path = serve(max_connections_per_user=1, request_timeout_s=2)
    s = connect(path)
    s.sendall(keep_alive("/a"))
    _reply_on(s, bytearray())
    status, body = until(lambda: _try(path))
    assert status == 503 and body["error"]["code"] == "TooManyConnections"
    s.close()
    until(lambda: exchange(path, get())[0] == 200)


def _try(path: str) -> tuple[int, dict] | None:
    """exchange(), or None when the refusal closed the socket before the request was sent."""
    try:
        return exchange(path, get())
    except OSError:
        return None
