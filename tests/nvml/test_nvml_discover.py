"""batchd.node.nvml.discover against the fake pynvml (real error classes of nvidia-ml-py)."""

import json
import logging

import pynvml
import pytest
from fake_pynvml import FakeGpu, FakeMig, FakeNvml, h200

from batchd.node import nvml as bn

# ---- naming rules ----------------------------------------------------------------------


@pytest.mark.parametrize("product,slurm,batchd_type", [
    ("NVIDIA H200", "nvidia_h200", "h200"),
    ("NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3", "h100_80gb_hbm3"),
    ("NVIDIA A100-SXM4-40GB", "nvidia_a100-sxm4-40gb", "a100-sxm4-40gb"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition",
     "nvidia_rtx_pro_6000_blackwell_server_edition", "rtx_pro_6000_blackwell_server_edition"),
    ("Tesla V100-SXM2-16GB", "tesla_v100-sxm2-16gb", "tesla_v100-sxm2-16gb"),
])
def test_type_names(product, slurm, batchd_type):
    assert bn.slurm_type_name(product) == slurm
    assert bn.gpu_type(product) == batchd_type
    # the batchd type is a substring of Slurm's, so it matches as a slurm.conf Type too
    assert batchd_type in slurm


def test_alias_by_product_name_or_slurm_type_case_insensitive():
    aliases = {"NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtxpro6000", "nvidia_h200": "h200sxm"}
    assert bn.gpu_type("NVIDIA RTX PRO 6000 Blackwell Server Edition", aliases) == "rtxpro6000"
    assert bn.gpu_type("nvidia rtx pro 6000 blackwell server edition", aliases) == "rtxpro6000"
    assert bn.gpu_type("NVIDIA H200", aliases) == "h200sxm"
    assert bn.gpu_type("NVIDIA H100 80GB HBM3", aliases) == "h100_80gb_hbm3"


@pytest.mark.parametrize("name,gi,ci,mem,want", [
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 1g.24gb", 1, 1, 24320, "1g.24gb"),
    ("NVIDIA H200 MIG 3g.71gb", 3, 3, 71424, "3g.71gb"),
    ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", 3, 1, 19968, "1c.3g.20gb"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", 1, 1, 9856, "1g.10gb+me"),
    (None, 3, 3, 19968, "3g.20gb"),              # no name: slices + ceil(GiB)
    ("NVIDIA A100-SXM4-40GB", 7, 7, 40192, "7g.40gb"),  # name without "MIG": ceil(39.25)
    (None, 3, 1, 19968, "1c.3g.20gb"),
])
def test_mig_profile(name, gi, ci, mem, want):
    assert bn.mig_profile(name, gi, ci, mem) == want


def test_cpus_from_masks():
    assert bn.cpus_from_masks([0b1011, 1 << 63, 1]) == [0, 1, 3, 127, 128]
    assert bn.cpus_from_masks([]) == []


# ---- no driver / library -----------------------------------------------------------------


@pytest.mark.parametrize("err", [pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded,
                                 pynvml.NVMLError_LibRmVersionMismatch, pynvml.NVMLError_NoPermission,
                                 pynvml.NVMLLibraryMismatchError])
def test_init_failure_gives_empty_inventory_and_one_log_line(err, caplog):
    fake = FakeNvml([h200(0)], fail={"nvmlInit": err})
    with caplog.at_level(logging.WARNING, logger="batchd.node.nvml"):
        inv = bn.discover(nvml=fake)
    assert inv.gpus == [] and inv.count == 0
    assert err.__name__ in inv.reason
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1
    assert inv.to_snapshot_gpus() == []
    json.dumps(inv.to_dict())


def test_real_pynvml_on_this_machine_never_raises():
    inv = bn.discover()          # the real module: no driver on CI -> LibraryNotFound
    assert isinstance(inv, bn.Inventory)
    if not inv.gpus:
        assert inv.reason


def test_count_failure():
    inv = bn.discover(nvml=FakeNvml([h200(0)], fail={"nvmlDeviceGetCount": pynvml.NVMLError_Unknown}))
    assert inv.gpus == [] and "NVMLError_Unknown" in inv.reason


def test_zero_gpus():
    inv = bn.discover(nvml=FakeNvml([]))
    assert inv.gpus == [] and inv.reason == "NVML reports no GPU"


