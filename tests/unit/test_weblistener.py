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

from batchd.server.weblistener import MAX_CONNECTIONS, WebListener


def _routes():
    def ok(_accept):
        return 200, b"fine\n", "text/plain"

    def broken(_accept):
        raise RuntimeError("boom")

    return {"/metrics": ok, "/broken": broken}


@pytest.fixture
def listener():
    made = []

    def start(**http):
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
