"""GPU discovery through NVML (`nvidia-ml-py`, imported as `pynvml`), read-only.

`discover()` returns an `Inventory`: every GPU that enumerated (index, UUID, product name,
batchd type, memory, PCI bus id, NUMA node, CPU affinity, MIG mode and MIG devices) and the
pairwise link matrices. It never changes a GPU setting (no Set*/Create*/Destroy*/reset) and
never raises: no `pynvml`, no library, no driver, a driver/library mismatch or a GPU lost in
the middle of the enumeration give one log line and an inventory of the GPUs that did
enumerate (`Inventory.reason` says why it is empty or short).

Type names (as Slurm's gpu/nvml plugin derives them, `gres.conf AutoDetect=nvml`):

- `slurm_type`: the product name lower-cased with spaces turned into underscores
  (`NVIDIA H200` -> `nvidia_h200`, `NVIDIA H100 80GB HBM3` -> `nvidia_h100_80gb_hbm3`).
- `type` (what batchd schedules and bills, `--gres=gpu:TYPE`): `slurm_type` without the
  leading `nvidia_` (`h200`, `h100_80gb_hbm3`). It is a substring of `slurm_type`, so it is
  also a valid slurm.conf Type for the same card (Slurm matches configured types as
  substrings). An alias table overrides it: keys are product names (`"NVIDIA RTX PRO 6000
  Blackwell Server Edition"`) or Slurm types, compared case-insensitively.
- MIG profile (`1g.24gb`, `3g.71gb`, `1c.3g.20gb`): the text after `MIG ` in the MIG device's
  NVML name; when the name has none, `[<ci>c.]<gi>g.<ceil(memory MiB / 1024)>gb` from its
  attributes (the `<ci>c.` prefix only when the compute instance is smaller than the GPU
  instance). Slurm's full MIG type is `<slurm_type cut at the first '-'>_<profile>`
  (`nvidia_h200_1g.18gb`), kept as `MigDevice.slurm_type`.

Units: memory in MiB; `links` levels are NVML's `nvmlGpuTopologyLevel_t` values (0 same
board, 10 one PCIe switch, 20 several switches, 30 host bridge, 40 same NUMA node, 50 across
sockets; lower is closer).
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger(__name__)

_MIG_NAME = re.compile(r"MIG\s+(\S+)\s*$")


@dataclass
class MigDevice:
    """One MIG device (a compute instance inside a GPU instance) of a GPU in MIG mode."""
    uuid: str                 # "MIG-<uuid>", what CUDA_VISIBLE_DEVICES takes
    profile: str              # "1g.24gb": the batchd GPU type of the slice
    slurm_type: str           # "nvidia_h200_1g.18gb": Slurm's AutoDetect=nvml type
    memory_mb: int
    gi_id: int | None         # GPU instance id
    ci_id: int | None         # compute instance id
    slices: int               # GPU-instance slice count (the 1 of "1g")
    parent_slices: int        # slices of the whole parent GPU (7 on H200, 4 on RTX PRO 6000)

    @property
    def share(self) -> float:
        """The fraction of the parent GPU this slice counts as toward `gres/gpu`."""
        return self.slices / self.parent_slices if self.parent_slices else 0.0


@dataclass
class Gpu:
    """One physical GPU as NVML numbers it (index order = PCI bus id order)."""
    index: int
    uuid: str
    name: str                 # product name, "NVIDIA H200"
    type: str                 # batchd type, "h200" (after aliases)
    slurm_type: str           # "nvidia_h200"
    memory_mb: int
    pci_bus_id: str           # "00000000:19:00.0" (NVML form, 8-hex domain)
    minor: int | None = None  # /dev/nvidia<minor>
    numa: int | None = None   # NUMA node of the GPU, None when unknown
    cpus: list[int] = field(default_factory=list)   # ideal CPU ids, ascending
    mig_mode: bool | None = None         # None: MIG not supported
    mig_pending: bool | None = None      # mode after the next GPU reset
    mig: list[MigDevice] = field(default_factory=list)


@dataclass
class Inventory:
    """What one discovery found. `links[i][j]` matrices are indexed by NVML GPU index
    (0..count-1); an entry of a GPU that failed to enumerate is None."""
    gpus: list[Gpu] = field(default_factory=list)
    count: int = 0                       # NVML device count (>= len(gpus))
    driver: str | None = None
    nvml_version: str | None = None
    reason: str | None = None            # why there are no (or fewer) GPUs
    errors: list[str] = field(default_factory=list)
    nvlink: list[list[int | None]] = field(default_factory=list)       # active links i->j, -1 self
    nvlink_p2p: list[list[bool | None]] = field(default_factory=list)  # NVLink P2P (also via NVSwitch)
    pcie: list[list[int | None]] = field(default_factory=list)         # common ancestor level, 0 self

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready (`batchd node inventory --json`)."""
        d = asdict(self)
        for g, gd in zip(self.gpus, d["gpus"], strict=True):
            for m, md in zip(g.mig, gd["mig"], strict=True):
                md["share"] = round(m.share, 6)
        return d

    def to_snapshot_gpus(self) -> list[dict[str, Any]]:
        """The devices in the snapshot's device form (docs/snapshot.md):
        `{"index", "uuid", "type", "mig": [{"profile", "uuid"}]}`, in index order, plus
        placement extras the scheduler may use:

        - `"numa"`: NUMA node (int or None); `"cpus"`: ideal CPU ids; `"minor"`: the
          device's minor number (`/dev/nvidia<minor>`) when NVML gives it; `"memory_mb"`
          of a GPU not in MIG mode;
        - `"links"`: `{"nvlink": [n per GPU index, -1 self], "nvlink_p2p": [bool per index],
          "pcie": [level per index, 0 self]}` (rows of the inventory's matrices);
        - per MIG device: `"slices"`, `"parent_slices"`, `"memory_mb"`; on a GPU in MIG
          mode also `"slices"`: the whole GPU's slice count (the snapshot's extension read
          by `batchd.scheduler.snapshot` for the `gres/gpu` share).

        A GPU in MIG mode lists its MIG devices and is never to be handed out whole; one in
        MIG mode with no MIG device is left out (it can run nothing until an admin creates
        instances). A non-MIG GPU has `"mig": []`.
        """
        out = []
        for g in self.gpus:
            if g.mig_mode and not g.mig:
                continue
            d: dict[str, Any] = {
                "index": g.index, "uuid": g.uuid, "type": g.type,
                "mig": [{"profile": m.profile, "uuid": m.uuid, "slices": m.slices,
                         "parent_slices": m.parent_slices, "memory_mb": m.memory_mb}
                        for m in g.mig],
                "numa": g.numa, "cpus": list(g.cpus),
                "links": {"nvlink": _row(self.nvlink, g.index),
                          "nvlink_p2p": _row(self.nvlink_p2p, g.index),
                          "pcie": _row(self.pcie, g.index)},
            }
            if g.mig:
                d["slices"] = g.mig[0].parent_slices
            if not g.mig_mode:
                d["memory_mb"] = g.memory_mb  # for MPS's per-job memory limit on shards
            if g.minor is not None:
                d["minor"] = g.minor  # /dev/nvidia<minor>, for the job unit's DeviceAllow
            out.append(d)
        return out