def test_shutdown_called_after_success():
    fake = FakeNvml([h200(0)])
    bn.discover(nvml=fake)
    assert fake.calls[-1] == "nvmlShutdown" and not fake.initialised


# ---- one GPU fails -------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID",
                                  "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetName"])
def test_gpu_lost_mid_enumeration_keeps_the_others(call, caplog):
    fake = FakeNvml([h200(0), h200(1), h200(2)], fail={(call, 1): pynvml.NVMLError_GpuIsLost})
    with caplog.at_level(logging.WARNING, logger="batchd.node.nvml"):
        inv = bn.discover(nvml=fake)
    assert [g.index for g in inv.gpus] == [0, 2]
    assert inv.count == 3
    assert "1 of 3" in inv.reason
    assert any("GpuIsLost" in e for e in inv.errors)
    assert any("index=1" in r.getMessage() for r in caplog.records)
    # matrices keep NVML index positions; the lost GPU's entries are None
    assert inv.pcie[0][1] is None and inv.pcie[0][2] is not None
    assert [d["index"] for d in inv.to_snapshot_gpus()] == [0, 2]


def test_optional_fields_failing_do_not_drop_the_gpu():
    fake = FakeNvml([h200(0)], fail={("nvmlDeviceGetCpuAffinity", 0): pynvml.NVMLError_NotSupported,
                                     ("nvmlDeviceGetMinorNumber", 0): pynvml.NVMLError_NoPermission,
                                     ("nvmlDeviceGetMigMode", 0): pynvml.NVMLError_Unknown})
    inv = bn.discover(nvml=fake)
    g = inv.gpus[0]
    assert g.cpus == [] and g.minor is None and g.mig_mode is None
    assert len(inv.errors) == 2          # affinity + MIG mode recorded; minor is optional


# ---- fields ---------------------------------------------------------------------------------


def test_fields_of_a_plain_gpu():
    fake = FakeNvml([h200(0, cpus=[0, 1, 2, 3, 64], numa_mask=0b10, used_mb=5)])
    g = bn.discover(nvml=fake).gpus[0]
    assert (g.index, g.name, g.type, g.slurm_type) == (0, "NVIDIA H200", "h200", "nvidia_h200")
    assert g.uuid.startswith("GPU-") and g.memory_mb == 143771
    assert g.pci_bus_id == "00000000:19:00.0" and g.minor == 0
    assert g.numa == 1 and g.cpus == [0, 1, 2, 3, 64]
    assert g.mig_mode is False and g.mig == []


def test_numa_unknown_when_not_supported_and_no_sysfs():
    g = bn.discover(nvml=FakeNvml([h200(0, numa_mask=None)])).gpus[0]
    assert g.numa is None


def test_non_mig_gpu_has_mig_mode_none():
    gpu = FakeGpu(name="NVIDIA L40S", uuid="GPU-l40s", bus="00000000:3B:00.0", mig=None)
    g = bn.discover(nvml=FakeNvml([gpu])).gpus[0]
    assert g.mig_mode is None and g.type == "l40s"


def test_mixed_gpu_types_with_alias():
    rtx = FakeGpu(name="NVIDIA RTX PRO 6000 Blackwell Server Edition", uuid="GPU-rtx",
                  bus="00000000:C1:00.0", memory_mb=97887, mig=(0, 0), max_mig=4)
    inv = bn.discover({"NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtxpro6000"},
                      nvml=FakeNvml([h200(0), rtx]))
    assert [(g.index, g.type) for g in inv.gpus] == [(0, "h200"), (1, "rtxpro6000")]
    assert [d["type"] for d in inv.to_snapshot_gpus()] == ["h200", "rtxpro6000"]


# ---- MIG -------------------------------------------------------------------------------------


def _rtx_mig(**kw):
    migs = {0: FakeMig("MIG-aaa", "NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 1g.24gb", 1, 1, 24320,
                       gi=3, ci=0),
            2: FakeMig("MIG-bbb", "NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 2g.48gb", 2, 2, 48896,
                       gi=1, ci=0)}
    return FakeGpu(name="NVIDIA RTX PRO 6000 Blackwell Server Edition", uuid="GPU-rtx",
                   bus="00000000:C1:00.0", mig=(1, 1), migs=migs, max_mig=4, profile_slices=[1, 2, 4], **kw)


