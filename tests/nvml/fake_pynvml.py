"""A fake `pynvml` module for tests: a machine described as data, the REAL error classes
and constants of the installed nvidia-ml-py (anything the fake does not define is looked up
in the real module, so `fake.NVMLError_NotFound is pynvml.NVMLError_NotFound`).

Failures are injected with `fail`: `{"nvmlInit": pynvml.NVMLError_DriverNotLoaded}` for a
module-level call, or `{("nvmlDeviceGetUUID", 1): err}` for the call on GPU index 1, where
`err` is an exception class or instance."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml as real


@dataclass
class FakeMig:
    uuid: str
    name: str | None          # NVML name, e.g. "NVIDIA H200 MIG 1g.18gb"; None -> NotSupported
    gi_slices: int
    ci_slices: int
    memory_mb: int
    gi: int = 0
    ci: int = 0
    used_mb: int = 0
    procs: list[tuple[int, int]] = field(default_factory=list)     # (pid, used MiB)


@dataclass
class FakeGpu:
    name: str
    uuid: str
    bus: str
    memory_mb: int = 81559
    used_mb: int = 0
    minor: int = 0
    cpus: list[int] = field(default_factory=list)
    numa_mask: int | None = None       # memory affinity word; None -> NotSupported
    mig: tuple[int, int] | None = None  # (current, pending); None -> NotSupported
    migs: dict[int, FakeMig] = field(default_factory=dict)        # MIG index -> device
    max_mig: int = 7
    profile_slices: list[int] = field(default_factory=list)      # GI profiles' slice counts
    nvlinks: list[str | None] = field(default_factory=list)      # per link: remote bus or None (down)
    util: tuple[int, int] = (0, 0)     # (gpu %, memory %)
    procs: list[tuple[int, int]] = field(default_factory=list)   # compute processes (pid, MiB)
    proc_util: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, sm %, mem %)


@dataclass
class Handle:
    gpu: FakeGpu
    index: int
    mig: FakeMig | None = None


class FakeNvml:
    """Looks like the `pynvml` module for the calls batchd makes."""

    def __init__(self, gpus: list[FakeGpu], *, pcie: dict[tuple[int, int], int] | None = None,
                 p2p_nvlink: set[tuple[int, int]] | None = None, fail: dict[Any, Any] | None = None,
                 driver: str = "580.159.04") -> None:
        self.gpus = gpus
        self.pcie = pcie or {}
        self.p2p_nvlink = p2p_nvlink or set()
        self.fail = fail or {}
        self.driver = driver
        self.calls: list[str] = []
        self.initialised = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml"):
            raise AttributeError(f"fake pynvml has no {name}")
        return getattr(real, name)

    # -- helpers
    def _check(self, fn: str, h: Handle | None = None) -> None:
        self.calls.append(fn)
        if fn != "nvmlInit" and not self.initialised:
            raise real.NVMLError_Uninitialized()
        for key in ((fn, h.index) if h is not None else None, fn):
            if key is not None and key in self.fail:
                err = self.fail[key]
                raise err() if isinstance(err, type) else err

    # -- init
    def nvmlInit(self) -> None:
        self._check("nvmlInit")
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check("nvmlSystemGetNVMLVersion")
        return "13." + self.driver

    # -- devices
    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Handle:
        h = Handle(self.gpus[i], i)
        self._check("nvmlDeviceGetHandleByIndex", h)
        return h

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        self._check("nvmlDeviceGetHandleByUUID")
        for i, g in enumerate(self.gpus):
            if g.uuid == uuid:
                return Handle(g, i)
            for m in g.migs.values():
                if m.uuid == uuid:
                    return Handle(g, i, m)
        raise real.NVMLError_NotFound()

    def nvmlDeviceGetName(self, h: Handle) -> str:
        self._check("nvmlDeviceGetName", h)
        if h.mig is not None:
            if h.mig.name is None:
                raise real.NVMLError_NotSupported()
            return h.mig.name
        return h.gpu.name

    def nvmlDeviceGetUUID(self, h: Handle) -> str:
        self._check("nvmlDeviceGetUUID", h)
        return h.mig.uuid if h.mig else h.gpu.uuid

    def nvmlDeviceGetMemoryInfo(self, h: Handle) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo", h)
        total, used = (h.mig.memory_mb, h.mig.used_mb) if h.mig else (h.gpu.memory_mb, h.gpu.used_mb)
        mib = 1024 * 1024
        return SimpleNamespace(total=total * mib, used=used * mib, free=(total - used) * mib)

    def nvmlDeviceGetPciInfo(self, h: Handle) -> SimpleNamespace:
        self._check("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=h.gpu.bus)

    def nvmlDeviceGetMinorNumber(self, h: Handle) -> int:
        self._check("nvmlDeviceGetMinorNumber", h)
        return h.gpu.minor

    def nvmlDeviceGetMemoryAffinity(self, h: Handle, size: int, scope: int) -> list[int]:
        self._check("nvmlDeviceGetMemoryAffinity", h)
        if h.gpu.numa_mask is None:
            raise real.NVMLError_NotSupported()
        return [h.gpu.numa_mask] + [0] * (size - 1)

    def nvmlDeviceGetCpuAffinity(self, h: Handle, size: int) -> list[int]:
        self._check("nvmlDeviceGetCpuAffinity", h)
        words = [0] * size
        for c in h.gpu.cpus:
            if c // 64 < size:
                words[c // 64] |= 1 << (c % 64)
        return words

    def nvmlDeviceGetMigMode(self, h: Handle) -> list[int]:
        self._check("nvmlDeviceGetMigMode", h)
        if h.gpu.mig is None:
            raise real.NVMLError_NotSupported()
        return list(h.gpu.mig)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Handle) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount", h)
        return h.gpu.max_mig if h.gpu.mig and h.gpu.mig[0] else 0

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: Handle, p: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetGpuInstanceProfileInfo", h)
        if not (h.gpu.mig and h.gpu.mig[0]) or p >= len(h.gpu.profile_slices):
            raise real.NVMLError_NotSupported()
        return SimpleNamespace(sliceCount=h.gpu.profile_slices[p])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Handle, j: int) -> Handle:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if j not in h.gpu.migs:
            raise real.NVMLError_NotFound()
        return Handle(h.gpu, h.index, h.gpu.migs[j])

    def nvmlDeviceGetAttributes(self, h: Handle) -> SimpleNamespace:
        self._check("nvmlDeviceGetAttributes", h)
        m = h.mig
        if m is None:
            raise real.NVMLError_NotSupported()
        return SimpleNamespace(gpuInstanceSliceCount=m.gi_slices, computeInstanceSliceCount=m.ci_slices,
                               memorySizeMB=m.memory_mb)

    def nvmlDeviceGetGpuInstanceId(self, h: Handle) -> int:
        self._check("nvmlDeviceGetGpuInstanceId", h)
        assert h.mig is not None
        return h.mig.gi

    def nvmlDeviceGetComputeInstanceId(self, h: Handle) -> int:
        self._check("nvmlDeviceGetComputeInstanceId", h)
        assert h.mig is not None
        return h.mig.ci

    # -- topology
    def nvmlDeviceGetNvLinkState(self, h: Handle, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkState", h)
        if not h.gpu.nvlinks:
            raise real.NVMLError_NotSupported()
        if link >= len(h.gpu.nvlinks):
            raise real.NVMLError_InvalidArgument()
        return real.NVML_FEATURE_ENABLED if h.gpu.nvlinks[link] else real.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: Handle, link: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetNvLinkRemotePciInfo", h)
        return SimpleNamespace(busId=h.gpu.nvlinks[link])

    def nvmlDeviceGetTopologyCommonAncestor(self, a: Handle, b: Handle) -> int:
        self._check("nvmlDeviceGetTopologyCommonAncestor", a)
        key = (min(a.index, b.index), max(a.index, b.index))
        return self.pcie.get(key, real.NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetP2PStatus(self, a: Handle, b: Handle, cap: int) -> int:
        self._check("nvmlDeviceGetP2PStatus", a)
        key = (min(a.index, b.index), max(a.index, b.index))
        return real.NVML_P2P_STATUS_OK if key in self.p2p_nvlink else real.NVML_P2P_STATUS_NOT_SUPPORTED

    # -- usage
    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> SimpleNamespace:
        self._check("nvmlDeviceGetUtilizationRates", h)
        if h.mig is not None or (h.gpu.mig and h.gpu.mig[0]):
            raise real.NVMLError_NotSupported()
        return SimpleNamespace(gpu=h.gpu.util[0], memory=h.gpu.util[1])

    def nvmlDeviceGetComputeRunningProcesses(self, h: Handle) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetComputeRunningProcesses", h)
        procs = h.mig.procs if h.mig else h.gpu.procs
        return [SimpleNamespace(pid=p, usedGpuMemory=mb * 1024 * 1024, gpuInstanceId=0xFFFFFFFF,
                                computeInstanceId=0xFFFFFFFF) for p, mb in procs]

    def nvmlDeviceGetProcessUtilization(self, h: Handle, ts: int) -> list[SimpleNamespace]:
        self._check("nvmlDeviceGetProcessUtilization", h)
        if h.mig is not None or (h.gpu.mig and h.gpu.mig[0]):
            raise real.NVMLError_NotSupported()
        if not h.gpu.proc_util:
            raise real.NVMLError(real.NVML_SUCCESS)   # the binding's quirk: SUCCESS raised
        now = int(time.time() * 1e6)
        return [SimpleNamespace(pid=p, timeStamp=now, smUtil=sm, memUtil=mu, encUtil=0, decUtil=0)
                for p, sm, mu in h.gpu.proc_util]


def h200(i: int, **kw: Any) -> FakeGpu:
    """An H200 SXM at NVML index i (bus 0x19 + 0x10*i), MIG capable but off."""
    kw.setdefault("mig", (0, 0))
    return FakeGpu(name="NVIDIA H200", uuid=f"GPU-{i:08x}-aaaa-bbbb-cccc-000000000000",
                   bus=f"00000000:{0x19 + 0x10 * i:02X}:00.0", memory_mb=143771, minor=i, **kw)