def _row(matrix: list[list[Any]], i: int) -> list[Any]:
    return list(matrix[i]) if i < len(matrix) else []


# ---- naming ---------------------------------------------------------------------------

def slurm_type_name(product: str) -> str:
    """Slurm's `gpu_common_underscorify_tolower`: lower case, spaces to underscores."""
    return product.strip().lower().replace(" ", "_")


def gpu_type(product: str, aliases: dict[str, str] | None = None) -> str:
    """The batchd type of a product name: an alias when one matches the product name or
    its Slurm type (case-insensitive), else the Slurm type without a leading `nvidia_`."""
    st = slurm_type_name(product)
    for key, value in (aliases or {}).items():
        k = key.strip().lower()
        if k == product.strip().lower() or k == st:
            return value
    return st[len("nvidia_"):] if st.startswith("nvidia_") and len(st) > 7 else st


def mig_profile(mig_name: str | None, gi_slices: int, ci_slices: int, memory_mb: int) -> str:
    """The MIG profile name: from the MIG device's NVML name (`... MIG 1g.24gb`), else
    `[<ci>c.]<gi>g.<ceil(MiB/1024)>gb`."""
    if mig_name:
        m = _MIG_NAME.search(mig_name)
        if m:
            return m.group(1).lower()
    prof = f"{gi_slices}g.{math.ceil(memory_mb / 1024)}gb"
    return f"{ci_slices}c.{prof}" if ci_slices and ci_slices != gi_slices else prof


