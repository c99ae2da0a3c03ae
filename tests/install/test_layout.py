"""batchd.layout: the production modes of systemd/batchd.tmpfiles pass, each way a job
user would be locked out (or could read or forge the daemon's records) is refused with
one sentence naming the path, its mode and the fix."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from batchd.config import Config
from batchd.errors import ConfigError
from batchd.layout import layout_problems, prepare_state_dir

ROOT = Path(__file__).resolve().parent.parent.parent

def needs_root(test):  # type: ignore[no-untyped-def]
    """The `root` tier; skipped elsewhere: the layout check applies to a root daemon only."""
    skip = pytest.mark.skipif(os.geteuid() != 0, reason="the layout check applies to a root daemon only")
    return pytest.mark.root(skip(test))


@pytest.fixture
def tmp_path():
    """A fresh directory under /tmp (pytest's own is 0700, which the check rightly refuses)."""
    d = Path(tempfile.mkdtemp(prefix="batchd-layout-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _cfg(base: Path, dev: bool = False) -> Config:
    return Config(path=str(base / "batchd.toml"), state_dir=str(base / "lib" / "batchd"),
                  socket=str(base / "run" / "batchd" / "batchd.sock"), dev=dev)


def _lay(base: Path) -> Config:
    """The tmpfiles modes under `base` (itself searchable)."""
    os.chmod(base, 0o755)
    for d, mode in (("lib", 0o755), ("lib/batchd", 0o711), ("lib/batchd/spool", 0o711),
                    ("run", 0o755), ("run/batchd", 0o755)):
        (base / d).mkdir(exist_ok=True)
        os.chmod(base / d, mode)
    db = base / "lib" / "batchd" / "batchd.db"
    db.touch()
    os.chmod(db, 0o600)
    return _cfg(base)


def test_tmpfiles_gives_the_modes_the_check_wants():
    lines = [ln.split() for ln in (ROOT / "systemd" / "batchd.tmpfiles").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    modes = {ln[1]: ln[2] for ln in lines}
    assert modes["/var/lib/batchd"] == "0711"
    assert modes["/var/lib/batchd/spool"] == "0711"
    assert modes["/run/batchd"] == "0755"
    unit = (ROOT / "systemd" / "batchd.service").read_text()
    assert "StateDirectoryMode=0711" in unit.splitlines()
    assert "RuntimeDirectoryMode=0755" in unit.splitlines()


@needs_root
def test_the_shipped_layout_passes(tmp_path):
    cfg = _lay(tmp_path)
    assert layout_problems(cfg) == []
    prepare_state_dir(cfg)  # no error


@needs_root
@pytest.mark.parametrize("path,mode,words", [
    ("lib/batchd", 0o700, "the spool {base}/lib/batchd/spool is not reachable by job users (mode 0700 on "
                          "{base}/lib/batchd): run `chmod o+x {base}/lib/batchd`"),
    ("lib/batchd/spool", 0o700, "the spool {base}/lib/batchd/spool is not reachable by job users (mode 0700 on "
                                "{base}/lib/batchd/spool)"),
    ("lib", 0o750, "(mode 0750 on {base}/lib)"),
    ("run/batchd", 0o700, "the socket {base}/run/batchd is not reachable by job users (mode 0700 on "
                          "{base}/run/batchd)"),
    ("lib/batchd/spool", 0o1777, "{base}/lib/batchd/spool is writable by other users (mode 1777): "
                                 "run `chmod 0711 {base}/lib/batchd/spool`"),
    ("lib/batchd", 0o733, "{base}/lib/batchd is writable by other users (mode 0733)"),
    ("lib/batchd/batchd.db", 0o644, "the database {base}/lib/batchd/batchd.db is open to other users "
                                    "(owner uid 0, mode 0644)"),
], ids=["state-0700", "spool-0700", "parent-0750", "socket-dir-0700", "spool-world-writable",
        "state-writable", "db-readable"])
def test_a_wrong_layout_is_refused_with_one_clear_line(tmp_path, path, mode, words):
    cfg = _lay(tmp_path)
    os.chmod(tmp_path / path, mode)
    with pytest.raises(ConfigError) as e:
        prepare_state_dir(cfg)
    assert words.format(base=tmp_path) in e.value.message
    assert "\n" not in e.value.message


@needs_root
def test_a_spool_owned_by_a_user_is_refused(tmp_path):
    cfg = _lay(tmp_path)
    os.chown(tmp_path / "lib/batchd/spool", 65534, 65534)
    with pytest.raises(ConfigError, match="spool is owned by uid 65534, not root"):
        prepare_state_dir(cfg)


@needs_root
def test_missing_directories_are_created_with_the_production_modes(tmp_path):
    os.chmod(tmp_path, 0o755)
    (tmp_path / "lib").mkdir(mode=0o755)
    cfg = _cfg(tmp_path)
    old = os.umask(0o077)  # a tight umask must not lock job users out either
    try:
        prepare_state_dir(cfg)
    finally:
        os.umask(old)
    assert (tmp_path / "lib/batchd").stat().st_mode & 0o777 == 0o711
    assert (tmp_path / "lib/batchd/spool").stat().st_mode & 0o777 == 0o711


def test_dev_mode_and_non_root_are_not_checked(tmp_path):
    cfg = _lay(tmp_path)
    os.chmod(tmp_path / "lib/batchd", 0o700)
    cfg.dev = True
    prepare_state_dir(cfg)  # a dev daemon runs as its user: nothing to check
