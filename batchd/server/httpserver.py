"""HTTP/1.1 + JSON over the daemon's Unix socket: the transport under `batchd/server/api.py`.

One event-loop thread (`selectors`, so descriptors above 1024 are fine) accepts
connections, learns each caller from SO_PEERCRED once, reads the request head and body
without blocking and writes the replies. A bounded pool of worker threads runs
`api.handle` on complete requests only, taking the callers in turn (one FIFO per uid,
served round-robin), so an idle or slow client never holds a worker and one user's burst
waits behind itself.

Contract (the numbers are `Limits`, from the config's `[limits]` table):
- one request per connection, unless the request says `Connection: keep-alive` (opt-in:
  the CLI's one-shot requests say `close`; a load generator or a portal keeps one open):
  then the reply says `keep-alive` and the connection waits for the next request, still
  one open connection under the caps below; every other reply says `Connection: close`;
- a connection must deliver its whole request within `request_timeout_s` of its accept
  (a kept-alive one: of its last reply's end), else it gets a 408 envelope and is closed;
  a kept-alive connection that sent nothing of a next request in that time is closed
  without a reply; a reply that makes no progress for that long (a client that stops
  reading) is dropped;
- a request head over HEAD_MAX_BYTES is a 431, a Content-Length over `max_request_bytes`
  a 413, a malformed head a 400 (all JSON error envelopes, sent before the body is read);
- open connections are capped per uid and in total: one over a cap gets a quick 503
  `TooManyConnections` envelope and is closed, and the other users' connections are not
  touched (`batchd.cli.client` retries such a refusal for a few seconds).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from batchd import memtrim
from batchd.errors import BatchdError
from batchd.server.api import handle
from batchd.server.httpwire import (
    HEAD_MAX_BYTES,
    FairQueue,
    Limits,
    Refused,
    encode_reply,
    error_reply,
    parse_head,
    peer_credentials,
)
from batchd.server.service import Caller, Service

__all__ = ["ApiServer", "Limits", "peer_credentials"]

log = logging.getLogger(__name__)

RECV_BYTES = 256 * 1024
ACCEPTS_PER_WAKE = 256      # then serve the other connections before accepting more
ACCEPT_PAUSE_S = 0.1        # after EMFILE: stop accepting this long, serve what is open
NOTE_LOG_S = 10.0           # one warning per uid and kind (refused, timed out) per this long

Handler = Callable[[Service, Caller, str, str, bytes], tuple[int, Any]]


class _Conn:
    """One accepted connection; touched by the loop thread only, except `caller`,
    `method`, `target` read by the worker that runs its request."""
    __slots__ = ("sock", "caller", "buf", "scan", "head_end", "length", "method", "target", "out",
                 "events", "deadline", "queued", "closed", "big", "keep", "served")

    def __init__(self, sock: socket.socket, caller: Caller, deadline: float):
        self.sock = sock
        self.caller = caller
        self.buf = bytearray()
        self.scan = 0                  # where to look for the end of the head next
        self.head_end = -1
        self.length = 0
        self.method = self.target = ""
        self.out: memoryview | None = None
        self.events = 0                # what the selector watches (0 = not registered)
        self.deadline: float | None = deadline   # None while a worker has it
        self.queued = False            # an entry of it is in the deadline heap
        self.closed = False
        self.big = False               # the reply is large: trim the heap once it is sent
        self.keep = False              # this request asked for keep-alive (and gets it)
        self.served = 0                # requests answered on it so far


class _Server:
    """The listening socket, the loop and the workers (see the module docstring)."""

    def __init__(self, path: str, service: Service, limits: Limits, handler: Handler):
        self.service, self.limits, self.handler = service, limits, handler
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.listener.bind(path)
            os.chmod(path, 0o666)  # every local user may connect; who they are comes from SO_PEERCRED
            self.listener.listen(limits.backlog)
        except BaseException:
            self.listener.close()
            raise
        self.listener.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.conns: set[_Conn] = set()
        self.per_uid: dict[int, int] = {}
        self._deadlines: list[tuple[float, int, _Conn]] = []
        self._seq = itertools.count()
        self._replies: deque[tuple[_Conn, bytes]] = deque()   # workers -> loop
        self._work = FairQueue()
        self._accept_paused_until = 0.0
        self._notes: dict[tuple[int, str], tuple[float, int]] = {}  # (uid, event) -> (logged at, since)
        self._stopping = False

    # ---- the loop thread ----

    def serve_forever(self) -> None:
        workers = [threading.Thread(target=self._worker, name=f"api-{i}", daemon=True)
                   for i in range(self.limits.api_threads)]
        for w in workers:
            w.start()
        while not self._stopping:
            now = time.monotonic()
            timeout = 1.0
            if self._deadlines:
                timeout = min(timeout, max(0.0, self._deadlines[0][0] - now))
            if self._accept_paused_until:
                timeout = min(timeout, max(0.0, self._accept_paused_until - now))
            for key, mask in self.sel.select(timeout):
                try:
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    elif mask & selectors.EVENT_WRITE:
                        self._write(key.data)
                    else:
                        self._read(key.data)
                except Exception:  # the top of one connection's event: a bug must not stop the API
                    log.exception("api connection event failed")
                    if isinstance(key.data, _Conn):
                        self._close(key.data)
            self._take_replies()
            self._expire(time.monotonic())
        for _ in workers:
            self._work.put(-1, None)
        self.close()

    def close(self) -> None:
        """Close every connection and socket (the loop's last act, or instead of it)."""
        for c in list(self.conns):
            self._close(c)
        self.sel.close()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors (EMFILE/ENFILE) or memory: serve what is open
                log.warning("api accept failed error=%s open=%d", e.strerror or e, len(self.conns))
                self.sel.unregister(self.listener)
                self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE_S
                return
            sock.setblocking(False)
            try:
                caller = peer_credentials(sock)
            except OSError:
                sock.close()
                continue
            lim, n_uid = self.limits, self.per_uid.get(caller.uid, 0)
            if n_uid >= lim.max_connections_per_user:
                self._refuse(sock, caller.uid, f"uid {caller.uid} already has {n_uid} connections "
                             "open to the batchd daemon (limits.max_connections_per_user); try again")
            elif len(self.conns) >= lim.max_connections:
                self._refuse(sock, caller.uid, f"the batchd daemon already has {len(self.conns)} "
                             "connections open (limits.max_connections); try again")
            else:
                c = _Conn(sock, caller, time.monotonic() + lim.request_timeout_s)
                self.conns.add(c)
                self.per_uid[caller.uid] = n_uid + 1
                self._watch(c, selectors.EVENT_READ)
                self._queue_deadline(c)

    def _refuse(self, sock: socket.socket, uid: int, message: str) -> None:
        """Answer a connection over a cap at once, without waiting for it."""
        try:
            sock.recv(HEAD_MAX_BYTES)  # what it already sent: closing on unread data resets the peer
        except OSError:
            pass
        try:
            sock.send(error_reply(503, "TooManyConnections", message))
        except OSError:
            pass
        sock.close()
        self._note(uid, "api connection refused", message)

    def _note(self, uid: int, event: str, detail: str) -> None:
        """Log `event` for `uid` at most once per NOTE_LOG_S, with how often it happened:
        a client that opens thousands of connections must not flood the log."""
        now = time.monotonic()
        last, count = self._notes.get((uid, event), (-NOTE_LOG_S, 0))
        if now - last >= NOTE_LOG_S:
            log.warning("%s uid=%d times=%d detail=%r", event, uid, count + 1, detail)
            self._notes[(uid, event)] = (now, 0)
        else:
            self._notes[(uid, event)] = (last, count + 1)

    def _read(self, c: _Conn) -> None:
        try:
            data = c.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away before its request was whole
            self._close(c)
            return
        c.buf += data
        self._parse(c)

    def _parse(self, c: _Conn) -> None:
        """Hand `c`'s request to the workers once its head and body are in `c.buf`."""
        try:
            if c.head_end < 0:
                end = c.buf.find(b"\r\n\r\n", c.scan)
                if end < 0 and len(c.buf) <= HEAD_MAX_BYTES:
                    c.scan = max(0, len(c.buf) - 3)
                    return
                if end < 0 or end > HEAD_MAX_BYTES:
                    raise Refused(431, "RequestTooLarge", f"request head over {HEAD_MAX_BYTES} bytes")
                c.method, c.target, c.length, c.keep = parse_head(bytes(c.buf[:end]), self.limits.max_request_bytes)
                c.head_end = end + 4
        except Refused as e:
            self._send(c, e.reply)
            return
        if len(c.buf) - c.head_end >= c.length:
            self._watch(c, 0)
            c.deadline = None
            self._work.put(c.caller.uid, c)

    def _send(self, c: _Conn, data: bytes) -> None:
        # what a kept-alive client already sent of its next request stays
        c.buf = c.buf[c.head_end + c.length:] if c.keep and c.head_end >= 0 else bytearray()
        c.out = memoryview(data)
        c.big = len(data) >= memtrim.TRIM_AFTER_BYTES
        c.deadline = time.monotonic() + self.limits.request_timeout_s
        self._queue_deadline(c)
        self._write(c)

    def _write(self, c: _Conn) -> None:
        assert c.out is not None
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:  # the client is gone: nothing more to do for it
            self._close(c)
            return
        c.out = c.out[n:]
        if not c.out:
            c.out = None  # the slice held the whole reply's buffer
            big, c.big = c.big, False
            if c.keep and not self._stopping:
                self._next_request(c)
            else:
                self._close(c)
            if big:  # its objects and body are freed by now: give the pages back (RSS)
                memtrim.give_back()
            return
        if n:
            c.deadline = time.monotonic() + self.limits.request_timeout_s
        self._watch(c, selectors.EVENT_WRITE)

    def _next_request(self, c: _Conn) -> None:
        """A kept-alive connection whose reply went out: wait for its next request."""
        c.out, c.scan, c.head_end, c.length, c.keep = None, 0, -1, 0, False
        c.served += 1
        c.deadline = time.monotonic() + self.limits.request_timeout_s
        self._queue_deadline(c)
        self._watch(c, selectors.EVENT_READ)
        if c.buf:
            self._parse(c)

    def _take_replies(self) -> None:
        while self._replies:
            c, data = self._replies.popleft()
            if not c.closed:
                self._send(c, data)

    def _expire(self, now: float) -> None:
        if self._accept_paused_until and now >= self._accept_paused_until and not self._stopping:
            self._accept_paused_until = 0.0
            self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, _, c = heapq.heappop(heap)
            c.queued = False
            if c.closed or c.deadline is None:
                continue
            if c.deadline > now:  # extended since it was queued
                self._queue_deadline(c)
            elif c.out is None and c.served and not c.buf:  # an idle kept-alive connection
                self._close(c)
            elif c.out is None:
                self._note(c.caller.uid, "api request timed out", f"pid={c.caller.pid} received_bytes={len(c.buf)}")
                self._send(c, error_reply(408, "RequestTimeout", "the request did not arrive in "
                                          f"{self.limits.request_timeout_s:g} s (limits.request_timeout_s)"))
            else:
                self._note(c.caller.uid, "api reply dropped: the client stopped reading", f"pid={c.caller.pid}")
                self._close(c)

    def _queue_deadline(self, c: _Conn) -> None:
        if not c.queued and c.deadline is not None:
            heapq.heappush(self._deadlines, (c.deadline, next(self._seq), c))
            c.queued = True

    def _watch(self, c: _Conn, events: int) -> None:
        if events == c.events:
            return
        if not c.events:
            self.sel.register(c.sock, events, c)
        elif not events:
            self.sel.unregister(c.sock)
        else:
            self.sel.modify(c.sock, events, c)
        c.events = events

    def _close(self, c: _Conn) -> None:
        if c.closed:
            return
        self._watch(c, 0)
        c.sock.close()
        c.closed = True
        self.conns.discard(c)
        n = self.per_uid.get(c.caller.uid, 1) - 1
        if n:
            self.per_uid[c.caller.uid] = n
        else:
            self.per_uid.pop(c.caller.uid, None)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, InterruptedError):
            pass  # already woken
        except OSError:
            pass  # stopped

    def stop(self) -> None:
        self._stopping = True
        self.wake()

    # ---- worker threads ----

    def _worker(self) -> None:
        while True:
            c = self._work.get()
            if c is None:
                return
            try:
                status, payload = self.handler(self.service, c.caller, c.method, c.target,
                                               bytes(c.buf[c.head_end:c.head_end + c.length]))
                data = encode_reply(status, payload, keep_alive=c.keep)
            except Exception:  # the top of a request: answer 500, keep serving
                log.exception("api request failed method=%s uid=%d", c.method, c.caller.uid)
                c.keep = False
                data = error_reply(500, "Internal", "internal error in batchd (see its log)")
            self._replies.append((c, data))
            # not kept until this thread's next request: a large reply's objects are freed now
            payload = None
            del data
            self.wake()


class ApiServer:
    """The socket server in a background thread. The socket exists (mode 0666) once this
    is constructed; `start` serves it, `stop` closes every connection and removes it."""

    def __init__(self, path: str, service: Service, limits: Limits | None = None, handler: Handler = handle):
        self.path = path
        if os.path.exists(path):
            _remove_stale(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if limits is None:
            limits = Limits.of(service.cfg.limits)
        self.server = _Server(path, service, limits, handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="api", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.stop()
        if self.thread.is_alive():
            self.thread.join(timeout=10)
        else:
            self.server.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _remove_stale(path: str) -> None:
    """Remove a socket file left by a dead daemon; refuse if a live daemon answers."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except BlockingIOError:  # EAGAIN: a live daemon whose backlog is full
        pass
    except OSError:
        os.unlink(path)
        return
    finally:
        s.close()
    raise BatchdError(f"another batchd daemon is already listening on {path}")
