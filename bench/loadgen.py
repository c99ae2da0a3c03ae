#!/usr/bin/env python3
"""Socket load generator: the daemon's own submission capacity, without a process per request.

    .venv/bin/python bench/loadgen.py [--socket PATH] [-n 16] [--duration 10 | --count 1000]
                                      [--procs 1] [--name loadgen] [--json]
    .venv/bin/python bench/loadgen.py --serve-null PATH      # a daemon that does nothing

Each of the N connections (threads, spread over --procs processes) sends the request that
`sbatch --hold --wrap true -J NAME` sends (`POST /v1/jobs`, the JOB_SPEC built by
batchd.cli.sbatch.build from this process's environment, a fresh submission token each
time) and waits for its reply before sending the next: a closed loop, so the rate is the
daemon's capacity at N outstanding requests. Connections are kept alive when the daemon
allows it (a reply without `Connection: close`), else one connection per request.

Prints submissions/s (replies with a 2xx status in the measured window), errors by status,
and the latency (request sent -> whole reply read) p50/p99; --json prints one JSON object.
The jobs stay held; cancel them with `scancel -n NAME`.

--serve-null PATH serves a stand-in daemon on PATH that answers every request at once with
the next job id: what the same clients reach against it is the floor of the client side
(on a small machine the load generator itself can be the limit; that run says how far).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import selectors
import socket
import sys
import threading
import time

PLACEHOLDER = "0" * 32  # the submission token's place in the pre-encoded body (same length)


def request_bytes(name: str, extra: list[str] | None = None) -> tuple[bytes, bytes]:
    """The head+body of the submission, split around the token: (before, after)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from batchd.cli.sbatch import build

    spec, _ = build(["--hold", "-J", name, *(extra or []), "--wrap", "true"], dict(os.environ))
    spec["submit_token"] = PLACEHOLDER
    body = json.dumps({"spec": spec}).encode()
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: batchd\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n").encode()
    before, _, after = (head + body).partition(PLACEHOLDER.encode())
    return before, after


def read_reply(sock: socket.socket, buf: bytearray) -> tuple[int, bool, bytes]:
    """Read one HTTP reply from `sock` (leftover bytes in `buf`): (status, keep_alive, body).
    Raises ConnectionError when the connection ends before a whole reply."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the reply head")
        buf += chunk
    head = bytes(buf[:end]).decode("latin-1").split("\r\n")
    status = int(head[0][9:12])
    length, keep = None, True
    for line in head[1:]:
        k, _, v = line.partition(":")
        k = k.strip().lower()
        if k == "content-length":
            length = int(v)
        elif k == "connection":
            keep = v.strip().lower() != "close"
    del buf[:end + 4]
    if length is None:  # read to the end
        keep = False
        while chunk := sock.recv(65536):
            buf += chunk
        length = len(buf)
    while len(buf) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed in the reply body")
        buf += chunk
    body = bytes(buf[:length])
    del buf[:length]
    return status, keep, body


def ping(path: str, timeout: float = 2.0) -> bool:
    """Whether a batchd daemon answers `GET /v1/ping` on `path`."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: batchd\r\nConnection: close\r\n\r\n")
            return read_reply(s, bytearray())[0] == 200
    except (OSError, ValueError):
        return False


def _connection_loop(path: str, parts: tuple[bytes, bytes], stop_at: float, tickets: itertools.count | None,
                     count: int, out: list[tuple[float, float, int]], errors: dict[str, int]) -> None:
    """One connection's closed loop until `stop_at` (time.time()) or the shared ticket
    counter passes `count`; appends (done_at, latency_s, status) per request."""
    before, after = parts
    sock = None
    buf = bytearray()
    while True:
        if tickets is not None and next(tickets) >= count:
            break
        if tickets is None and time.time() >= stop_at:
            break
        msg = before + os.urandom(16).hex().encode() + after
        t0 = time.perf_counter()
        try:
            if sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(120)
                sock.connect(path)
                buf.clear()
            sock.sendall(msg)
            status, keep, body = read_reply(sock, buf)
        except (OSError, ValueError) as e:
            key = type(e).__name__
            errors[key] = errors.get(key, 0) + 1
            if sock is not None:
                sock.close()
                sock = None
            time.sleep(0.01)
            continue
        out.append((time.time(), time.perf_counter() - t0, status))
        if status >= 300:
            try:
                code = json.loads(body).get("error", {}).get("code", "")
            except ValueError:
                code = ""
            key = f"{status} {code}".strip()
            errors[key] = errors.get(key, 0) + 1
        if not keep:
            sock.close()
            sock = None
            errors["_reconnects"] = errors.get("_reconnects", 0) + 1
    if sock is not None:
        sock.close()


