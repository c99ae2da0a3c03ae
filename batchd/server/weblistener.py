"""The daemon's TCP listener (`[http] listen`, default 127.0.0.1:6820): `GET /metrics`
(batchd.server.metrics), the slurmrestd API under `/slurm/` and `/slurmdb/`
(batchd.server.slurmrest) and the dashboard under `/ui/` (batchd.server.dashboard).

The standard library's `http.server` (ThreadingHTTPServer): no dependency for a listener
that serves a scrape every few seconds, and the commands never import it. Guarded as the
Unix socket is: a request must arrive whole within `request_timeout_s` (`[limits]`), a
request line or header line over 64 KiB (414, 431) or more than 100 headers are refused
by `http.server` itself, a body over `max_request_bytes` (`[limits]`, as on the socket) is
refused (413) before it is read, and at most MAX_CONNECTIONS connections are served at
once (one more is refused with 503). TLS when
`tls_cert` and `tls_key` are configured (required for an address beyond the loopback).
A listener that cannot bind (the port taken) is logged and the daemon goes on without it.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64

@dataclass(frozen=True)
class WebRequest:
    method: str          # GET, POST, DELETE (HEAD is served as GET)
    path: str            # percent-decoded, without the query
    query: str           # the raw query string ("" when none)
    headers: Any         # http.client.HTTPMessage: case-insensitive .get()
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


@dataclass
class WebReply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


#: a route: the request -> its reply. A key of the routes ending in "/" is a prefix: it
#: takes every path under it that no exact key names.
Route = Callable[[WebRequest], WebReply]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # listen()'s backlog: a burst of scrapers waits in the kernel

    def __init__(self, addr: tuple[str, int], handler: type, routes: dict[str, Route], timeout_s: float,
                 family: int, max_body: int):
        self.address_family = family
        self.routes = routes
        self.prefixes = sorted((k for k in routes if k.endswith("/")), key=len, reverse=True)
        self.request_timeout_s = timeout_s
        self.max_body = max_body
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

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke or timed out mid-request: logged, not printed to stderr
        (socketserver's default) as if the daemon had failed."""
        log.debug("http connection error client=%s", client_address, exc_info=True)

    def route(self, path: str) -> Route | None:
        exact = self.routes.get(path)
        if exact is not None:
            return exact
        return next((self.routes[p] for p in self.prefixes if path.startswith(p)), None)

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

    def _reply(self, reply: WebReply) -> None:
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)
        self.close_connection = True

    def _serve(self) -> None:
        target = self.path
        path, _, query = target.partition("?")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or self.headers.get("Transfer-Encoding"):
            self._reply(WebReply(400, b"a body needs a Content-Length (no chunked encoding)\n", "text/plain"))
            return
        if length > self.server.max_body:
            self._reply(WebReply(413, b"request body too large\n", "text/plain"))
            return
        if length and self.command in ("GET", "HEAD"):
            self._reply(WebReply(413, b"GET takes no body\n", "text/plain"))
            return
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            return  # the client went away (or timed out) mid-body: nothing to answer
        try:
            path = unquote(path, errors="strict")
        except UnicodeDecodeError:
            self._reply(WebReply(400, b"the path is not UTF-8\n", "text/plain"))
            return
        route = self.server.route(path)
        if route is None:
            self._reply(WebReply(404, b"no such endpoint\n", "text/plain"))
            return
        method = "GET" if self.command == "HEAD" else self.command
        try:
            reply = route(WebRequest(method, path, query, self.headers, body))
        except Exception:  # a failed request is a 500, logged, never the listener's end
            log.exception("http route failed method=%s path=%s", method, path)
            reply = WebReply(500, b"internal error\n", "text/plain")
        self._reply(reply)

    do_GET = _serve
    do_HEAD = _serve
    do_POST = _serve
    do_DELETE = _serve

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        self._reply(WebReply(405, b"method not allowed\n", "text/plain"))

    do_PATCH = do_PUT


class WebListener:
    """The listener on its own thread; `address` is what it bound (port 0 picks one)."""

    def __init__(self, http: dict[str, Any], routes: dict[str, Route], timeout_s: float = 10.0,
                 max_body: int = 16 << 20):
        self.http = http
        self.routes = routes
        self.timeout_s = timeout_s
        self.max_body = max_body
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
            server = _Server((host, int(port)), _Handler, self.routes, self.timeout_s, family, self.max_body)
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
