"""README's production block, checked without a box (the box runs it: test_under_systemd.py)."""

from __future__ import annotations

import re
import tomllib

from tests.systemd.conftest import ROOT, readme_install_block


def test_the_block_links_exactly_batchds_commands():
    block = readme_install_block()
    m = re.search(r"^for c in ([^;]+); do\n\s*ln -sf /opt/batchd/bin/\$c /usr/local/bin/; done$", block, re.M)
    assert m, block
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert sorted(m.group(1).split()) == sorted(scripts)
    assert "bin/*" not in block, "linking the whole venv bin/ shadows the system python3 and pip"


def test_the_block_installs_the_shipped_unit_and_tmpfiles():
    block = readme_install_block()
    for needed in ("systemd/batchd.service", "systemd/batchd.tmpfiles", "batchd migrate --config /etc/batchd/batchd.toml",
                   "systemctl enable --now batchd", "/path/to/batchd"):
        assert needed in block, needed
