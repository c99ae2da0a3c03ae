"""The one daemon harness of the tests that start a real `batchd serve` (tests/e2e,
tests/cluster, tests/lsf, tests/compat, tests/install), and the wheel build of the install
tests (tests/install, tests/systemd).

A daemon is started in its own session (so that a test's signals and a stop never reach
the jobs' supervisors through the process group), with stdout and stderr appended to a
log file, and is waited for until `ready()` says it answers; a daemon that exits first
or never answers fails the test with the tail of its log. The fixtures keep what differs
between the tiers: the config, the directory, how readiness is seen, the helpers to run
commands.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

#: the environment running the tests: its bin/ holds batchd's commands
BIN = Path(sys.executable).parent
#: the checkout
ROOT = Path(__file__).resolve().parent.parent
#: what a wheel is built from (pyproject's package-dir names them; the install tests
#: build from a copy, never in the checkout, which would leave a build/ directory behind)
WHEEL_SOURCES = ("pyproject.toml", "README.md", "batchd", "cli", "migrations", "examples", "docs")


def clean_env(*drop: str, **extra: str) -> dict[str, str]:
    """The test's environment without Slurm's job variables (a test run inside a job
    would otherwise pass them on) nor any other prefix in `drop`, plus `extra`."""
    prefixes = ("SLURM_", "SBATCH_", *drop)
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(extra)
    return env


def log_tail(log: Path, n: int = 3000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else ""


def serve_argv(*args: str, bin_dir: Path = BIN) -> list[str]:
    """`batchd serve ARGS` of the environment in `bin_dir`."""
    return [str(bin_dir / "batchd"), "serve", *args]


def start_daemon(argv: list[str], *, cwd: Path | str, env: Mapping[str, str], log: Path,
                 ready: Callable[[], bool] | None = None, timeout_s: float = 30.0,
                 poll_s: float = 0.2) -> subprocess.Popen:
    """Start `argv` (a `batchd serve`), its output appended to `log`, and return once
    `ready()` is true (at once without `ready`); RuntimeError, with the log's tail, when it
    exits before or does not answer within `timeout_s`."""
    with open(log, "ab") as logf:
        proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT, start_new_session=True)
    if ready is None:
        return proc
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited rc={proc.returncode}:\n{log_tail(log)}")
        if ready():
            return proc
        if time.monotonic() > deadline:
            stop_daemon(proc)
            raise RuntimeError(f"daemon did not come up within {timeout_s:.0f} s:\n{log_tail(log)}")
        time.sleep(poll_s)


def stop_daemon(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> None:
    """Signal the daemon and wait for it; one that does not end in time is killed (its
    process group: not the jobs, which run in sessions of their own)."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def answers(env: Mapping[str, str], cwd: Path | str, bin_dir: Path = BIN) -> Callable[[], bool]:
    """A readiness check: `sinfo` through the daemon that `env` points at succeeds."""
    def ready() -> bool:
        return subprocess.run([str(bin_dir / "sinfo")], env=dict(env), cwd=cwd, capture_output=True,
                              timeout=60).returncode == 0
    return ready


def socket_exists(sock: Path) -> Callable[[], bool]:
    """A readiness check: the daemon's socket is there."""
    return sock.exists


def supervisors_under(root: Path | str) -> list[int]:
    """Pids of the live supervisors (`python -m batchd.node.supervisor ... JOBDIR`) whose run
    directory lies under `root`, and of no other: the suite runs in several workers at once
    (docs/testing.md), and another worker's daemons run supervisors at the same time."""
    import psutil

    top = os.path.abspath(root).rstrip(os.sep) + os.sep
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "batchd.node.supervisor" not in cmd or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if cmd and os.path.abspath(cmd[-1]).startswith(top):
            found.append(int(proc.info["pid"]))
    return found


def end_supervisors(root: Path | str) -> None:
    """End what a test's daemons under `root` left running: each run's job (its process
    group, recorded in the run's `started.json`) and its supervisor (which ignores SIGTERM
    by design, so SIGKILL). Jobs the test cancelled through the daemon are gone already.
    Only what is under `root` is touched (`supervisors_under`), never another test's."""
    import json

    from batchd.node.spool import start_ticks

    for started in Path(root).glob("**/spool/job.*/started.json"):
        try:
            rec = json.loads(started.read_text())
            pgid, ticks = int(rec.get("pgid") or 0), int(rec.get("start_ticks") or 0)
        except (OSError, ValueError):
            continue
        # the same process, not a later one that got its pid: its start time since boot
        if pgid > 1 and ticks and start_ticks(pgid) == ticks:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for pid in supervisors_under(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def copy_wheel_sources(dest: Path) -> Path:
    """A copy of what the wheel is built from, in `dest` (created); returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in WHEEL_SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def _sh(*cmd: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{cmd} failed rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def build_wheel(work: Path) -> Path:
    """This checkout's wheel (no dependencies), built from a copy of its sources under
    `work` with pip's usual isolated build (the PyPI index or pip's cache provide
    setuptools)."""
    src = copy_wheel_sources(work / "src")
    wheels = work / "wheels"
    _sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src), timeout=300)
    (wheel,) = wheels.glob("batchd-*.whl")
    return wheel


def wheel_venv(work: Path, wheel: Path) -> Path:
    """`wheel` installed (not editable) into a fresh venv `work/venv`; returns its bin/.

    The venv is created without pip and the wheel is installed with --no-deps; the
    dependencies come from the environment running the tests through one .pth line. That
    keeps the test offline for the dependencies and fast (seconds instead of a minute of
    downloads) while batchd itself is only the installed wheel: paths named by a .pth file
    come after the venv's own site-packages, and .pth files in them (this checkout's
    editable hook) are not read, which is checked here."""
    import sysconfig

    venv = work / "venv"
    _sh(sys.executable, "-m", "venv", "--without-pip", str(venv))
    _sh(sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps",
        "--no-index", str(wheel))
    site = Path(_sh(str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    where = _sh(str(venv / "bin" / "python"), "-c", "import batchd, batchd.cli.sbatch, batchd.migrations as m; "
                "print(batchd.__file__); print(m.__file__)", cwd="/").stdout.split()
    assert all(w.startswith(str(site)) for w in where), f"batchd is not the installed wheel: {where}"
    return venv / "bin"
