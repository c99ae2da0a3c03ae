"""HTTP/1.1 + JSON over the daemon's Unix socket. This module parses, authenticates
(SO_PEERCRED, once per connection), calls the service, and encodes; nothing else.
Routes and message shapes are those of `batchd/protocol.py`."""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy.exc import DBAPIError

from batchd import accounts, steps
from batchd.errors import BatchdError, InvalidRequest, NotFound
from batchd.explain import explain
from batchd.service import Caller, Service

log = logging.getLogger(__name__)

Handler = Callable[[Service, Caller, dict[str, str], Any], Any]


def _ids(body: Any) -> list[str]:
    if not isinstance(body, dict) or not isinstance(body.get("ids"), list):
        raise InvalidRequest("body needs a list of job ids")
    return [str(i) for i in body["ids"]]


ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "/v1/ping"): lambda s, c, q, b: {"cluster": s.cfg.cluster_name, "version": "0.1.0"},
    ("POST", "/v1/jobs"): lambda s, c, q, b: s.submit(c, (b or {}).get("spec")),
    ("GET", "/v1/jobs"): lambda s, c, q, b: s.list_jobs(q),
    ("POST", "/v1/jobs/signal"): lambda s, c, q, b: s.signal_jobs(c, b or {}),
    ("POST", "/v1/jobs/hold"): lambda s, c, q, b: s.hold(c, _ids(b), user=bool((b or {}).get("user"))),
    ("POST", "/v1/jobs/release"): lambda s, c, q, b: s.hold(c, _ids(b), release=True),
    ("POST", "/v1/jobs/requeue"): lambda s, c, q, b: s.requeue(c, _ids(b), hold=bool((b or {}).get("hold"))),
    ("POST", "/v1/jobs/update"): lambda s, c, q, b: s.update(c, _ids(b), (b or {}).get("changes") or {}),
    ("GET", "/v1/accounting"): lambda s, c, q, b: s.accounting(c, q),
    ("GET", "/v1/nodes"): lambda s, c, q, b: s.nodes(),
    ("GET", "/v1/snapshot"): lambda s, c, q, b: s.snapshot(),
    ("POST", "/v1/steps"): lambda s, c, q, b: steps.create(s, c, b or {}),
    ("GET", "/v1/steps"): lambda s, c, q, b: steps.status(s, q),
    ("POST", "/v1/steps/cancel"): lambda s, c, q, b: steps.cancel(s, c, b or {}),
    ("GET", "/v1/why"): lambda s, c, q, b: explain(s, q.get("job", "")),
    ("GET", "/v1/controller"): lambda s, c, q, b: s.controller_status(),
    ("POST", "/v1/nodes/state"): lambda s, c, q, b: s.set_node_state(c, b or {}),
    ("GET", "/v1/accounts"): lambda s, c, q, b: accounts.to_doc(s.store.list_accounts(),
                                                                s.store.list_associations()),
    ("POST", "/v1/accounts/apply"): lambda s, c, q, b: accounts.apply_doc(s, c, (b or {}).get("doc") or {},
                                                                          bool((b or {}).get("dry_run"))),
    ("POST", "/v1/accounts/modify"): lambda s, c, q, b: accounts.modify(s, c, b or {}),
}


def _extension_routes() -> None:
    """Routes of optional modules (chargeback) that register themselves."""
    try:
        from batchd.accounting.routes import ROUTES as extra
    except ModuleNotFoundError as e:  # only a missing module is optional; its bugs are not
        if e.name not in ("batchd.accounting", "batchd.accounting.routes"):
            raise
        return
    ROUTES.update(extra)


_extension_routes()


def peer_credentials(sock: socket.socket) -> Caller:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Caller(uid=uid, gid=gid, pid=pid)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        log.debug("http " + format, *args)

    def address_string(self) -> str:
        return "unix"

    def _dispatch(self, method: str) -> None:
        caller = self.server.caller_of(self.request)
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        status, payload = 200, None
        try:
            route = ROUTES.get((method, parts.path))
            if route is None:
                raise NotFound(f"no such endpoint: {method} {parts.path}")
            length = int(self.headers.get("Content-Length") or 0)
            body = None
            if length:
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    raise InvalidRequest("request body is not JSON") from None
            payload = route(self.server.service, caller, query, body)
        except BatchdError as e:
            status, payload = e.status, e.envelope()
        except DBAPIError as e:
            # the database is unreachable (or restarting): say so; nothing was changed
            log.error("database error method=%s path=%s error=%s", method, parts.path, str(e).splitlines()[0])
            status = 503
            payload = {"error": {"code": "DatabaseUnavailable", "exit": 1,
                                 "message": "the batchd database is unreachable; nothing was changed, try again"}}
        except Exception:  # the top of a request: log it, answer 500, keep serving
            log.exception("request failed method=%s path=%s uid=%s", method, parts.path, caller.uid)
            status = 500
            payload = {"error": {"code": "Internal", "message": "internal error in batchd (see its log)",
                                 "exit": 1}}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: str, service: Service):
        self.service = service
        super().__init__(path, _Handler)

    def caller_of(self, sock: socket.socket) -> Caller:
        return peer_credentials(sock)


class ApiServer:
    """The socket server in a background thread."""

    def __init__(self, path: str, service: Service):
        self.path = path
        if os.path.exists(path):
            _remove_stale(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.server = _Server(path, service)
        # every local user may connect; who they are comes from SO_PEERCRED
        os.chmod(path, 0o666)
        self.thread = threading.Thread(target=self.server.serve_forever, name="api", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _remove_stale(path: str) -> None:
    """Remove a socket file left by a dead daemon; refuse if a live daemon answers."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        os.unlink(path)
        return
    finally:
        s.close()
    raise BatchdError(f"another batchd daemon is already listening on {path}")
