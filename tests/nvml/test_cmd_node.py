"""`batchd node inventory/check` with the fake pynvml."""

import json
import socket

import pynvml
import pytest
from click.testing import CliRunner
from fake_pynvml import FakeGpu, FakeMig, FakeNvml, h200

from batchd.cli import cmd_node
from batchd.node import nvml as bn


@pytest.fixture
def fake_machine(monkeypatch):
    b = [f"00000000:{0x19 + 0x10 * i:02X}:00.0" for i in range(2)]
    rtx = FakeGpu(name="NVIDIA RTX PRO 6000 Blackwell Server Edition", uuid="GPU-rtx", bus="00000000:C1:00.0",
                  mig=(1, 1), max_mig=4, profile_slices=[1, 2, 4],
                  migs={0: FakeMig("MIG-r0", "NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 1g.24gb",
                                   1, 1, 24320)})
    gpus = [h200(0, nvlinks=[b[1]] * 4, cpus=[0, 1, 2, 3]), h200(1, nvlinks=[b[0]] * 4), rtx]
    fake = FakeNvml(gpus, pcie={(0, 1): 10, (0, 2): 50, (1, 2): 50})
    real_discover = bn.discover
    seen = {}

    def discover(aliases=None, nvml=None):
        seen["aliases"] = aliases
        return real_discover(aliases, nvml=fake)
    monkeypatch.setattr(bn, "discover", discover)
    return seen


def test_inventory_table(fake_machine):
    r = CliRunner().invoke(cmd_node.command, ["inventory"])
    assert r.exit_code == 0, r.output
    out = r.output
    assert "3 GPUs (nvml, driver 580.159.04)" in out
    assert "h200" in out and "0-3" in out and "GPU-00000000-aaaa" in out
    assert "MIG 1g.24gb" in out and "1/4 of the GPU" in out
    lines = [line.split() for line in out.splitlines() if line.strip().startswith("GPU0")]
    assert lines[-1] == ["GPU0", "X", "NV4", "SYS"]


def test_inventory_json(fake_machine):
    r = CliRunner().invoke(cmd_node.command, ["inventory", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    (node,) = d["nodes"]
    assert node["source"] == "nvml" and node["name"] == socket.gethostname().split(".")[0]
    assert [g["type"] for g in node["gpus"]] == ["h200", "h200", "rtx_pro_6000_blackwell_server_edition"]
    assert node["snapshot_gpus"][2]["mig"][0]["profile"] == "1g.24gb"
    assert node["nvlink"][0][1] == 4


def test_inventory_no_driver_is_not_an_error(monkeypatch):
    real_discover = bn.discover
    monkeypatch.setattr(bn, "discover", lambda aliases=None, nvml=None: real_discover(
        aliases, nvml=FakeNvml([], fail={"nvmlInit": pynvml.NVMLError_DriverNotLoaded})))
    r = CliRunner().invoke(cmd_node.command, ["inventory"])
    assert r.exit_code == 0
    assert "0 GPUs" in r.output and "NVMLError_DriverNotLoaded" in r.output


def _config(tmp_path, nodes):
    p = tmp_path / "batchd.toml"
    p.write_text('[gpu_aliases]\n"NVIDIA RTX PRO 6000 Blackwell Server Edition" = "rtxpro6000"\n' + nodes)
    return str(p)


def test_inventory_with_config_static_and_nvml(fake_machine, tmp_path):
    host = socket.gethostname().split(".")[0]
    cfg = _config(tmp_path, f"""
[[node]]
name = "{host}"
cpus = 16
memory_mb = 65536
gpus = "nvml"

[[node]]
name = "static1"
cpus = 8
memory_mb = 32768
gpus = [{{type = "l40s", count = 2}}]

[[node]]
name = "other-nvml"
cpus = 8
memory_mb = 32768
gpus = "nvml"
""")
    r = CliRunner().invoke(cmd_node.command, ["inventory", "--json", "--config", cfg])
    assert r.exit_code == 0, r.output
    nodes = {n["name"]: n for n in json.loads(r.output)["nodes"]}
    assert fake_machine["aliases"] == {"NVIDIA RTX PRO 6000 Blackwell Server Edition": "rtxpro6000"}
    assert nodes[host]["gpus"][2]["type"] == "rtxpro6000"
    assert nodes["static1"] == {"name": "static1", "source": "config", "gpus": [{"type": "l40s", "count": 2}]}
    assert nodes["other-nvml"]["source"] == "nvml-remote"
    r = CliRunner().invoke(cmd_node.command, ["inventory", "--config", cfg])
    assert r.exit_code == 0, r.output
    assert "gpu:l40s:2" in r.output and "discovered by that node's own daemon" in r.output


def test_inventory_bad_config(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("this is = = not toml")
    r = CliRunner().invoke(cmd_node.command, ["inventory", "--config", str(p)])
    assert r.exit_code == 1 and "batchd: error:" in r.output


def test_check_text_and_json():
    r = CliRunner().invoke(cmd_node.command, ["check"])
    assert r.exit_code == 0 and r.output.startswith("isolation: ")
    r = CliRunner().invoke(cmd_node.command, ["check", "--json"])
    assert json.loads(r.output)["mode"] in ("systemd", "plain")


def test_ranges():
    assert cmd_node._ranges([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert cmd_node._ranges([]) == "-"


def test_check_with_config_says_which_mode_jobs_get(tmp_path, monkeypatch):
    from batchd.node import isolation as iso

    monkeypatch.setattr(iso, "detect", lambda probe=False: iso.IsolationReport(
        mode="plain", reasons=["systemd is not PID 1 (/run/systemd/system missing): no transient units"]))
    for setting, want in (("auto", "jobs run in: plain"), ("plain", "jobs run in: plain"),
                          ("systemd", "jobs run in: none: the daemon refuses to start")):
        p = tmp_path / f"{setting}.toml"
        p.write_text(f'isolation = "{setting}"\n[[node]]\nname = "a"\ncpus = 2\nmemory_mb = 100\n')
        r = CliRunner().invoke(cmd_node.command, ["check", "--config", str(p)])
        assert r.exit_code == 0
        assert r.output.splitlines()[-1].startswith(f"config: isolation = '{setting}' -> {want}")
    r = CliRunner().invoke(cmd_node.command, ["check", "--json", "--config", str(tmp_path / "systemd.toml")])
    data = json.loads(r.output)
    assert (data["setting"], data["active"]) == ("systemd", None) and "systemd is not PID 1" in data["error"]
