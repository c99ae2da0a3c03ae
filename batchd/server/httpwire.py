"""The pieces of the daemon's socket transport (batchd/server/httpserver.py) that do no I/O: the
limits a connection lives under, the request head parser, the reply encoder and the
queue that hands complete requests to the workers, uid by uid.
Every reply this module makes is a JSON error envelope of `batchd/protocol.py`."""

from __future__ import annotations

import socket
import struct
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from batchd.server import viewmemo
from batchd.server.service import Caller

HEAD_MAX_BYTES = 64 * 1024
REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout",
           409: "Conflict", 411: "Length Required", 413: "Content Too Large",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Limits:
    """What one connection and one user may hold (`[limits]` in batchd.toml)."""
    max_connections: int = 512           # open connections in all
    max_connections_per_user: int = 64   # open connections of one uid
    request_timeout_s: float = 5.0       # accept -> whole request received; also reply progress
    max_request_bytes: int = 16 << 20    # Content-Length cap
    api_threads: int = 16                # requests handled at once
    backlog: int = max(1024, socket.SOMAXCONN)  # the kernel clamps it to net.core.somaxconn

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Limits:
        """The limits among `values` (a config's `limits` dict; other keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def peer_credentials(sock: socket.socket) -> Caller:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Caller(uid=uid, gid=gid, pid=pid)


def encode_reply(status: int, payload: Any, keep_alive: bool = False) -> bytes:
    """The reply; it says `Connection: keep-alive` only when the server keeps the connection."""
    body = viewmemo.dumps(payload).encode()  # json.dumps, with views encoded once (batchd.server.viewmemo)
    head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
    return head.encode() + body


def error_reply(status: int, code: str, message: str) -> bytes:
    return encode_reply(status, {"error": {"code": code, "message": message, "exit": 1}})


class Refused(Exception):
    """A request the transport answers itself, with this status and envelope."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.reply = error_reply(status, code, message)


def parse_head(head: bytes, max_body: int) -> tuple[str, str, int, bool]:
    """(method, target, Content-Length, keep-alive asked) of a request head (without its
    blank line); raises Refused for what the daemon will not read. Keep-alive is opt-in:
    only a request that says `Connection: keep-alive` is asked for it."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        raise Refused(400, "InvalidRequest", f"not an HTTP/1.x request line: {lines[0][:80]!r}")
    length, keep = 0, False
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise Refused(400, "InvalidRequest", f"malformed header line: {line[:80]!r}")
        name, value = name.strip().lower(), value.strip()
        if name == "transfer-encoding":
            raise Refused(411, "InvalidRequest", "chunked bodies are not accepted; send Content-Length")
        if name == "content-length":
            if not (value.isascii() and value.isdigit()):
                raise Refused(400, "InvalidRequest", f"Content-Length is not a byte count: {value[:40]!r}")
            length = int(value)
        elif name == "connection":
            keep = "keep-alive" in value.lower()
    if length > max_body:
        raise Refused(413, "RequestTooLarge", f"request body of {length} bytes is over the daemon's limit of "
                                               f"{max_body} bytes (limits.max_request_bytes)")
    return parts[0], parts[1], length, keep


class FairQueue:
    """Requests waiting for a worker: one FIFO per uid, uids served round-robin (thread-safe;
    `get` blocks until there is one)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._by_uid: dict[int, deque[Any]] = {}
        self._turns: deque[int] = deque()

    def put(self, uid: int, item: Any) -> None:
        with self._cv:
            q = self._by_uid.get(uid)
            if q is None:
                q = self._by_uid[uid] = deque()
                self._turns.append(uid)
            q.append(item)
            self._cv.notify()

    def get(self) -> Any:
        with self._cv:
            while not self._turns:
                self._cv.wait()
            uid = self._turns.popleft()
            q = self._by_uid[uid]
            item = q.popleft()
            if q:
                self._turns.append(uid)
            else:
                del self._by_uid[uid]
            return item
