"""systemd/batchd.service passes `systemd-analyze verify` (where the tool exists) and
keeps the settings that make restarts safe for running jobs."""

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _unit() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment]
    cp.read(ROOT / "systemd" / "batchd.service")
    return cp


def test_unit_settings():
    svc = _unit()["Service"]
    assert svc["Type"] == "notify"
    assert svc["KillMode"] == "process"
    assert svc["RuntimeDirectory"] == "batchd"
    assert svc["StateDirectory"] == "batchd"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify(tmp_path):
    # point ExecStart at this checkout's batchd so verify can check the binary exists
    batchd = Path(sys.executable).parent / "batchd"
    text = (ROOT / "systemd" / "batchd.service").read_text().replace("/usr/local/bin/batchd", str(batchd))
    unit = tmp_path / "batchd.service"
    unit.write_text(text)
    p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