def cpus_from_masks(masks: Any) -> list[int]:
    """CPU ids from NVML's affinity array of 64-bit words (word k holds CPUs 64k..64k+63)."""
    out = []
    for k, word in enumerate(masks):
        w = int(word)
        bit = 0
        while w:
            if w & 1:
                out.append(64 * k + bit)
            w >>= 1
            bit += 1
    return out


# ---- discovery ------------------------------------------------------------------------

def _err_name(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _sysfs_numa(bus_id: str) -> int | None:
    """NUMA node from sysfs (`0000:19:00.0` form); None when absent or -1."""
    parts = bus_id.lower().split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    try:
        with open(f"/sys/bus/pci/devices/{':'.join(parts)}/numa_node") as f:
            n = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return n if n >= 0 else None


def _numa(nvml: Any, h: Any, bus_id: str) -> int | None:
    try:
        nodes = cpus_from_masks(nvml.nvmlDeviceGetMemoryAffinity(h, 1, nvml.NVML_AFFINITY_SCOPE_NODE))
        if len(nodes) == 1:
            return nodes[0]
    except Exception:  # noqa: BLE001 - optional field; NotSupported/FunctionNotFound are common
        pass
    return _sysfs_numa(bus_id)


def _parent_slices(nvml: Any, h: Any) -> int:
    """The slice count of the whole GPU: the largest GPU-instance profile it offers, else
    the maximum MIG device count (equal on A100/H100/H200/RTX PRO 6000)."""
    best = 0
    for p in range(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
        try:
            best = max(best, int(nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, p).sliceCount))
        except Exception:  # noqa: BLE001 - profiles absent on this GPU raise NotSupported
            continue
    if best:
        return best
    try:
        return int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))
    except Exception:  # noqa: BLE001
        return 0


def _mig_devices(nvml: Any, h: Any, g: Gpu, inv: Inventory) -> None:
    try:
        max_count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))
    except nvml.NVMLError as e:
        inv.errors.append(f"gpu {g.index}: nvmlDeviceGetMaxMigDeviceCount: {_err_name(e)}")
        return
    parent_slices = _parent_slices(nvml, h)
    mig_prefix = g.slurm_type.split("-", 1)[0]
    for j in range(max_count):
        try:
            m = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except nvml.NVMLError_NotFound:
            continue                     # MIG indices may have holes
        except nvml.NVMLError as e:
            inv.errors.append(f"gpu {g.index} mig {j}: {_err_name(e)}")
            continue
        try:
            uuid = nvml.nvmlDeviceGetUUID(m)
            attrs = nvml.nvmlDeviceGetAttributes(m)
            gi_slices = int(attrs.gpuInstanceSliceCount)
            ci_slices = int(attrs.computeInstanceSliceCount)
            mem = int(attrs.memorySizeMB)
        except nvml.NVMLError as e:
            inv.errors.append(f"gpu {g.index} mig {j}: {_err_name(e)}")
            log.warning("mig device skipped gpu=%s mig_index=%s error=%r", g.index, j, str(e))
            continue
        name = _optional(nvml, "nvmlDeviceGetName", m)
        gi = _optional(nvml, "nvmlDeviceGetGpuInstanceId", m)
        ci = _optional(nvml, "nvmlDeviceGetComputeInstanceId", m)
        prof = mig_profile(name, gi_slices, ci_slices, mem)
        g.mig.append(MigDevice(uuid=uuid, profile=prof, slurm_type=f"{mig_prefix}_{prof}",
                               memory_mb=mem, gi_id=gi, ci_id=ci, slices=gi_slices,
                               parent_slices=parent_slices or gi_slices))
    if not g.mig:
        log.warning("gpu in MIG mode has no MIG devices gpu=%s uuid=%s: it is not schedulable "
                    "until an admin creates MIG instances", g.index, g.uuid)


