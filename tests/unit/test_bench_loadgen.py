"""bench/loadgen.py counts what it claims: against its own null daemon, --count N gives N
submissions over kept-alive connections, each request carrying a different submission token;
and bench/sbs_table.py's cost ratios read the right way for times and for rates."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_loadgen_count_against_the_null_daemon(tmp_path):
    lg = _load("loadgen")
    sock = str(tmp_path / "null.sock")
    null = subprocess.Popen([sys.executable, str(BENCH / "loadgen.py"), "--serve-null", sock],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert null.stdout.readline().strip() == "ready"
        assert lg.ping(sock)
        r = lg.run(sock, n=4, duration_s=None, count=50, name="t")
        assert r["submitted"] == 50 and r["errors"] == {} and r["keep_alive"] is True
        assert r["p50_ms"] <= r["p99_ms"]
    finally:
        null.kill()
        null.wait()


def test_each_request_is_sbatch_spec_with_a_fresh_token(tmp_path):
    lg = _load("loadgen")
    seen = []
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(tmp_path / "s.sock"))
    srv.listen(4)

    def serve():
        for _ in range(2):  # one request per connection: the daemon's `Connection: close`
            c, _ = srv.accept()
            buf = bytearray()
            while (end := buf.find(b"\r\n\r\n")) < 0:
                buf += c.recv(65536)
            length = int(bytes(buf[:end]).lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(buf) < end + 4 + length:
                buf += c.recv(65536)
            seen.append(json.loads(bytes(buf[buf.find(b"\r\n\r\n") + 4:]))["spec"])
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\n{\"job_id\": 1}")
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    r = lg.run(str(tmp_path / "s.sock"), n=1, duration_s=None, count=2, name="t")
    t.join(10)
    assert r["submitted"] == 2 and r["keep_alive"] is False
    assert [s["hold"] for s in seen] == [True, True] and seen[0]["name"] == "t"
    assert seen[0]["script"].endswith("true\n") and seen[0]["environment"]
    assert seen[0]["submit_token"] != seen[1]["submit_token"]


def test_cost_ratios():
    tb = _load("sbs_table")
    times = tb.Row("t", "s", {"sqlite": [0.3, 0.2, 0.1], "slurm": [0.05]})
    assert abs(times.ratio("sqlite", "slurm") - 4.0) < 1e-9
    rates = tb.Row("r", "/s", {"sqlite": [10.0], "slurm": [100.0]})
    assert abs(rates.ratio("sqlite", "slurm") - 10.0) < 1e-9
    assert tb.at_most(0.25)(times) is True
    assert tb.at_most(0.25)(tb.Row("x", "s", {"sqlite": [float("nan")]})) is False
    assert tb.par16_goal(tb.Row("p", "/s", {"sqlite": [95.0], "null": [100.0], "slurm": [150.0]})) is True
    assert tb.par16_goal(tb.Row("p", "/s", {"sqlite": [95.0], "null": [100.0], "slurm": [200.0]})) is False
    assert "| figure |" in tb.render([times, rates], ["slurm", "sqlite", "floor"])
