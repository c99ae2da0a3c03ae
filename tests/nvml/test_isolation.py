"""batchd.node.isolation.detect on fake filesystem trees."""

import os

import pytest

from batchd.node import isolation


def _tree(tmp_path, *, systemd=True, cgroup2=True, own="/system.slice/batchd.service",
          controllers="cpuset cpu io memory hugetlb pids rdma misc", own_controllers="memory pids"):
    if systemd:
        (tmp_path / "run/systemd/system").mkdir(parents=True)
    (tmp_path / "proc/self").mkdir(parents=True)
    if cgroup2:
        cg = tmp_path / "sys/fs/cgroup"
        cg.mkdir(parents=True)
        (cg / "cgroup.controllers").write_text(controllers + "\n")
        (tmp_path / "proc/self/cgroup").write_text(f"0::{own}\n")
        d = cg / own.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.controllers").write_text(own_controllers + "\n")
    else:
        (tmp_path / "proc/self/cgroup").write_text("12:memory:/user.slice\n1:name=systemd:/init.scope\n")
    return str(tmp_path)


def _which_found(name):
    return "/usr/bin/" + name


def _which_none(name):
    return None


def test_systemd_mode(tmp_path):
    r = isolation.detect(_tree(tmp_path), euid=0, which=_which_found)
    assert r.mode == "systemd"
    assert r.systemd and r.cgroup2 and r.is_root
    assert r.own_cgroup == "/system.slice/batchd.service"
    assert "memory" in r.controllers and r.own_controllers == ["memory", "pids"]
    assert r.warnings == [] and r.probe is None
    assert "transient" in r.reasons[0]
    assert r.lines()[0] == "isolation: systemd"


@pytest.mark.parametrize("kw,euid,which,why", [
    ({"systemd": False}, 0, _which_found, "systemd is not PID 1"),
    ({"cgroup2": False}, 0, _which_found, "no cgroup v2"),
    ({}, 1000, _which_found, "not running as root"),
    ({}, 0, _which_none, "systemd-run not found"),
])
def test_plain_fallback_says_why(tmp_path, kw, euid, which, why):
    r = isolation.detect(_tree(tmp_path, **kw), euid=euid, which=which)
    assert r.mode == "plain"
    assert any(why in line for line in r.reasons)
    assert any("plain supervisor" in line for line in r.reasons)


def test_missing_controllers_warn(tmp_path):
    r = isolation.detect(_tree(tmp_path, controllers="cpu io memory"), euid=0, which=_which_found)
    assert r.mode == "systemd"
    assert r.warnings and "cpuset" in r.warnings[0] and "pids" in r.warnings[0]


def test_delegation_reported_without_systemd(tmp_path):
    root = _tree(tmp_path, systemd=False, own="/batchd", own_controllers="cpuset memory pids")
    r = isolation.detect(root, euid=0, which=_which_found)
    assert r.mode == "plain" and r.delegated == os.access(os.path.join(root, "sys/fs/cgroup/batchd"), os.W_OK)
    assert r.delegated is True and any("delegated" in w for w in r.warnings)


def test_root_cgroup_is_not_delegation(tmp_path):
    r = isolation.detect(_tree(tmp_path, systemd=False, own="/", own_controllers="memory"), euid=0,
                         which=_which_found)
    assert r.delegated is False


def test_probe_runs_only_when_static_checks_pass_and_can_veto(tmp_path):
    calls = []

    def bad(path):
        calls.append(path)
        return {"ok": False, "rc": 1, "stderr": "Failed to start transient scope unit"}
    r = isolation.detect(_tree(tmp_path), euid=0, which=_which_found, probe=True, prober=bad)
    assert calls == ["/usr/bin/systemd-run"]
    assert r.mode == "plain" and any("probe failed" in x for x in r.reasons)
    assert any("probe" in line for line in r.lines())

    r2 = isolation.detect(_tree(tmp_path / "x", systemd=False), euid=0, which=_which_found, probe=True,
                          prober=bad)
    assert r2.probe is None and len(calls) == 1


def test_probe_ok(tmp_path):
    r = isolation.detect(_tree(tmp_path), euid=0, which=_which_found, probe=True,
                         prober=lambda p: {"ok": True, "rc": 0, "stderr": ""})
    assert r.mode == "systemd" and r.probe["ok"]


def test_this_machine_does_not_raise():
    r = isolation.detect()
    assert r.mode in ("systemd", "plain") and r.reasons
    assert isinstance(r.to_dict(), dict)


# ------------------------------------------------------------ the job's unit


@pytest.mark.parametrize("alloc,inventory,want", [
    ({"gpus": []}, None, []),
    ({"gpus": [0, 3]}, None, ["/dev/nvidia0", "/dev/nvidia3", *isolation.NVIDIA_CONTROL_DEVICES]),
    ({"gpus": ["1"]}, [{"index": 1, "minor": 5}], ["/dev/nvidia5", *isolation.NVIDIA_CONTROL_DEVICES]),
    ({"gpus": ["2:MIG-aaaa", "2:MIG-bbbb"]}, None,
     ["/dev/nvidia2", *isolation.NVIDIA_CONTROL_DEVICES, "char-nvidia-caps"]),
    ({"gpus": [], "shard_gpus": [1]}, None, ["/dev/nvidia1", *isolation.NVIDIA_CONTROL_DEVICES]),
    ({"gpus": [], "shards": 2, "shard_gpu": 3}, None, ["/dev/nvidia3", *isolation.NVIDIA_CONTROL_DEVICES]),
], ids=["cpu-only", "whole", "minor-from-inventory", "mig", "shards", "shard-gpu"])
def test_job_devices(alloc, inventory, want):
    assert isolation.job_devices(alloc, inventory) == want


@pytest.mark.parametrize("ids,want", [([3], "3"), ([0, 1, 2, 3], "0-3"), ([7, 0, 1, 5, 6, 9], "0-1,5-7,9")])
def test_cpu_ranges(ids, want):
    from batchd.slurm.hostlist import ranges

    assert ranges(ids) == want


def test_oom_kills_read_from_memory_events(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    assert isolation.oom_kills(str(d)) is None
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n")
    assert isolation.oom_kills(str(d)) == 1
    assert isolation.oom_kills(None) is None


def test_own_cgroup_dir(tmp_path):
    root = _tree(tmp_path, own="/batchd.slice/batchd-job-7.service")
    assert isolation.own_cgroup_dir(root) == os.path.join(root, "sys/fs/cgroup/batchd.slice/batchd-job-7.service")


def test_choose_mode(tmp_path):
    ok = isolation.detect(_tree(tmp_path / "a"), euid=0, which=_which_found)
    no = isolation.detect(_tree(tmp_path / "b", systemd=False), euid=0, which=_which_found)
    assert isolation.choose_mode("auto", ok) == "systemd"
    assert isolation.choose_mode("auto", no) == "plain"
    assert isolation.choose_mode("plain", ok) == "plain"
    assert isolation.choose_mode("systemd", ok) == "systemd"
    with pytest.raises(ValueError, match="systemd is not PID 1"):
        isolation.choose_mode("systemd", no)
    with pytest.raises(ValueError, match='must be "auto"'):
        isolation.choose_mode("cgroups", ok)
