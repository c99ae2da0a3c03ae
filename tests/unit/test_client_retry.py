"""batchd.cli.client against a daemon that is restarting, whose backlog is full, or that
refuses a connection over its caps: the client retries for a short while (RETRY_S), then
says what happened; a refusal that arrives before the request was read is still read."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading

import pytest

from batchd.cli import client
from batchd.server.httpserver import ApiServer, Limits


def ping_handler(service, caller, method, target, raw):
    return 200, {"pong": True, "bytes": len(raw)}


@pytest.fixture
def sock_path(monkeypatch):
    d = tempfile.mkdtemp(prefix="batchd-client-")
    path = os.path.join(d, "api.sock")
    monkeypatch.setenv("BATCHD_SOCKET", path)
    yield path
    shutil.rmtree(d, ignore_errors=True)


def dead_socket(path: str) -> None:
    """A socket file nobody listens on (a daemon killed with -9): connect is refused."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()


def test_a_refused_connect_is_retried_until_the_daemon_is_back(sock_path):
    dead_socket(sock_path)
    servers: list[ApiServer] = []

    def come_back():
        srv = ApiServer(sock_path, None, Limits(), handler=ping_handler)  # removes the stale file
        srv.start()
        servers.append(srv)

    t = threading.Timer(0.5, come_back)
    t.start()
    try:
        assert client.request("GET", "/v1/ping")["pong"] is True  # the old client: Unreachable at once
    finally:
        t.join()
        for srv in servers:
            srv.stop()


def test_a_refused_connect_gives_up_after_retry_s(sock_path, monkeypatch):
    dead_socket(sock_path)
    monkeypatch.setattr(client, "RETRY_S", 0.3)
    with pytest.raises(client.Unreachable, match="cannot reach the batchd daemon at .*: Connection refused"):
        client.request("GET", "/v1/ping")


def test_no_socket_file_is_not_retried(sock_path, monkeypatch):
    monkeypatch.setattr(client, "RETRY_S", 60.0)  # would hang the test if it were retried
    with pytest.raises(client.Unreachable, match="No such file"):
        client.request("GET", "/v1/ping")


def test_a_full_backlog_is_retried(sock_path):
    """A listener that does not accept for a while, its backlog full: connect says EAGAIN."""
    lst = socket.socket(socket.AF_UNIX)
    lst.bind(sock_path)
    lst.listen(0)
    fillers = []
    while True:  # fill the backlog
        f = socket.socket(socket.AF_UNIX)
        f.setblocking(False)
        try:
            f.connect(sock_path)
        except BlockingIOError:
            f.close()
            break
        fillers.append(f)

    def serve_late():
        for f in fillers:
            f.close()
        lst.settimeout(10)  # a client that never comes must not hang the test
        while True:
            try:
                c, _ = lst.accept()
            except OSError:
                return
            data = c.recv(65536)
            if not data:  # a closed filler
                c.close()
                continue
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\": 1} ")
            c.close()
            return

    t = threading.Timer(0.5, serve_late)
    t.daemon = True
    t.start()
    try:
        assert client.request("GET", "/v1/ping") == {"ok": 1}
    finally:
        t.join(10)
        lst.close()


def test_too_many_connections_is_retried_until_a_slot_frees(sock_path):
    srv = ApiServer(sock_path, None, Limits(max_connections_per_user=1), handler=ping_handler)
    srv.start()
    try:
        hog = socket.socket(socket.AF_UNIX)
        hog.connect(sock_path)
        t = threading.Timer(0.5, hog.close)
        t.start()
        assert client.request("GET", "/v1/ping")["pong"] is True  # the old client: DaemonError at once
        t.join()
    finally:
        srv.stop()


def test_too_many_connections_after_retry_s_is_the_daemons_message(sock_path, monkeypatch):
    monkeypatch.setattr(client, "RETRY_S", 0.3)
    srv = ApiServer(sock_path, None, Limits(max_connections_per_user=1), handler=ping_handler)
    srv.start()
    hog = socket.socket(socket.AF_UNIX)
    hog.connect(sock_path)
    try:
        with pytest.raises(client.DaemonError) as e:
            client.request("GET", "/v1/ping")
        assert e.value.status == 503 and e.value.code == "TooManyConnections"
        assert "limits.max_connections_per_user" in e.value.message
    finally:
        hog.close()
        srv.stop()


def test_a_body_over_the_cap_gets_the_413_even_though_the_daemon_stops_reading(sock_path):
    srv = ApiServer(sock_path, None, Limits(max_request_bytes=1 << 20), handler=ping_handler)
    srv.start()
    try:
        with pytest.raises(client.DaemonError) as e:
            client.request("POST", "/v1/jobs", {"spec": {"script": "x" * (8 << 20)}})
        assert e.value.status == 413 and e.value.code == "RequestTooLarge"
        assert client.request("POST", "/v1/jobs", {"spec": {"script": "x" * 1000}})["pong"] is True
    finally:
        srv.stop()
