"""The outside-repo guard of tests/conftest.py: a test that reads beside the checkout fails.

Each case touches a path beside the checkout (`../shared/...` or a made-up sibling; it need
not exist) inside `outside_repo_guard.expected()`, which takes the hits off the guard so that
this test can check them instead of failing for them."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SIBLING = ROOT.parent / "some-other-clone" / "tests" / "data" / "x.json"


def _hit(guard, action) -> list[tuple[str, str]]:
    with guard.expected() as hits:
        with pytest.raises(Exception, match="a path beside the checkout"):
            action()
    return hits


@pytest.mark.parametrize("path", [SHARED / "DESIGN.md", SHARED / "tools" / "run_plan_cases.py", SIBLING],
                         ids=["shared-doc", "shared-tool", "sibling-clone"])
def test_open_beside_the_checkout_fires(outside_repo_guard, path):
    hits = _hit(outside_repo_guard, lambda: open(path).close())
    assert hits == [("open", os.path.realpath(path))]


def test_relative_path_from_the_checkout_fires(outside_repo_guard, monkeypatch):
    monkeypatch.chdir(ROOT)
    hits = _hit(outside_repo_guard, lambda: Path("../shared/scenarios/kai/x.json").read_text())
    assert hits == [("open", os.path.realpath(SHARED / "scenarios" / "kai" / "x.json"))]


def test_listing_a_directory_beside_the_checkout_fires(outside_repo_guard):
    hits = _hit(outside_repo_guard, lambda: list((SHARED / "scenarios").glob("*")))
    assert hits == [("os.scandir", os.path.realpath(SHARED / "scenarios"))]
    assert _hit(outside_repo_guard, lambda: os.listdir(SHARED))[0][0] == "os.listdir"
    assert _hit(outside_repo_guard, lambda: glob.glob(str(SHARED / "*.md")))[0][0] == "os.scandir"


def test_symlink_into_the_sibling_fires(outside_repo_guard, tmp_path):
    link = tmp_path / "data"
    link.symlink_to(SHARED)
    hits = _hit(outside_repo_guard, lambda: open(link / "STYLE.md").close())
    assert hits == [("open", os.path.realpath(SHARED / "STYLE.md"))]


@pytest.mark.parametrize("argv", [
    [sys.executable, str(SHARED / "tools" / "fairshare_cases.py"), "judge"],
    ["sshare", f"--snapshot={SHARED / 'scenarios' / 'x.json'}"],
    ["sh", "-c", f"cat {SHARED / 'STYLE.md'} | wc -l"],
], ids=["script", "option-value", "shell-word"])
def test_running_a_command_on_a_path_beside_the_checkout_fires(outside_repo_guard, argv):
    hits = _hit(outside_repo_guard, lambda: subprocess.run(argv, capture_output=True))
    assert [event for event, _ in hits] == ["subprocess.Popen"]


def test_the_checkout_and_the_system_are_not_watched(outside_repo_guard, tmp_path):
    with outside_repo_guard.expected() as hits:
        (ROOT / "tests" / "data" / "README.md").read_text()
        list((ROOT / "tests" / "data").glob("*"))
        (tmp_path / "x").write_text("x")
        Path("/proc/self/status").read_text()
        open("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd").close()
        subprocess.run(["true", f"--cwd={ROOT}"], check=True)
    assert hits == []


def test_allowed_directory_is_not_watched(outside_repo_guard, monkeypatch):
    monkeypatch.setattr(outside_repo_guard, "allowed", dict(outside_repo_guard.allowed))
    outside_repo_guard.allow(ROOT.parent / "tool-box", "a tool the test uses")
    assert outside_repo_guard.outside(ROOT.parent / "tool-box" / "run.sh") is None
    assert outside_repo_guard.outside(ROOT.parent / "tool-boxes" / "run.sh") is not None


@pytest.mark.skipif(os.environ.get("BATCHD_GUARD_SELFTEST") != "swallow",
                    reason="run by test_a_swallowed_hit_still_fails_the_test only")
def test_swallowing_the_error():
    """Reads a fixture beside the checkout and falls back when that fails, the way the old
    fixture readers did; the guard must fail it anyway."""
    try:
        (SHARED / "scenarios" / "kai" / "x.json").read_text()
    except Exception:
        pass


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["serial", "in-an-xdist-worker"])
def test_a_swallowed_hit_still_fails_the_test(tmp_path, workers):
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *workers,
                        f"{Path(__file__).relative_to(ROOT)}::test_swallowing_the_error"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "BATCHD_GUARD_SELFTEST": "swallow"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed" in r.stdout and "read beside the checkout" in r.stdout, r.stdout


def test_a_workers_hit_outside_any_test_fails_the_run():
    """Under pytest-xdist a worker's session status is not the run's: its hits outside any
    test go back with the worker's output, and the controller's guard fails the run."""
    from tests.conftest import OutsideRepoGuard

    worker, controller = OutsideRepoGuard(ROOT), OutsideRepoGuard(ROOT)
    config = SimpleNamespace(workeroutput={})
    session = SimpleNamespace(config=config, exitstatus=pytest.ExitCode.OK)
    with pytest.raises(Exception, match="a path beside the checkout"):
        worker.audit("open", (str(SHARED / "DESIGN.md"), "r", 0))
    worker.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    hit = ("open", os.path.realpath(SHARED / "DESIGN.md"))
    assert [tuple(h) for h in config.workeroutput["outside_repo_hits"]] == [hit]
    controller.pytest_testnodedown(SimpleNamespace(workeroutput=config.workeroutput), None)
    session = SimpleNamespace(config=SimpleNamespace(), exitstatus=pytest.ExitCode.OK)
    controller.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