def test_mig_on_with_instances_and_index_holes():
    inv = bn.discover({"NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtxpro6000"},
                      nvml=FakeNvml([_rtx_mig()]))
    g = inv.gpus[0]
    assert g.mig_mode is True
    assert [(m.uuid, m.profile, m.slices, m.parent_slices, m.memory_mb, m.gi_id) for m in g.mig] == [
        ("MIG-aaa", "1g.24gb", 1, 4, 24320, 3), ("MIG-bbb", "2g.48gb", 2, 4, 48896, 1)]
    assert [m.share for m in g.mig] == [0.25, 0.5]
    assert g.mig[0].slurm_type == "nvidia_rtx_pro_6000_blackwell_server_edition_1g.24gb"
    snap = inv.to_snapshot_gpus()[0]
    assert snap["mig"][0] == {"profile": "1g.24gb", "uuid": "MIG-aaa", "slices": 1, "parent_slices": 4,
                              "memory_mb": 24320}
    assert snap["slices"] == 4 and "slices" not in bn.discover(nvml=FakeNvml([h200(0)])).to_snapshot_gpus()[0]
    assert inv.to_dict()["gpus"][0]["mig"][1]["share"] == 0.5


def test_snapshot_form_is_accepted_by_the_scheduler_snapshot_parser():
    snapshot = pytest.importorskip("batchd.scheduler.snapshot")
    inv = bn.discover({"NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtxpro6000"},
                      nvml=FakeNvml([h200(0), _rtx_mig()]))
    snap = snapshot.load_snapshot({"version": 1, "nodes": [
        {"name": "n0", "cpus": 16, "memory_mb": 65536, "state": "IDLE", "gpus": inv.to_snapshot_gpus()}],
        "accounts": [{"name": "default", "parent": None}], "jobs": []})
    slots = snap.nodes[0].slots
    assert [(s.type, s.share, s.whole) for s in slots] == [("h200", 1.0, True), ("1g.24gb", 0.25, False),
                                                            ("2g.48gb", 0.5, False)]


def test_h200_mig_slurm_type_is_cut_at_the_first_dash_and_slices_from_max_count():
    a100 = FakeGpu(name="NVIDIA A100-SXM4-40GB", uuid="GPU-a", bus="00000000:07:00.0", mig=(1, 1),
                   migs={0: FakeMig("MIG-x", None, 3, 3, 19968)}, max_mig=7)   # no profile info
    m = bn.discover(nvml=FakeNvml([a100])).gpus[0].mig[0]
    assert m.profile == "3g.20gb" and m.slurm_type == "nvidia_a100_3g.20gb"
    assert m.parent_slices == 7 and m.share == pytest.approx(3 / 7)


def test_mig_enabled_but_no_instances(caplog):
    gpu = h200(0, mig=(1, 1), migs={})
    with caplog.at_level(logging.WARNING, logger="batchd.node.nvml"):
        inv = bn.discover(nvml=FakeNvml([gpu, h200(1)]))
    assert inv.gpus[0].mig_mode is True and inv.gpus[0].mig == []
    assert any("no MIG devices" in r.getMessage() for r in caplog.records)
    # never handed out whole: left out of the snapshot
    assert [d["index"] for d in inv.to_snapshot_gpus()] == [1]


def test_mig_pending_change_is_reported():
    g = bn.discover(nvml=FakeNvml([h200(0, mig=(0, 1))])).gpus[0]
    assert g.mig_mode is False and g.mig_pending is True and g.mig == []


def test_one_mig_device_failing_keeps_the_others():
    fake = FakeNvml([_rtx_mig()])
    orig = fake.nvmlDeviceGetAttributes

    def attrs(h):
        if h.mig.uuid == "MIG-aaa":
            raise pynvml.NVMLError_GpuIsLost()
        return orig(h)
    fake.nvmlDeviceGetAttributes = attrs
    inv = bn.discover(nvml=fake)
    assert [m.uuid for m in inv.gpus[0].mig] == ["MIG-bbb"]
    assert any("GpuIsLost" in e for e in inv.errors)


# ---- topology ----------------------------------------------------------------------------------


