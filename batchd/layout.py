"""The production file layout a root daemon needs so that jobs of other users can run.

A job runs as its user and execs `<spool>/job.N.R/slurm_script` (owned by that user,
0700, in a root-owned 0711 run directory, see `batchd.node.spool`). For that the user must be
able to *search* every directory from `/` down to the spool, while listing the spool and
reading other users' scripts stays impossible. The layout shipped in
`systemd/batchd.tmpfiles` and the unit's `StateDirectoryMode`/`RuntimeDirectoryMode`:

    /var/lib/batchd          root 0711   state directory (searchable, not listable)
    /var/lib/batchd/batchd.db root 0600  SQLite database (every user's scripts and environments)
    /var/lib/batchd/spool    root 0711   one run directory per run
    /run/batchd              root 0755   the socket's directory; the socket itself is 0666

`prepare_state_dir` creates what is missing with those modes and then refuses, with one
`ConfigError` naming the path, the mode and the fix, a layout on which every job of a
non-root user would fail (or that would let users read or forge the daemon's records).
It checks only where it matters: a root daemon outside dev mode. Nothing existing is
changed: a wrong mode is the operator's decision to fix, not the daemon's to guess.
"""

from __future__ import annotations

import os
import stat

from batchd.config import Config
from batchd.errors import ConfigError

STATE_DIR_MODE = 0o711
SPOOL_MODE = 0o711


def layout_problems(cfg: Config) -> list[str]:
    """Every problem of the layout, as one sentence each (empty: the layout is fine).

    Rules: each directory from `/` down to the spool and to the socket's directory is
    searchable by others (o+x); the state directory and the spool are owned by root and
    writable neither by others nor by a group other than root's; the SQLite database file
    (when it exists) is owned by root and gives no access to others or to a non-root group.
    Missing paths are not problems here (`prepare_state_dir` creates them)."""
    problems: list[str] = []
    spool = os.path.abspath(cfg.spool_dir())
    state = os.path.abspath(cfg.state_dir)
    for target, what in ((spool, "the spool"), (os.path.dirname(os.path.abspath(cfg.socket)), "the socket")):
        for d in _chain(target):
            st = _stat(d)
            if st is not None and not st.st_mode & stat.S_IXOTH:
                problems.append(f"{what} {target} is not reachable by job users (mode {_mode(st)} on {d}): "
                                f"run `chmod o+x {d}` (see systemd/batchd.tmpfiles)")
                break
    for d, want in ((state, STATE_DIR_MODE), (spool, SPOOL_MODE)):
        st = _stat(d)
        if st is None:
            continue
        if st.st_uid != 0:
            problems.append(f"{d} is owned by uid {st.st_uid}, not root: its owner could forge job records "
                            f"(run `chown root:root {d}`)")
        if st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0):
            problems.append(f"{d} is writable by other users (mode {_mode(st)}): run `chmod {want:04o} {d}`")
    db = _sqlite_path(cfg)
    if db is not None:
        st = _stat(db)
        if st is not None and (st.st_uid != 0 or st.st_mode & 0o007 or (st.st_mode & 0o070 and st.st_gid != 0)):
            problems.append(f"the database {db} is open to other users (owner uid {st.st_uid}, mode {_mode(st)}): "
                            f"run `chown root:root {db} && chmod 0600 {db}`")
    return problems


def prepare_state_dir(cfg: Config) -> None:
    """Create the state directory and the spool when missing (0711 for a root daemon,
    0700 otherwise), then raise `ConfigError` with the first layout problem when the
    daemon runs as root outside dev mode."""
    root = os.geteuid() == 0 and not cfg.dev
    for d, mode in ((cfg.state_dir, STATE_DIR_MODE), (cfg.spool_dir(), SPOOL_MODE)):
        if not os.path.isdir(d):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, mode if root else 0o700)  # explicit: the umask must not decide
    if not root:
        return
    problems = layout_problems(cfg)
    if problems:
        raise ConfigError(problems[0])


def _chain(path: str) -> list[str]:
    """`/a/b/c` -> ["/", "/a", "/a/b", "/a/b/c"]."""
    out = [path]
    while path != os.path.dirname(path):
        path = os.path.dirname(path)
        out.append(path)
    return out[::-1]


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _sqlite_path(cfg: Config) -> str | None:
    url = cfg.database_url or f"sqlite:///{os.path.join(cfg.state_dir, 'batchd.db')}"
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].split("?", 1)[0]
    return os.path.abspath(path) if path and path != ":memory:" else None
