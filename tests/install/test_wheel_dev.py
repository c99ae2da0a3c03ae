"""The wheel alone is enough for README's dev mode: build it from this checkout, install it
(not editable) into a fresh virtual environment, and run `batchd serve --dev` in an empty
directory with no config anywhere. The daemon takes the 16-GPU example from the package
(batchd/examples), migrates its new database before it says it is listening, and runs a
job; the docs travel in the package too (batchd/docs), so the systemd unit's
documentation can be installed from it.

No root needed; a few seconds (one wheel build, offline for the dependencies: see
tests/harness.wheel_venv).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.harness import (
    answers,
    build_wheel,
    end_supervisors,
    log_tail,
    serve_argv,
    start_daemon,
    stop_daemon,
    wheel_venv,
)


@pytest.fixture(scope="module")
def installed():
    work = Path(tempfile.mkdtemp(prefix="batchd-wheel-"))
    os.chmod(work, 0o755)
    try:
        yield work, wheel_venv(work, build_wheel(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_wheel_carries_the_examples_and_the_docs(installed):
    _work, bin_dir = installed
    out = subprocess.run([str(bin_dir / "python"), "-c", "import batchd, os; print(os.path.dirname(batchd.__file__))"],
                         capture_output=True, text=True, cwd="/", check=True).stdout.strip()
    pkg = Path(out)
    for rel in ("examples/cluster-16gpu.toml", "examples/accounts-16gpu.toml", "examples/plan-16gpu-lend.json",
                "examples/jobs/single-gpu.sh", "docs/architecture.md", "docs/hardening.md", "docs/systemd.md",
                "docs/commands.md"):
        assert (pkg / rel).is_file(), f"{rel} is not in the installed package"


def test_serve_dev_in_an_empty_directory_runs_a_job(installed):
    work, bin_dir = installed
    empty = work / "empty"
    empty.mkdir(mode=0o755)
    log = work / "dev.log"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(empty)}
    proc = None
    try:
        proc = start_daemon(serve_argv("--dev", bin_dir=bin_dir), cwd=empty, env=env, log=log,
                            ready=answers(env, empty, bin_dir))
        # the commands find the dev daemon of the current directory by themselves
        nodes = subprocess.run([str(bin_dir / "sinfo"), "-h", "-N", "-o", "%N"], cwd=empty, env=env,
                               capture_output=True, text=True, check=True).stdout.split()
        assert nodes == ["gpu01", "gpu02", "gpu03", "gpu04"], nodes  # examples/cluster-16gpu.toml
        jid = subprocess.run([str(bin_dir / "sbatch"), "--parsable", "--gres=gpu:2", "--wrap",
                              "echo $CUDA_VISIBLE_DEVICES"], cwd=empty, env=env, capture_output=True, text=True,
                             check=True).stdout.strip()
        out = empty / f"slurm-{jid}.out"
        deadline = time.monotonic() + 30
        while not (out.exists() and out.read_text()):
            assert time.monotonic() < deadline, log_tail(log)
            time.sleep(0.1)
        assert out.read_text() == "0,1\n"
    finally:
        stop_daemon(proc)
        end_supervisors(empty)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    lines = text.splitlines()
    listening = [i for i, ln in enumerate(lines) if "listening on" in ln]
    migrated = [i for i, ln in enumerate(lines) if "Running upgrade" in ln]
    assert listening and migrated, text[-3000:]
    # the listening line comes once the database is migrated (and the socket answers)
    assert listening[0] > migrated[-1], text[-3000:]
