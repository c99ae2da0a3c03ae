"""One booted systemd for the `systemd` tier's test module, with batchd installed as README says.

The module fixture `box` (every box test is in test_under_systemd.py: one box, one
install) builds this checkout's wheel (and its dependencies' wheels: the box has no
network), boots `../shared/systemd-box` (`sdbox.sh up ROOT unified NAME`, a
real systemd 252 as PID 1 in its own namespaces, writes on a tmpfs overlay) and runs the
README's "Installing on a node (production)" block in it, word for word except for the
`/path/to/batchd` placeholder (the wheel) and `PIP_NO_INDEX`/`PIP_FIND_LINKS` (the README's
offline install). Then two throwaway users and four fake `/dev/nvidiaN` character devices
(NVIDIA's major 195, no driver behind them: an open the cgroup lets through fails ENXIO,
one it refuses fails EPERM). The box is powered off when that module is done (not at
the end of a whole-suite run).

The box scripts are a tool, not fixture data: they stay outside the checkout
(`$BATCHD_SDBOX`, default `../shared/systemd-box` beside it), and that directory alone is
allowed to the outside-repo guard of tests/conftest.py (`pytest_configure` below). Where
they are absent the tier skips and says where it looked.

Skipped, with the reason, where not root, where the box scripts or the root
(`$BATCHD_SDROOT`, default /var/tmp/sdroot, made by `make-root.sh`; `.ci/run` makes it)
are missing, where the wheels cannot be built, or where the box does not boot.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.harness import copy_wheel_sources

ROOT = Path(__file__).resolve().parent.parent.parent
SDBOX_DIR = Path(os.environ.get("BATCHD_SDBOX", ROOT.parent / "shared" / "systemd-box"))
SDROOT = Path(os.environ.get("BATCHD_SDROOT", "/var/tmp/sdroot"))


@pytest.hookimpl(trylast=True)  # after tests/conftest.py has registered the guard
def pytest_configure(config: pytest.Config) -> None:
    guard = config.pluginmanager.get_plugin("outside_repo_guard")
    if guard is not None:
        guard.allow(SDBOX_DIR, "the systemd tier's container tooling (scripts, not fixture data)")


#: the local version of the "newer" wheel of the upgrade test
UPGRADE_VERSION = "+sdboxupgrade"
USERS = ("bdsa", "bdsb")
CONFIG = "/etc/batchd/batchd.toml"


def readme_install_block() -> str:
    """The sh block of README's "Installing on a node (production)" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Installing on a node (production)", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    assert m, "README's production section has no ```sh block"
    return m.group(1)


class Box:
    """A booted box: run commands in it as root or as a user."""

    def __init__(self, name: str):
        self.name = name
        self.script = str(SDBOX_DIR / "sdbox.sh")

    def sh(self, script: str, *, user: str | None = None, check: bool = True, timeout: float = 60,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """`bash -c script` in the box (as `user` from its home, through runuser)."""
        if env:
            script = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items()) + script
        argv = [self.script, "exec", self.name]
        if user is None:
            argv += ["bash", "-c", script]
        else:
            argv += ["runuser", "-u", user, "--", "bash", "-c", f"cd ~{user} && {script}"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check:
            assert r.returncode == 0, f"in the box{' as ' + user if user else ''}: {script}\nrc={r.returncode}\n" \
                                      f"{r.stdout}\n{r.stderr}\n{self.journal_tail()}"
        return r

    def journal_tail(self) -> str:
        r = subprocess.run([self.script, "exec", self.name, "journalctl", "-u", "batchd", "-n", "15",
                            "--no-pager"], capture_output=True, text=True, timeout=30)
        return "journal of batchd:\n" + r.stdout[-3000:]

    def show(self, unit: str, *props: str) -> dict[str, list[str]]:
        """`systemctl show -p ...` of a unit: property -> its values (DeviceAllow repeats)."""
        out = self.sh(f"systemctl show {shlex.quote(unit)} " + " ".join(f"-p {p}" for p in props)).stdout
        res: dict[str, list[str]] = {p: [] for p in props}
        for line in out.splitlines():
            k, _, v = line.partition("=")
            res.setdefault(k, []).append(v)
        return res

    def submit(self, user: str, script: str, *opts: str) -> int:
        """sbatch as `user` of a script written to its home; returns the job id."""
        path = f"job-{uuid.uuid4().hex[:8]}.sh"
        self.sh(f"cat > {path} <<'EOF'\n#!/bin/sh\n{script}\nEOF\n", user=user)
        out = self.sh(f"sbatch --parsable {' '.join(shlex.quote(o) for o in opts)} {path}", user=user).stdout
        return int(out.strip().split(";")[0])

    def state(self, job_id: int) -> str:
        out = self.sh(f"scontrol show job {job_id}").stdout
        return out.split("JobState=", 1)[1].split()[0]

    def wait_state(self, job_id: int, states: tuple[str, ...], timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            s = self.state(job_id)
            if s in states or time.monotonic() > deadline:
                assert s in states, f"job {job_id} is {s}, wanted {states}\n{self.journal_tail()}"
                return s
            time.sleep(0.2)

    def wait_answering(self, timeout: float = 30) -> None:
        """Poll `sinfo` until the daemon answers (after a crash, systemd restarts it)."""
        deadline = time.monotonic() + timeout
        while self.sh("sinfo -h", check=False).returncode != 0:
            assert time.monotonic() < deadline, f"batchd does not answer\n{self.journal_tail()}"
            time.sleep(0.2)

    def records(self, job_id: int) -> list[str]:
        """sacct's allocation lines of a job, one per recorded run (duplicates too: -D)."""
        out = self.sh(f"sacct -j {job_id} -X -D -n -P -o JobID,State,ExitCode").stdout
        return [ln for ln in out.splitlines() if ln.strip()]


def _skip(why: str) -> None:
    pytest.skip(f"systemd tier: {why}")


def _build_wheels(work: Path) -> tuple[Path, Path]:
    """Wheels of this checkout plus its dependencies in one folder, and a newer batchd
    wheel (same code, local version UPGRADE_VERSION) alone in another. Built from copies of
    the sources, as tests/install does (no build/ directory in the checkout)."""
    srcs = {}
    for tag, version_suffix in (("v1", ""), ("v2", UPGRADE_VERSION)):
        src = copy_wheel_sources(work / f"src-{tag}")
        text = (ROOT / "pyproject.toml").read_text()
        m = re.search(r'^version = "([^"]+)"$', text, re.M)
        assert m, "pyproject.toml has no version line"
        (src / "pyproject.toml").write_text(text.replace(m.group(0), f'version = "{m.group(1)}{version_suffix}"'))
        srcs[tag] = src
    wheels, newer = work / "wheels", work / "wheels-newer"
    for argv in ([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels), str(srcs["v1"])],
                 [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(newer), str(srcs["v2"])]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            _skip(f"cannot build the wheels for the box (no PyPI and no pip cache?): {r.stderr.strip()[-500:]}")
    return wheels, newer


def _wait_for_root_build(limit_s: float = 600.0) -> None:
    """`.ci/run` builds the root in the background while the suite runs: wait for that
    builder (its pid in `$SDROOT.building`) to end."""
    marker = Path(f"{SDROOT}.building")
    deadline = time.monotonic() + limit_s
    while marker.exists() and time.monotonic() < deadline:
        try:
            pid = int(marker.read_text().strip() or "0")
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError, FileNotFoundError):
            return  # no builder alive: whatever is there is what there is
        except PermissionError:
            pass
        time.sleep(2)


@pytest.fixture(scope="module")
def box():
    if os.geteuid() != 0:
        _skip("needs root (it boots a container with its own namespaces and cgroups)")
    if not (SDBOX_DIR / "sdbox.sh").exists():
        _skip(f"no box scripts at {SDBOX_DIR}")
    _wait_for_root_build()
    if not (SDROOT / "lib" / "systemd" / "systemd").exists():
        _skip(f"no root for the box at {SDROOT}: build it with {SDBOX_DIR}/make-root.sh {SDROOT} "
              "(.ci/run does when root)")
    work = Path(tempfile.mkdtemp(prefix="batchd-sdbox-"))
    os.chmod(work, 0o755)
    name = f"bd{os.getpid()}"
    b = Box(name)
    booted = False
    try:
        wheels, newer = _build_wheels(work)
        env = dict(os.environ, SDBOX_OVERLAY="1", SDBOX_MAX_S="900",
                   SDBOX_BINDS=f"{wheels}:/wheels {newer}:/wheels-newer {ROOT}:/src")
        up = subprocess.run([b.script, "up", str(SDROOT), "unified", name], capture_output=True, text=True,
                            env=env, timeout=120)
        booted = True
        if up.returncode != 0:
            _skip(f"the box did not boot: {(up.stdout + up.stderr).strip()[-800:]}")
        (wheel,) = wheels.glob("batchd-*.whl")
        block = readme_install_block()
        assert "/path/to/batchd" in block
        block = block.replace("/path/to/batchd", f"/wheels/{wheel.name}")
        b.sh(f"set -euxo pipefail; cd /src; {block}", timeout=240,
             env={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/wheels", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        for u in USERS:
            b.sh(f"useradd -m -N -s /bin/sh {u}")
        b.sh("for i in 0 1 2 3; do mknod -m 0666 /dev/nvidia$i c 195 $i; done")
        b.wait_answering()
        b.wheel, b.newer = wheel, next(newer.glob("batchd-*.whl"))
        yield b
    finally:
        if booted:
            down = subprocess.run([b.script, "down", name], capture_output=True, text=True, timeout=120)
            if "cgroups left" not in down.stdout:
                Path(f"/tmp/sdbox-{name}.log").unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def controllers(box) -> list[str]:
    """The cgroup v2 controllers the box's root has (none on a host that keeps them in v1)."""
    return box.sh("cat /sys/fs/cgroup/cgroup.controllers").stdout.split()


def missing_reason(ctl: str, controllers: list[str]) -> str:
    """Why the box's cgroup v2 lacks controller `ctl`, as far as the host shows it."""
    where = ("the host keeps it in a cgroup v1 hierarchy (/sys/fs/cgroup/" + ctl + ")"
             if os.path.isdir(f"/sys/fs/cgroup/{ctl}") else "the host does not delegate it to the box")
    return f"the box's cgroup v2 has no {ctl} controller (it has: {' '.join(controllers) or 'none'}): {where}"

