"""The commands keep their fast start: no module of `batchd.cli` imports the wire
contract (batchd.server.wire and its schemas, batchd.server.messages' shapes are the daemon's; the
commands read batchd/protocol.py's constants only)."""

from __future__ import annotations

import subprocess
import sys


def test_no_command_imports_the_wire_contract():
    code = ("import pkgutil, sys, batchd.cli\n"
            "for m in pkgutil.iter_modules(batchd.cli.__path__):\n"
            "    __import__('batchd.cli.' + m.name)\n"
            "print(','.join(sorted(m for m in sys.modules if m.startswith(('batchd.server.wire', 'batchd.server.messages')))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
