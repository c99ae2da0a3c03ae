"""HTTP/1.1 + JSON over the daemon's Unix socket: the transport under `batchd/api.py`.
The caller is learnt from SO_PEERCRED once per connection; each request is handed to
`api.handle`, which routes it and encodes the reply."""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import struct
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

from batchd.api import handle
from batchd.errors import BatchdError
from batchd.service import Caller, Service

log = logging.getLogger(__name__)


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
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        status, payload = handle(self.server.service, caller, method, self.path, raw)
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