def _optional(nvml: Any, fn: str, *args: Any) -> Any:
    try:
        return getattr(nvml, fn)(*args)
    except Exception:  # noqa: BLE001 - optional field
        return None


def _gpu(nvml: Any, i: int, aliases: dict[str, str] | None, inv: Inventory) -> tuple[Gpu, Any]:
    """One GPU's record; raises NVMLError when a required field fails."""
    h = nvml.nvmlDeviceGetHandleByIndex(i)
    name = nvml.nvmlDeviceGetName(h)
    uuid = nvml.nvmlDeviceGetUUID(h)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    bus = nvml.nvmlDeviceGetPciInfo(h).busId
    bus = bus.decode() if isinstance(bus, bytes) else str(bus)
    g = Gpu(index=i, uuid=uuid, name=name, type=gpu_type(name, aliases),
            slurm_type=slurm_type_name(name), memory_mb=int(mem.total) // (1024 * 1024),
            pci_bus_id=bus, minor=_optional(nvml, "nvmlDeviceGetMinorNumber", h))
    g.numa = _numa(nvml, h, bus)
    # at least 1024 CPUs' worth of words, as Slurm's CPU_SET_SIZE; more when the host has more
    words = max(16, math.ceil((os.cpu_count() or 1) / 64))
    try:
        g.cpus = cpus_from_masks(nvml.nvmlDeviceGetCpuAffinity(h, words))
    except nvml.NVMLError as e:
        inv.errors.append(f"gpu {i}: nvmlDeviceGetCpuAffinity: {_err_name(e)}")
    try:
        cur, pending = nvml.nvmlDeviceGetMigMode(h)
        g.mig_mode = cur == nvml.NVML_DEVICE_MIG_ENABLE
        g.mig_pending = pending == nvml.NVML_DEVICE_MIG_ENABLE
        if g.mig_pending != g.mig_mode:
            log.info("mig mode change pending gpu=%s current=%s after_reset=%s",
                     i, g.mig_mode, g.mig_pending)
    except nvml.NVMLError_NotSupported:
        pass
    except nvml.NVMLError as e:
        inv.errors.append(f"gpu {i}: nvmlDeviceGetMigMode: {_err_name(e)}")
    if g.mig_mode:
        _mig_devices(nvml, h, g, inv)
    return g, h