def test_pcie_matrix_two_switches():
    gpus = [h200(i, nvlinks=[]) for i in range(4)]
    pcie = {(0, 1): pynvml.NVML_TOPOLOGY_SINGLE, (2, 3): pynvml.NVML_TOPOLOGY_SINGLE,
            (0, 2): pynvml.NVML_TOPOLOGY_SYSTEM, (0, 3): pynvml.NVML_TOPOLOGY_SYSTEM,
            (1, 2): pynvml.NVML_TOPOLOGY_SYSTEM, (1, 3): pynvml.NVML_TOPOLOGY_NODE}
    inv = bn.discover(nvml=FakeNvml(gpus, pcie=pcie))
    assert inv.pcie == [[0, 10, 50, 50], [10, 0, 50, 40], [50, 50, 0, 10], [50, 40, 10, 0]]
    assert inv.nvlink == [[-1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 0], [0, 0, 0, -1]]
    assert all(inv.nvlink_p2p[i][j] is (i == j) for i in range(4) for j in range(4))
    assert inv.to_snapshot_gpus()[1]["links"] == {"nvlink": [0, -1, 0, 0],
                                                   "nvlink_p2p": [False, True, False, False],
                                                   "pcie": [10, 0, 50, 40]}


def test_nvlink_bridge_counts_links_per_peer():
    b = [f"00000000:{0x19 + 0x10 * i:02X}:00.0" for i in range(4)]
    # 0<->1 with 2 links, 2<->3 with 1 link, one down link, one link to a non-GPU endpoint
    gpus = [h200(0, nvlinks=[b[1], b[1], None]), h200(1, nvlinks=[b[0], b[0]]),
            h200(2, nvlinks=[b[3], "00000000:FF:00.0"]), h200(3, nvlinks=[b[2]])]
    inv = bn.discover(nvml=FakeNvml(gpus))
    assert inv.nvlink[0] == [-1, 2, 0, 0] and inv.nvlink[1][0] == 2
    assert inv.nvlink[2] == [0, 0, -1, 1]
    assert inv.nvlink_p2p[0][1] and inv.nvlink_p2p[2][3] and not inv.nvlink_p2p[0][2]


def test_nvswitch_all_to_all_via_p2p_status():
    # links go to NVSwitches (remote bus ids are not GPUs): counts stay 0 as in Slurm, P2P says NVLink
    sw = "00000000:A0:00.0"
    gpus = [h200(i, nvlinks=[sw] * 18) for i in range(3)]
    p2p = {(0, 1), (0, 2), (1, 2)}
    inv = bn.discover(nvml=FakeNvml(gpus, p2p_nvlink=p2p, pcie={k: 50 for k in p2p}))
    assert inv.nvlink[0] == [-1, 0, 0]
    assert all(inv.nvlink_p2p[i][j] for i in range(3) for j in range(3))


def test_topology_error_is_recorded_not_raised():
    fake = FakeNvml([h200(0), h200(1)], fail={("nvmlDeviceGetTopologyCommonAncestor", 0):
                                               pynvml.NVMLError_NotSupported})
    inv = bn.discover(nvml=fake)
    assert len(inv.gpus) == 2 and inv.pcie[0][1] is None
    assert any("TopologyCommonAncestor" in e for e in inv.errors)


def test_to_dict_is_json():
    inv = bn.discover(nvml=FakeNvml([_rtx_mig(), h200(1)]))
    d = json.loads(json.dumps(inv.to_dict()))
    assert d["count"] == 2 and d["driver"] == "580.159.04" and len(d["gpus"]) == 2
    assert set(d) >= {"gpus", "count", "driver", "reason", "errors", "nvlink", "nvlink_p2p", "pcie"}



class _Without:
    """A binding lacking one function (as nvidia-ml-py3 lacks the MIG calls)."""

    def __init__(self, inner, missing):
        self._inner, self._missing = inner, missing

    def __getattr__(self, name):
        if name == self._missing:
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_old_binding_is_named_in_the_log(caplog):
    fake = _Without(FakeNvml([h200(0, mig=None)]), "nvmlDeviceGetMigDeviceHandleByIndex")
    with caplog.at_level(logging.WARNING, logger="batchd.node.nvml"):
        inv = bn.discover(nvml=fake)
    assert len(inv.gpus) == 1
    assert any("too old for MIG" in r.getMessage() for r in caplog.records)
