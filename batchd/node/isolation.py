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

from batchd.slurm.digits import isdigits
from batchd.slurm.hostlist import ranges

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


# ---------------------------------------------------------------- the job's unit

#: Slice every job unit goes into (created by systemd on first use).
SLICE = "batchd.slice"
#: Memory added to a job's MemoryMax for its supervisor, which shares the unit's cgroup.
SUPERVISOR_MEMORY_MB = 64
#: NVIDIA control devices every GPU job needs, besides its own /dev/nvidiaN.
NVIDIA_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
#: The MIG capability devices (/dev/nvidia-caps/nvidia-capN) as a device group name of
#: /proc/devices: a MIG job needs read access to its GPU- and compute-instance caps.
NVIDIA_CAPS_GROUP = "char-nvidia-caps"


def unit_name(job_id: int) -> str:
    return f"batchd-job-{int(job_id)}.service"


def job_devices(alloc_node: dict[str, Any], inventory: list[dict[str, Any]] | None = None) -> list[str]:
    """The device nodes a job may open on one node, from its allocation there.

    `alloc_node["gpus"]` holds whole-GPU indices (int or "3") and MIG instances
    ("3:MIG-<uuid>", parent index first); the card a gres/shard job's shards are on
    (`batchd.slurm.gres.shard_card`) adds that card. Each card is `/dev/nvidia<minor>`, the
    minor number from the inventory (`"minor"`) when known, else its index. A job with any
    GPU also gets the control devices, and a MIG job the capability group. No GPU: []."""
    minors = {int(g["index"]): int(g.get("minor", g["index"]))
              for g in inventory or [] if isinstance(g, dict) and "index" in g}
    cards: set[int] = set()
    mig = False
    from batchd.slurm.gres import shard_card  # here: `batchd node check` reads no GPU model otherwise

    card = shard_card(alloc_node)
    for g in list(alloc_node.get("gpus") or []) + ([card] if card is not None else []):
        s = str(g)
        idx, sep, _rest = s.partition(":")
        if sep:
            mig = True
        if isdigits(idx.strip()):
            cards.add(int(idx))
    if not cards:
        return []
    out = [f"/dev/nvidia{minors.get(i, i)}" for i in sorted(cards)]
    out += list(NVIDIA_CONTROL_DEVICES)
    if mig:
        out.append(NVIDIA_CAPS_GROUP)
    return out


def unit_command(*, systemd_run: str, job_id: int, run: int, user: str, jobdir: str, python: str,
                 mem_limit_mb: int | None, cpu_ids: list[int] | None, devices: list[str] | None,
                 log_path: str) -> list[str]:
    """The `systemd-run` command that starts a run's supervisor in its own transient unit.

    The unit is a service (`--service-type=exec`: systemd-run returns once the supervisor
    is exec'ed) in `batchd.slice`, outside `batchd.service`, garbage-collected when it ends
    (`--collect`, also after a failure). Properties: `MemoryMax` = the job's memory plus
    SUPERVISOR_MEMORY_MB, with `MemorySwapMax=0` (over the limit is an OOM kill, not swap);
    `OOMPolicy=continue` (a kernel OOM kill of the job must not stop the unit: its
    supervisor records OUT_OF_MEMORY); `AllowedCPUs` = the job's CPU ids; `DevicePolicy=closed`
    (only /dev/null, zero, full, random, urandom, tty, ptmx) plus `DeviceAllow` for each of
    its GPU devices (read-write; the MIG capability group read-only); `KillMode=control-group`
    so that stopping the unit ends every process of the job. The supervisor runs as root in
    the unit and starts the job as the user."""
    cmd = [systemd_run, f"--unit={unit_name(job_id)}", f"--slice={SLICE}", "--collect", "--quiet",
           "--service-type=exec",
           "-p", f"Description=batchd job {int(job_id)} run {int(run)} of {user}",
           "-p", "KillMode=control-group", "-p", "OOMPolicy=continue",
           "-p", f"StandardOutput=append:{log_path}", "-p", f"StandardError=append:{log_path}",
           "-p", "DevicePolicy=closed"]
    if mem_limit_mb:
        cmd += ["-p", f"MemoryMax={int(mem_limit_mb) + SUPERVISOR_MEMORY_MB}M", "-p", "MemorySwapMax=0"]
    if cpu_ids:
        cmd += ["-p", f"AllowedCPUs={ranges(cpu_ids)}"]
    for dev in devices or []:
        cmd += ["-p", f"DeviceAllow={dev} {'r' if dev == NVIDIA_CAPS_GROUP else 'rw'}"]
    cmd += ["--", python, "-m", "batchd.node.supervisor", "--unit", jobdir]
    return cmd


def own_cgroup_dir(root: str = "/") -> str | None:
    """This process's cgroup v2 directory, or None without the unified hierarchy."""
    cg = _own_cgroup(root)
    if cg is None:
        return None
    return os.path.join(root, "sys/fs/cgroup", cg.lstrip("/"))


def oom_kills(cgroup_dir: str | None) -> int | None:
    """The `oom_kill` count of a cgroup's memory.events (kernel OOM kills inside it,
    the memory limit's kills included), or None where it cannot be read."""
    if cgroup_dir is None:
        return None
    text = _read(os.path.join(cgroup_dir, "memory.events"))
    if text is None:
        return None
    for line in text.splitlines():
        key, _, val = line.partition(" ")
        if key == "oom_kill" and isdigits(val.strip()):
            return int(val)
    return None


def choose_mode(setting: str, report: IsolationReport) -> str:
    """The launcher's mode for the config's `isolation` setting and a detection report:
    "plain" -> plain; "auto" -> what detection found; "systemd" -> systemd, or a
    ValueError naming why not (an admin who asks for kernel isolation must not get less
    silently)."""
    if setting == "plain":
        return "plain"
    if setting == "auto":
        return report.mode
    if setting == "systemd":
        if report.mode != "systemd":
            raise ValueError("isolation = \"systemd\" but this node cannot: "
                             + "; ".join(r for r in report.reasons if not r.startswith("fallback")))
        return "systemd"
    raise ValueError(f'isolation must be "auto", "systemd" or "plain", got {setting!r}')
