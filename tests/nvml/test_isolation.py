"""batchd.isolation.detect on fake filesystem trees."""

import os

import pytest

from batchd import isolation


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
