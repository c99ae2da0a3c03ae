"""The daemon's TCP listener (batchd.server.weblistener) on its own: TLS when configured,
a request that does not arrive in time is dropped, connections past the cap get 503,
unknown paths 404, a failing route 500 without the listener's end, and a port already
taken leaves the daemon without it (no exception)."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import time

import pytest

from batchd.server.weblistener import MAX_CONNECTIONS, WebListener, WebReply


def _routes():
    def ok(_req):
        return WebReply(200, b"fine\n", "text/plain")

    def broken(_req):
        raise RuntimeError("boom")

    def echo(req):
        return WebReply(201, f"{req.method} {req.path} {req.query} {len(req.body)}".encode(), "text/plain",
                        {"X-Seen": "1"})

    return {"/metrics": ok, "/broken": broken, "/api/": echo}


@pytest.fixture
def listener():
    made = []

    def start(**http):
        http.pop("max_body", None)
        w = WebListener({"listen": "127.0.0.1:0", "tls_cert": None, "tls_key": None, **http}, _routes(),
                        timeout_s=1.0)
        assert w.start()
        made.append(w)
        return w

    yield start
    for w in made:
        w.stop()


def _get(port: int, path: str, context=None) -> tuple[int, bytes]:
    conn = (http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5) if context
            else http.client.HTTPConnection("127.0.0.1", port, timeout=5))
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, r.read()


def test_routes_unknown_paths_and_a_failing_route(listener):
    w = listener()
    port = w.address[1]
    assert _get(port, "/metrics") == (200, b"fine\n")
    assert _get(port, "/nope")[0] == 404
    assert _get(port, "/broken")[0] == 500
    assert _get(port, "/metrics") == (200, b"fine\n")  # still serving


def test_a_request_that_does_not_arrive_in_time_is_dropped(listener):
    w = listener()
    s = socket.create_connection(("127.0.0.1", w.address[1]))
    s.sendall(b"GET /metrics HTTP/1.1\r\n")  # and nothing more
    s.settimeout(5)
    t0 = time.monotonic()
    data = s.recv(1024)
    assert time.monotonic() - t0 < 4 and not data.startswith(b"HTTP/1.1 200")
    s.close()


def test_connections_past_the_cap_are_refused_with_503(listener):
    w = listener()
    held = [socket.create_connection(("127.0.0.1", w.address[1])) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", w.address[1]))
        extra.settimeout(5)
        assert extra.recv(1024).startswith(b"HTTP/1.1 503")
        extra.close()
    finally:
        for s in held:
            s.close()
    time.sleep(1.5)  # the held ones time out
    assert _get(w.address[1], "/metrics")[0] == 200


def test_tls_when_configured(listener, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"no openssl to make a certificate: {r.stderr[-200:]!r}")
    w = listener(tls_cert=str(cert), tls_key=str(key))
    ctx = ssl.create_default_context(cafile=str(cert))
    assert _get(w.address[1], "/metrics", context=ctx) == (200, b"fine\n")
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        _get(w.address[1], "/metrics")  # plain HTTP to a TLS port


def test_a_port_already_taken_leaves_no_listener_and_no_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        w = WebListener({"listen": f"127.0.0.1:{port}", "tls_cert": None, "tls_key": None}, _routes())
        assert w.start() is False
        w.stop()
    assert WebListener({"listen": "", "tls_cert": None, "tls_key": None}, _routes()).start() is False


def test_oversized_request_and_header_lines_are_refused(listener):
    w = listener()
    for raw, status in ((b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"414"),
                        (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", b"431")):
        s = socket.create_connection(("127.0.0.1", w.address[1]))
        s.settimeout(5)
        s.sendall(raw)
        assert s.recv(64).startswith(b"HTTP/1.1 " + status)
        s.close()


def _send(port: int, method: str, path: str, body: bytes = b"", headers=None) -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request(method, path, body=body or None, headers=headers or {})
    r = conn.getresponse()
    return r.status, r.read(), dict(r.getheaders())


def test_a_prefix_route_gets_method_path_query_and_body(listener):
    port = listener().address[1]
    status, body, headers = _send(port, "POST", "/api/job/submit?x=1", b'{"a": 1}',
                                  {"Content-Type": "application/json"})
    assert (status, body, headers["X-Seen"]) == (201, b"POST /api/job/submit x=1 8", "1")
    assert _send(port, "DELETE", "/api/job/7")[1] == b"DELETE /api/job/7  0"
    assert _send(port, "GET", "/api/a%20b")[1] == b"GET /api/a b  0"  # the path percent-decoded
    assert _send(port, "PUT", "/api/x")[0] == 405
    assert _send(port, "GET", "/apix")[0] == 404  # a prefix matches under its slash only


def test_a_body_over_the_limit_is_refused_before_it_is_read(listener):
    w = listener(max_body=None)
    port = w.address[1]
    w.server.max_body = 100
    assert _send(port, "POST", "/api/x", b"x" * 100)[0] == 201
    assert _send(port, "POST", "/api/x", b"x" * 101)[0] == 413
    assert _send(port, "GET", "/metrics", b"x")[0] == 413  # a GET takes no body
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(5)
    s.sendall(b"POST /api/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")
    assert s.recv(64).startswith(b"HTTP/1.1 400")
    s.close()
