"""The daemon's TCP listener (`[http] listen`, default 127.0.0.1:6820): `GET /metrics` now
(batchd.server.metrics); the REST API and the dashboard of issue 20 are to follow on it.

The standard library's `http.server` (ThreadingHTTPServer): no dependency for a listener
that serves a scrape every few seconds, and the commands never import it. Guarded as the
Unix socket is: a request must arrive whole within `request_timeout_s` (`[limits]`), a
request line or header line over 64 KiB (414, 431) or more than 100 headers are refused
by `http.server` itself, a GET with a body is refused (413), and at most
MAX_CONNECTIONS connections are served at once (one more is refused with 503). TLS when
`tls_cert` and `tls_key` are configured (required for an address beyond the loopback).
A listener that cannot bind (the port taken) is logged and the daemon goes on without it.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64

#: a route: (Accept header) -> (status, body, content type)
Route = Callable[[str | None], tuple[int, bytes, str]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # listen()'s backlog: a burst of scrapers waits in the kernel

    def __init__(self, addr: tuple[str, int], handler: type, routes: dict[str, Route], timeout_s: float,
                 family: int):
        self.address_family = family
        self.routes = routes
        self.request_timeout_s = timeout_s
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(addr, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "batchd"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.request_timeout_s)  # the whole request, then the reply

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("http %s %s", self.address_string(), format % args)

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        if int(self.headers.get("Content-Length") or 0) > 0:
            self._reply(413, b"GET takes no body\n", "text/plain")
            return
        route = self.server.routes.get(path)
        if route is None:
            self._reply(404, b"no such endpoint\n", "text/plain")
            return
        try:
            status, body, ctype = route(self.headers.get("Accept"))
        except Exception:  # a failed scrape is a 500, logged, never the listener's end
            log.exception("http route failed path=%s", path)
            status, body, ctype = 500, b"internal error\n", "text/plain"
        self._reply(status, body, ctype)

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802
        self._reply(405, b"method not allowed\n", "text/plain")


class WebListener:
    """The listener on its own thread; `address` is what it bound (port 0 picks one)."""

    def __init__(self, http: dict[str, Any], routes: dict[str, Route], timeout_s: float = 10.0):
        self.http = http
        self.routes = routes
        self.timeout_s = timeout_s
        self.server: _Server | None = None
        self.address: tuple[str, int] | None = None

    def start(self) -> bool:
        listen = self.http.get("listen") or ""
        if not listen:
            return False
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            server = _Server((host, int(port)), _Handler, self.routes, self.timeout_s, family)
            if self.http.get("tls_cert"):
                ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                ctx.load_cert_chain(self.http["tls_cert"], self.http["tls_key"])
                server.socket = ctx.wrap_socket(server.socket, server_side=True)
        except (OSError, ssl.SSLError) as e:
            log.error("http listener not started listen=%s error=%s", listen, e)
            return False
        self.server = server
        bound_host, bound_port = server.socket.getsockname()[:2]
        self.address = (str(bound_host), int(bound_port))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="http",
                         daemon=True).start()
        log.info("http listener started listen=%s:%s tls=%s", bound_host, bound_port, bool(self.http.get("tls_cert")))
        return True

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
