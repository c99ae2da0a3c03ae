"""A minimal HTTP/1.1-over-Unix-socket client for the batchd daemon.

Deliberately built on `_socket` and `json` only (no http.client, no urllib, not even
the `socket` wrapper module, which pulls in `enum`): the Slurm-named commands import it
on every call and must start in a few milliseconds.
"""

import _socket
import json
import os
import sys

DEFAULT_SOCKET = "/run/batchd/batchd.sock"
DEV_SOCKET = os.path.join(".batchd", "batchd.sock")


class DaemonError(Exception):
    """The daemon answered with an error envelope."""

    def __init__(self, code, message, exit_code=1, status=400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit_code = exit_code
        self.status = status


class Unreachable(Exception):
    """No daemon answers on the socket."""


def socket_path():
    """Where the daemon listens: $BATCHD_SOCKET, else a dev daemon's socket in the
    current directory or one of its parents, else the system socket."""
    env = os.environ.get("BATCHD_SOCKET")
    if env:
        return env
    d = os.getcwd()
    while True:
        p = os.path.join(d, DEV_SOCKET)
        if os.path.exists(p):
            return p
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    return DEFAULT_SOCKET


def _quote(s):
    out = []
    for ch in str(s):
        if ch.isalnum() or ch in "-_.~,:[]%":
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(out)


def request(method, path, body=None, query=None, timeout=60.0):
    """Send one request; return the decoded JSON reply or raise DaemonError/Unreachable."""
    if query:
        parts = [f"{k}={_quote(v)}" for k, v in query.items() if v is not None and v != ""]
        if parts:
            path = path + "?" + "&".join(parts)
    data = b"" if body is None else json.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: batchd\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    sp = socket_path()
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(sp)
        except OSError as e:
            raise Unreachable(f"cannot reach the batchd daemon at {sp}: {e.strerror or e}") from None
        chunks = []
        try:
            s.sendall(head + data)
            while True:
                b = s.recv(262144)
                if not b:
                    break
                chunks.append(b)
        except OSError as e:  # a daemon dying mid-request, or one that does not answer in time
            why = "did not answer in time" if isinstance(e, TimeoutError) else (e.strerror or str(e))
            raise Unreachable(f"lost the connection to the batchd daemon at {sp}: {why}") from None
    finally:
        s.close()
    raw = b"".join(chunks)
    sep = raw.find(b"\r\n\r\n")
    if sep < 0:
        raise Unreachable(f"the batchd daemon at {sp} closed the connection")
    status = int(raw[9:12])
    payload = json.loads(raw[sep + 4:] or b"{}")
    if status >= 400:
        err = payload.get("error", {})
        raise DaemonError(err.get("code", "Error"), err.get("message", f"HTTP {status}"),
                          err.get("exit", 1), status)
    return payload


def call(prog, method, path, body=None, query=None):
    """`request` for a command named `prog`: a daemon that is not running or an error
    reply becomes one Slurm-style line on stderr and the process exits."""
    try:
        return request(method, path, body, query)
    except Unreachable as e:
        sys.stderr.write(f"{prog}: error: {e}\n")
        sys.exit(1)
    except DaemonError as e:
        sys.stderr.write(f"{prog}: error: {e.message}\n")
        sys.exit(e.exit_code)