def _links(nvml: Any, inv: Inventory, handles: dict[int, Any]) -> None:
    n = inv.count
    inv.nvlink = [[None] * n for _ in range(n)]
    inv.nvlink_p2p = [[None] * n for _ in range(n)]
    inv.pcie = [[None] * n for _ in range(n)]
    by_bus = {g.pci_bus_id.lower(): g.index for g in inv.gpus}
    for i in handles:
        inv.nvlink[i][i], inv.nvlink_p2p[i][i], inv.pcie[i][i] = -1, True, 0
        for j in handles:
            if j != i:
                inv.nvlink[i][j] = 0
                inv.nvlink_p2p[i][j] = False
    for i, h in handles.items():
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 0)):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(h, link)
            except nvml.NVMLError_InvalidArgument:
                continue                 # no such link on this GPU
            except nvml.NVMLError:
                break                    # NotSupported: no NVLink at all
            if state != nvml.NVML_FEATURE_ENABLED:
                continue
            try:
                remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId
            except nvml.NVMLError:
                continue
            remote = remote.decode() if isinstance(remote, bytes) else str(remote)
            peer = by_bus.get(remote.lower())
            if peer is not None and peer != i and peer in handles:
                inv.nvlink[i][peer] = (inv.nvlink[i][peer] or 0) + 1
    for i, hi in handles.items():
        for j, hj in handles.items():
            if j <= i:
                continue
            try:
                level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj))
                inv.pcie[i][j] = inv.pcie[j][i] = level
            except nvml.NVMLError as e:
                inv.errors.append(f"gpu {i}-{j}: nvmlDeviceGetTopologyCommonAncestor: {_err_name(e)}")
            try:
                ok = nvml.nvmlDeviceGetP2PStatus(hi, hj, nvml.NVML_P2P_CAPS_INDEX_NVLINK) \
                    == nvml.NVML_P2P_STATUS_OK
            except nvml.NVMLError:
                ok = False
            inv.nvlink_p2p[i][j] = inv.nvlink_p2p[j][i] = ok or bool(inv.nvlink[i][j])


def discover(aliases: dict[str, str] | None = None, nvml: Any = None) -> Inventory:
    """Enumerate this machine's GPUs. `aliases` maps product names or Slurm types to batchd
    types; `nvml` is the NVML module (default `import pynvml`; tests pass a fake). Never
    raises for NVML or driver trouble; see the module docstring."""
    inv = Inventory()
    if nvml is None:
        try:
            import pynvml as nvml_mod  # type: ignore[import-untyped]
        except ImportError as e:
            inv.reason = f"pynvml not importable ({e}); install nvidia-ml-py"
            log.warning("gpu discovery: no GPUs: %s", inv.reason)
            return inv
        nvml = nvml_mod
    if not hasattr(nvml, "nvmlDeviceGetMigDeviceHandleByIndex"):
        # nvidia-ml-py3 (2017) and old pynvml releases install the same module name
        log.warning("gpu discovery: the pynvml at %s is too old for MIG (nvidia-ml-py3?); "
                    "install nvidia-ml-py", getattr(nvml, "__file__", "?"))
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        inv.reason = f"nvmlInit failed: {_err_name(e)}"
        log.warning("gpu discovery: no GPUs: %s", inv.reason)
        return inv
    except Exception as e:  # noqa: BLE001 - e.g. NVMLLibraryMismatchError, OSError
        inv.reason = f"nvmlInit failed: {_err_name(e)}"
        log.warning("gpu discovery: no GPUs: %s", inv.reason)
        return inv
    try:
        inv.driver = _optional(nvml, "nvmlSystemGetDriverVersion")
        inv.nvml_version = _optional(nvml, "nvmlSystemGetNVMLVersion")
        try:
            inv.count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as e:
            inv.reason = f"nvmlDeviceGetCount failed: {_err_name(e)}"
            log.warning("gpu discovery: no GPUs: %s", inv.reason)
            return inv
        handles: dict[int, Any] = {}
        for i in range(inv.count):
            try:
                g, h = _gpu(nvml, i, aliases, inv)
            except Exception as e:  # noqa: BLE001 - one bad GPU must not hide the others
                inv.errors.append(f"gpu {i}: {_err_name(e)}")
                log.warning("gpu skipped index=%s error=%r", i, _err_name(e))
                continue
            inv.gpus.append(g)
            handles[i] = h
        if inv.count == 0:
            inv.reason = "NVML reports no GPU"
        elif len(inv.gpus) < inv.count:
            inv.reason = f"{inv.count - len(inv.gpus)} of {inv.count} GPUs failed to enumerate"
        try:
            _links(nvml, inv, handles)
        except Exception as e:  # noqa: BLE001 - topology is advisory
            inv.errors.append(f"topology: {_err_name(e)}")
            log.warning("gpu topology unavailable error=%r", _err_name(e))
        log.info("gpu discovery done gpus=%d count=%d driver=%s", len(inv.gpus), inv.count, inv.driver)
        return inv
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