def run_threads(path: str, parts: tuple[bytes, bytes], n: int, start_at: float, stop_at: float,
                count: int | None) -> tuple[list[tuple[float, float, int]], dict[str, int]]:
    """N connection threads in this process; their records and error counts."""
    while time.time() < start_at:
        time.sleep(min(0.01, max(0.0, start_at - time.time())))
    tickets = itertools.count() if count is not None else None
    outs: list[list[tuple[float, float, int]]] = [[] for _ in range(n)]
    errs: list[dict[str, int]] = [{} for _ in range(n)]
    threads = [threading.Thread(target=_connection_loop, args=(path, parts, stop_at, tickets, count or 0,
                                                               outs[i], errs[i]), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors: dict[str, int] = {}
    for e in errs:
        for k, v in e.items():
            errors[k] = errors.get(k, 0) + v
    return [r for o in outs for r in o], errors


def _pct(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def run(path: str, n: int = 16, duration_s: float | None = 10.0, count: int | None = None, procs: int = 1,
        name: str = "loadgen", warmup_s: float = 0.0) -> dict:
    """Run the load; the summary dict printed by --json (rates per second, latencies in ms)."""
    parts = request_bytes(name)
    procs = max(1, min(procs, n))
    start_at = time.time() + (0.3 if procs > 1 else 0.0)
    stop_at = start_at + (duration_s or 0.0) + warmup_s
    per = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    counts = [None] * procs
    if count is not None:  # each process its share of the count (a shared counter needs a lock)
        counts = [count // procs + (1 if i < count % procs else 0) for i in range(procs)]
        stop_at = float("inf")
    if procs == 1:
        results = [run_threads(path, parts, per[0], start_at, stop_at, counts[0])]
    else:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(procs) as pool:
            results = pool.starmap(run_threads, [(path, parts, per[i], start_at, stop_at, counts[i])
                                                 for i in range(procs)])
    records = [r for recs, _ in results for r in recs]
    errors: dict[str, int] = {}
    for _, e in results:
        for k, v in e.items():
            errors[k] = errors.get(k, 0) + v
    reconnects = errors.pop("_reconnects", 0)
    end = max((r[0] for r in records), default=start_at)
    t_from = start_at + warmup_s
    window = [r for r in records if r[0] >= t_from]
    ok = [r for r in window if r[2] < 300]
    wall = max(end - t_from, 1e-9)
    lat = sorted(r[1] for r in ok)
    return {"connections": n, "procs": procs, "wall_s": round(wall, 3), "submitted": len(ok),
            "errors": errors, "rate_per_s": round(len(ok) / wall, 1),
            "p50_ms": round(_pct(lat, 0.50) * 1000, 2), "p99_ms": round(_pct(lat, 0.99) * 1000, 2),
            "keep_alive": reconnects < len(records)}


# ---------------------------------------------------------------------- the null daemon
def serve_null(path: str) -> None:
    """Answer every request on `path` with the next job id, at once, until killed. Keeps
    a connection open when the request asks for it (HTTP/1.1 default)."""
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1024)
    srv.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    ids = itertools.count(1)
    bufs: dict[socket.socket, bytearray] = {}
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if s is srv:
                while True:
                    try:
                        c, _ = srv.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(True)
                    bufs[c] = bytearray()
                    sel.register(c, selectors.EVENT_READ)
                continue
            assert isinstance(s, socket.socket)
            buf = bufs[s]
            try:
                chunk = s.recv(262144)
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(s)
                del bufs[s]
                s.close()
                continue
            buf += chunk
            while (end := buf.find(b"\r\n\r\n")) >= 0:
                head = bytes(buf[:end]).decode("latin-1").lower()
                length = 0
                for line in head.split("\r\n")[1:]:
                    k, _, v = line.partition(":")
                    if k.strip() == "content-length":
                        length = int(v)
                if len(buf) < end + 4 + length:
                    break
                del buf[:end + 4 + length]
                close = "connection: close" in head
                body = json.dumps({"job_id": next(ids), "array_task_ids": None}).encode()
                reply = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n").encode() + body
                try:
                    s.sendall(reply)
                except OSError:
                    close = True
                if close:
                    sel.unregister(s)
                    del bufs[s]
                    s.close()
                    break


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket", default=os.environ.get("BATCHD_SOCKET", ".batchd/batchd.sock"),
                    help="the daemon's socket (default $BATCHD_SOCKET, else ./.batchd/batchd.sock)")
    ap.add_argument("-n", "--connections", type=int, default=16, help="concurrent connections (default 16)")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds to run (default 10)")
    ap.add_argument("--count", type=int, help="submit this many jobs instead of running --duration seconds")
    ap.add_argument("--procs", type=int, default=1, help="spread the connections over this many processes")
    ap.add_argument("--warmup", type=float, default=0.0, help="seconds at the start left out of the figures")
    ap.add_argument("--name", default="loadgen", help="the jobs' name (default loadgen)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--serve-null", metavar="PATH", help="serve a do-nothing daemon on PATH instead")
    a = ap.parse_args()
    if a.serve_null:
        serve_null(a.serve_null)
        return
    r = run(a.socket, a.connections, None if a.count else a.duration, a.count, a.procs, a.name, a.warmup)
    if a.json:
        print(json.dumps(r))
        return
    errs = ", ".join(f"{k}: {v}" for k, v in sorted(r["errors"].items())) or "none"
    print(f"loadgen {r['connections']} connections ({r['procs']} process(es)), {r['wall_s']:.1f} s: "
          f"{r['submitted']} submitted, {r['rate_per_s']:.1f} /s; latency p50 {r['p50_ms']:.1f} ms, "
          f"p99 {r['p99_ms']:.1f} ms; errors: {errs}; keep-alive: {'yes' if r['keep_alive'] else 'no'}")


if __name__ == "__main__":
    main()
