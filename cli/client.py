"""A minimal HTTP/1.1-over-Unix-socket client for the batchd daemon.

Deliberately built on `_socket`, `time` and `_json` (through `batchd.cli.wirejson`) only
(no http.client, no urllib, not even the `socket` wrapper module, which pulls in `enum`,
nor the `json` package, which pulls in `re`): the Slurm-named commands import it on every
call and must start in a few milliseconds.
"""

import _socket
import os
import sys
import time

from batchd.cli import wirejson

DEFAULT_SOCKET = "/run/batchd/batchd.sock"
DEV_SOCKET = os.path.join(".batchd", "batchd.sock")
RETRY_S = 5.0  # how long a refused connect or a TooManyConnections reply is retried


class DaemonError(Exception):
    """The daemon answered with an error envelope."""

    def __init__(self, code, message, exit_code=1, status=400, detail=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit_code = exit_code
        self.status = status
        self.detail = detail  # batchd's explanation after Slurm's message, or None


class Unreachable(Exception):
    """No daemon answers on the socket. `sent`: whether the request may have reached the
    daemon (False when the connect itself failed, so nothing can have been handled)."""

    def __init__(self, message, sent=True):
        super().__init__(message)
        self.sent = sent


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
        if (ch.isascii() and ch.isalnum()) or ch in "-_.~,:[]%":
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(out)


def _exchange(sp, msg, timeout):
    """Send `msg` on a new connection to `sp`; return the whole raw reply. A failed connect
    raises its OSError as is (the caller decides whether to retry); a lost or silent
    connection afterwards raises Unreachable."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sp)
        chunks = []
        try:
            try:
                s.sendall(msg)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon answered and closed before reading it all (a refusal): read that
            while True:
                try:
                    b = s.recv(262144)
                except ConnectionResetError:  # after the reply of a refusal: what came is what counts
                    break
                if not b:
                    break
                chunks.append(b)
        except OSError as e:  # a daemon dying mid-request, or one that does not answer in time
            why = "did not answer in time" if isinstance(e, TimeoutError) else (e.strerror or str(e))
            raise Unreachable(f"lost the connection to the batchd daemon at {sp}: {why}") from None
    finally:
        s.close()
    return b"".join(chunks)


def request(method, path, body=None, query=None, timeout=60.0):
    """Send one request; return the decoded JSON reply or raise DaemonError/Unreachable.

    A connect that is refused or finds the backlog full (a daemon restarting, a burst) and
    a daemon's 503 TooManyConnections are retried with a growing pause for up to RETRY_S
    seconds; nothing of the request was handled then, so a retry never doubles it."""
    if query:
        parts = [f"{k}={_quote(v)}" for k, v in query.items() if v is not None and v != ""]
        if parts:
            path = path + "?" + "&".join(parts)
    data = b"" if body is None else wirejson.dumps(body).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: batchd\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
    sp = socket_path()
    give_up = None
    pause = 0.01
    while True:
        try:
            raw = _exchange(sp, head + data, timeout)
            status, payload = _decode(raw, sp)
            if status != 503 or payload.get("error", {}).get("code") != "TooManyConnections":
                break
            why = None
        except (ConnectionRefusedError, BlockingIOError) as e:
            why = e
        except OSError as e:
            raise Unreachable(f"cannot reach the batchd daemon at {sp}: {e.strerror or e}", sent=False) from None
        now = time.monotonic()
        give_up = give_up or now + RETRY_S
        if now + pause > give_up:
            if why is not None:
                raise Unreachable(f"cannot reach the batchd daemon at {sp}: {why.strerror or why}", sent=False) from None
            break
        # a spread of pauses (from the clock's low digits) so that a burst of refused clients
        # does not come back all at once
        time.sleep(pause * (0.5 + (time.monotonic_ns() // 1000 % 1000) / 1000))
        pause = min(pause * 2, 0.25)
    if status >= 400:
        err = payload.get("error", {})
        raise DaemonError(err.get("code", "Error"), err.get("message", f"HTTP {status}"),
                          err.get("exit", 1), status, err.get("detail"))
    return payload


def _decode(raw, sp):
    sep = raw.find(b"\r\n\r\n")
    if sep < 0:
        raise Unreachable(f"the batchd daemon at {sp} closed the connection")
    try:
        return int(raw[9:12]), wirejson.loads(raw[sep + 4:] or b"{}")
    except ValueError:
        raise Unreachable(f"the batchd daemon at {sp} sent an incomplete reply") from None


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


# ---------------------------------------------------------------------- submissions
#: How long a submission whose reply was lost waits for the daemon to come back (s).
SUBMIT_RETRY_S = 20.0


def new_submit_token():
    """A fresh client-made submission token: 32 hex digits (16 bytes of os.urandom)."""
    return os.urandom(16).hex()


def submit_job(spec, send=None, retry_s=None):
    """`POST /v1/jobs` for `spec`; returns `(reply, lost)`, `lost` true when a first reply
    was lost and the reply is that of a retry.

    A spec carrying a token (`spec["submit_token"]`, see new_submit_token) may be sent
    twice: when the connection is lost after the request went out (the daemon may have
    stored the job and died before answering), this waits for the daemon to come back,
    for at most `retry_s` seconds, and sends the same spec again; the daemon answers with
    the job the token already stored (`"duplicate": true`) or stores it now. Without a
    token, or when nothing was sent (no daemon), the error passes through as is.
    DaemonError passes through; past the deadline Unreachable says that the job may or
    may not have been submitted. `send` is `request` by default (tests pass a fake)."""
    send = send or request
    body = {"spec": spec}
    try:
        return send("POST", "/v1/jobs", body), False
    except Unreachable as e:
        if not e.sent or not (spec.get("submit_token") or spec.get("test_only")):
            raise
        first = e
    import time as _time  # already loaded by `request`'s retries; kept local to this path

    retry_s = SUBMIT_RETRY_S if retry_s is None else retry_s
    deadline = _time.monotonic() + retry_s
    pause = 0.2
    while True:
        _time.sleep(pause)
        try:
            # each retry waits no longer than what is left of the window: a daemon that
            # accepts but never answers does not stretch it to a full request timeout
            left = max(1.0, deadline - _time.monotonic())
            return send("POST", "/v1/jobs", body, timeout=left), True
        except Unreachable:
            if _time.monotonic() + pause > deadline:
                raise Unreachable(f"{first}; it did not come back within {retry_s:g} s, so the job may or may "
                                  "not have been submitted (look for it with squeue)") from None
        pause = min(pause * 1.5, 1.0)
