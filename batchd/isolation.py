"""Which job isolation this node offers: a pure detection report (no cgroup or unit is
created unless `probe=True`), shown by `batchd node check` and read by the launcher.

Modes:

- `"systemd"`: systemd is PID 1 (`/run/systemd/system`), the unified cgroup v2 hierarchy is
  mounted (`/sys/fs/cgroup/cgroup.controllers`), `systemd-run` is on PATH and the daemon
  runs as root. Each job then runs in its own transient unit `batchd-job-<id>.service` in
  `batchd.slice`, outside `batchd.service` (a daemon restart never touches it), with
  `MemoryMax`, `AllowedCPUs`, `TasksMax` and `DevicePolicy=closed` + the job's
  `/dev/nvidia*` enforced by the kernel.
- `"plain"`: anything else. Jobs run under the plain per-job supervisor in their own
  session; memory is enforced by polling (psutil, over the limit -> OUT_OF_MEMORY),
  devices only through CUDA_VISIBLE_DEVICES (advisory).

`delegated` additionally says whether the daemon's own cgroup is a writable cgroup v2
directory with the memory controller available (systemd `Delegate=yes`): limits could then
be written without systemd (reported for information; the launcher uses the two modes
above). Every file is read below `root` so tests can give a fake tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

NEEDED_CONTROLLERS = ("cpuset", "memory", "pids")


@dataclass
class IsolationReport:
    mode: str                                   # "systemd" | "plain"
    reasons: list[str] = field(default_factory=list)   # why this mode, one line each
    warnings: list[str] = field(default_factory=list)  # what is weaker than it could be
    systemd: bool = False                       # systemd is PID 1
    cgroup2: bool = False                       # unified hierarchy at /sys/fs/cgroup
    controllers: list[str] = field(default_factory=list)      # root cgroup's controllers
    own_cgroup: str | None = None               # "/system.slice/batchd.service"
    own_controllers: list[str] = field(default_factory=list)  # controllers in own cgroup
    delegated: bool = False                     # own cgroup writable, memory controller there
    systemd_run: str | None = None              # path of systemd-run
    is_root: bool = False
    probe: dict[str, Any] | None = None         # {"ok", "rc", "stderr"} when probed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """Human report: the mode first, then why, then details."""
        out = [f"isolation: {self.mode}"]
        out += [f"  why: {r}" for r in self.reasons]
        out += [f"  warning: {w}" for w in self.warnings]
        out.append(f"  systemd PID 1: {'yes' if self.systemd else 'no'}; cgroup v2: "
                   f"{'yes' if self.cgroup2 else 'no'}; root: {'yes' if self.is_root else 'no'}; "
                   f"systemd-run: {self.systemd_run or 'not found'}")
        if self.cgroup2:
            out.append(f"  controllers: {' '.join(self.controllers) or '-'}")
            out.append(f"  own cgroup: {self.own_cgroup or '?'} (controllers: "
                       f"{' '.join(self.own_controllers) or '-'}; delegated: {'yes' if self.delegated else 'no'})")
        if self.probe is not None:
            p = self.probe
            res = "ok" if p["ok"] else f"failed rc={p['rc']} {p['stderr']}"
            out.append(f"  probe (systemd-run --scope MemoryMax/AllowedCPUs/DevicePolicy): {res}")
        return out


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _own_cgroup(root: str) -> str | None:
    text = _read(os.path.join(root, "proc/self/cgroup"))
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def run_probe(systemd_run: str, timeout_s: float = 15.0) -> dict[str, Any]:
    """Start `/bin/true` in a transient scope with the properties jobs need; rc 0 means
    transient units with MemoryMax, AllowedCPUs and DevicePolicy work here."""
    unit = f"batchd-probe-{uuidlib.uuid4().hex[:8]}"
    cmd = [systemd_run, "--scope", "--quiet", f"--unit={unit}", "-p", "MemoryMax=64M",
           "-p", "AllowedCPUs=0", "-p", "DevicePolicy=closed", "/bin/true"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"ok": False, "rc": None, "stderr": str(e)}
    return {"ok": p.returncode == 0, "rc": p.returncode, "stderr": p.stderr.strip()[-300:]}


def detect(root: str = "/", *, probe: bool = False, euid: int | None = None,
           which: Callable[[str], str | None] = shutil.which,
           prober: Callable[[str], dict[str, Any]] = run_probe) -> IsolationReport:
    """Detect the isolation mode. `root` prefixes every path read (tests); `euid` defaults
    to the process's; `probe=True` also runs `prober(systemd_run)` (creates and removes one
    transient scope) when the static checks pass."""
    r = IsolationReport(mode="plain")
    r.is_root = (os.geteuid() if euid is None else euid) == 0
    r.systemd = os.path.isdir(os.path.join(root, "run/systemd/system"))
    cg = os.path.join(root, "sys/fs/cgroup")
    ctl = _read(os.path.join(cg, "cgroup.controllers"))
    r.cgroup2 = ctl is not None
    r.controllers = sorted(ctl.split()) if ctl else []
    r.systemd_run = which("systemd-run")
    if r.cgroup2:
        r.own_cgroup = _own_cgroup(root)
        if r.own_cgroup is not None:
            own_dir = os.path.join(cg, r.own_cgroup.lstrip("/"))
            own = _read(os.path.join(own_dir, "cgroup.controllers"))
            r.own_controllers = sorted(own.split()) if own else []
            r.delegated = (r.own_cgroup != "/" and "memory" in r.own_controllers
                           and os.access(own_dir, os.W_OK))

    if not r.systemd:
        r.reasons.append("systemd is not PID 1 (/run/systemd/system missing): no transient units")
    if not r.cgroup2:
        r.reasons.append("no cgroup v2 unified hierarchy (/sys/fs/cgroup/cgroup.controllers missing)")
    if r.systemd and not r.systemd_run:
        r.reasons.append("systemd-run not found on PATH")
    if not r.is_root:
        r.reasons.append("not running as root: jobs cannot be started as other users in their own units")
    ok = r.systemd and r.cgroup2 and r.systemd_run is not None and r.is_root
    if ok and probe and r.systemd_run:
        r.probe = prober(r.systemd_run)
        if not r.probe["ok"]:
            ok = False
            r.reasons.append(f"probe failed: systemd-run --scope with MemoryMax/AllowedCPUs/DevicePolicy "
                             f"rc={r.probe['rc']}: {r.probe['stderr']}")
    if ok:
        r.mode = "systemd"
        r.reasons.append("systemd PID 1 + cgroup v2 + systemd-run + root: each job in its own transient "
                         "unit batchd-job-<id>.service in batchd.slice (MemoryMax, AllowedCPUs, "
                         "DevicePolicy=closed)")
        missing = [c for c in NEEDED_CONTROLLERS if c not in r.controllers]
        if missing:
            r.warnings.append(f"cgroup controllers not available: {', '.join(missing)} "
                              "(the matching limits are not enforced)")
    else:
        r.reasons.append("fallback: plain supervisor; memory limit enforced by polling (OUT_OF_MEMORY), "
                         "GPUs only through CUDA_VISIBLE_DEVICES (advisory)")
        if r.delegated:
            r.warnings.append(f"own cgroup {r.own_cgroup} is delegated (cgroup v2 limits could be "
                              "written directly)")
    return r
