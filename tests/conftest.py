"""Shared fixtures: a database URL per backend; the outside-repo guard.

The guard (`OutsideRepoGuard`, below) fails any test that reads a file beside the checkout:
fixtures live in tests/data (tests/data/README.md), so the suite runs the same on any clone.

Every store test runs on SQLite and on PostgreSQL. PostgreSQL comes from
$BATCHD_TEST_PG (a URL to an existing database the tests may create databases from),
else postgresql://postgres@127.0.0.1:5432/test when a server answers there; only when
BATCHD_TEST_PG is unset and no server answers are the PostgreSQL cases skipped.
`.ci/run` sets BATCHD_TEST_PG, so CI never skips them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


def _pg_base() -> str | None:
    url = os.environ.get("BATCHD_TEST_PG")
    if url:
        return url
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=0.5):
            return DEFAULT_PG
    except OSError:
        return None


def _pg_url(base: str, dbname: str) -> str:
    head, _, _ = base.rpartition("/")
    return f"{head}/{dbname}"


@pytest.fixture(scope="session")
def pg_base_url():
    """URL of a PostgreSQL database to create test databases from, or None."""
    return _pg_base()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A URL to an empty database of each backend (PostgreSQL: a fresh database,
    dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'batchd.db'}"
        return
    base = _pg_base()
    if base is None:
        pytest.skip("no PostgreSQL server (set BATCHD_TEST_PG)")
    import psycopg

    name = f"batchd_t_{uuid.uuid4().hex[:12]}"
    conninfo = base.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(base, name)
    finally:
        import sqlalchemy

        sqlalchemy.pool.clear_managers() if hasattr(sqlalchemy.pool, "clear_managers") else None
        with psycopg.connect(conninfo, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')



@pytest.fixture
def store(db_url):
    """A Store on a migrated empty database of each backend (`db_url`)."""
    from batchd.store import Store
    from batchd.store.migrate import upgrade

    s = Store(db_url)
    upgrade(s.engine)
    yield s
    s.close()


# --- the outside-repo guard ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


class OutsideRepoRead(RuntimeError):
    """A test opened, listed or ran a path beside the checkout."""


class OutsideRepoGuard:
    """Fails a test, or a module's collection, that touches a path beside the checkout: under
    the checkout's parent directory (`../shared`, a sibling clone or worktree) but outside the
    checkout. A test that reads fixtures from there passes on one machine and parametrizes over
    nothing, skips or errors on every other; fixtures belong in tests/data.

    Watched, as Python audit events of the pytest process: `open` (open(), io.open, os.open and
    io.open_code, which imports use), `os.listdir` and `os.scandir` (glob, Path.glob/iterdir),
    and `subprocess.Popen` (its executable, cwd, and every argument word that is a path, also
    after `=`). Paths are resolved against the working directory and through symlinks; the
    parent directory itself is not watched (listing it is no read of a fixture). Allowed
    there all the same: Python's own prefixes (a virtual environment beside the checkout), the
    temporary directory, a worktree's git directory, and what a conftest allows by
    `allow(path, why)` (the systemd tier's container tooling). Not watched: what the commands a
    test starts read themselves, and nothing at all when the checkout sits directly under `/`.

    The offending call raises `OutsideRepoRead`; the hit is also recorded, and the test phase
    (setup, call, teardown) or the collection it happened in is reported failed even when the
    code caught the exception. Under pytest-xdist each worker process has its own guard (each
    runs this `pytest_configure`); a worker's hits outside any test fail the whole run through
    the controller's guard. Cost: one set lookup per audit event, a realpath per watched one."""

    plugin_name = "outside_repo_guard"
    WATCHED = frozenset({"open", "os.listdir", "os.scandir", "subprocess.Popen"})

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        parent = os.path.dirname(self.root)
        self.zone = None if parent == os.sep else parent
        self.allowed: dict[str, str] = {}
        for prefix in {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}:
            self.allow(prefix, "Python and its packages")
        self.allow(tempfile.gettempdir(), "the temporary directory")
        gitdir = self._worktree_gitdir()
        if gitdir:
            self.allow(gitdir, "git's own data of this worktree")
        self.hits: list[tuple[str, str]] = []

    def _worktree_gitdir(self) -> str | None:
        """The main repository's .git of a `git worktree` checkout (its .git is a file)."""
        try:
            text = Path(self.root, ".git").read_text()
        except OSError:
            return None
        if not text.startswith("gitdir:"):
            return None
        gitdir = os.path.realpath(os.path.join(self.root, text[len("gitdir:"):].strip()))
        parent = os.path.dirname(gitdir)
        return os.path.dirname(parent) if os.path.basename(parent) == "worktrees" else gitdir

    def allow(self, path: str | os.PathLike, why: str) -> None:
        """Let tests use `path` (a directory or file) although it lies beside the checkout."""
        self.allowed[os.path.realpath(path)] = why

    def outside(self, path: object, cwd: str | None = None) -> str | None:
        """The resolved path if `path` lies beside the checkout and is not allowed, else None."""
        if isinstance(path, int) or path is None:
            return None
        try:
            text = os.fsdecode(path)  # type: ignore[arg-type]
            full = os.path.realpath(os.path.join(cwd or os.getcwd(), text))
        except (TypeError, ValueError, OSError):  # not a path, or the working directory is gone
            return None
        if self.zone is None or not full.startswith(self.zone + os.sep):
            return None
        for inside in (self.root, *self.allowed):
            if full == inside or full.startswith(inside + os.sep):
                return None
        return full

    def _popen_paths(self, args: tuple) -> tuple[list[object], str | None]:
        executable, argv, cwd, _env = args
        words = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv or ())
        paths: list[object] = [executable, cwd]
        for word in words:
            try:
                text = os.fsdecode(word)
            except TypeError:
                continue
            for token in text.split():
                for part in (token, token.partition("=")[2]):
                    if part.startswith(("/", "./", "../")):
                        paths.append(part)
        return paths, os.fsdecode(cwd) if cwd is not None else None

    def audit(self, event: str, args: tuple) -> None:
        if event not in self.WATCHED:
            return
        cwd = None
        if event == "subprocess.Popen":
            paths, cwd = self._popen_paths(args)
        else:
            paths = [args[0] if args else None]
        for path in paths:
            bad = self.outside(path, cwd)
            if bad is not None:
                self.hits.append((event, bad))
                raise OutsideRepoRead(f"{event} {bad}: a path beside the checkout; copy the fixture "
                                      f"into tests/data (tests/data/README.md)")

    @contextlib.contextmanager
    def expected(self) -> Iterator[list[tuple[str, str]]]:
        """Hits inside the block are the caller's to check (the guard's own tests): yields the
        list they are moved to when the block ends, so that they fail nothing."""
        start = len(self.hits)
        moved: list[tuple[str, str]] = []
        try:
            yield moved
        finally:
            moved.extend(self.hits[start:])
            del self.hits[start:]

    def _take(self) -> list[tuple[str, str]]:
        hits, self.hits[:] = list(self.hits), []
        return hits

    @staticmethod
    def _fail(report: pytest.BaseReport, hits: list[tuple[str, str]]) -> None:
        lines = [f"read beside the checkout (fixtures belong in tests/data): {event} {path}"
                 for event, path in dict.fromkeys(hits)]
        before = f"\n\n{report.longrepr}" if report.longrepr else ""
        report.outcome = "failed"
        report.longrepr = "\n".join(lines) + before

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
        outcome = yield
        hits = self._take()
        if hits:
            self._fail(outcome.get_result(), hits)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Iterator[None]:
        outcome = yield
        hits = self._take()
        if hits:
            self._fail(outcome.get_result(), hits)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        hits = self._take()
        if hits:
            for event, path in dict.fromkeys(hits):
                sys.stderr.write(f"outside-repo guard: {event} {path} outside any test\n")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            # a pytest-xdist worker: its exit status is not the run's, so the hits travel to
            # the controller with what the worker sends back (`pytest_testnodedown` below)
            workeroutput = getattr(session.config, "workeroutput", None)
            if workeroutput is not None:
                workeroutput["outside_repo_hits"] = hits

    @pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown without the plugin
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """pytest-xdist's controller, as a worker ends: its hits outside any test are this
        run's, reported and failing it at this process's `pytest_sessionfinish`."""
        output = getattr(node, "workeroutput", None) or {}
        self.hits.extend((str(event), str(path)) for event, path in output.get("outside_repo_hits", ()))


@pytest.hookimpl(tryfirst=True)  # before any conftest's pytest_configure asks for the guard
def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin(OutsideRepoGuard.plugin_name):
        return
    guard = OutsideRepoGuard(ROOT)
    config.pluginmanager.register(guard, OutsideRepoGuard.plugin_name)
    sys.addaudithook(guard.audit)  # for the rest of the process: audit hooks cannot be removed


@pytest.fixture
def outside_repo_guard(pytestconfig: pytest.Config) -> OutsideRepoGuard:
    """The session's guard (its `expected()` block is for the guard's own tests)."""
    return pytestconfig.pluginmanager.get_plugin(OutsideRepoGuard.plugin_name)


#: Test tiers (docs/testing.md): every test under tests/<folder>/ gets these markers, so
#: `-m "not e2e and not cluster"` selects the fast tier without a mark in each file.
#: Tests that need root elsewhere, and the slow ones, carry their marks where they are; a
#: `slow` test belongs to the e2e tier (the tier of minutes), so the fast tier leaves it out.
TIER_MARKERS: dict[str, tuple[str, ...]] = {
    "e2e": ("e2e",),
    "cluster": ("cluster",),
    "systemd": ("root", "e2e"),  # besides its own `systemd` marker: a booted box takes tens of seconds
}


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    tests = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        rel = os.path.relpath(str(item.path), tests).split(os.sep)
        for name in TIER_MARKERS.get(rel[0], ()) if len(rel) > 1 else ():
            item.add_marker(name)
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("e2e") is None:
            item.add_marker("e2e")


# --- parallel runs (pytest-xdist, docs/testing.md "Parallel runs") --------------------------

#: Folders whose tests run on one worker, one file after the other as in a serial run, under
#: `--dist loadfile` (what scripts/test runs): the systemd tier boots a box per module (a
#: booted systemd, a wheel install in it); one box at a time keeps them from competing for
#: the two cores, and the tier waits for its root (`.ci/run` builds it in the background).
TOGETHER = ("tests/systemd",)


def xdist_scope(nodeid: str) -> str:
    """The work unit of a test under `--dist loadfile`: its file, or its folder in TOGETHER."""
    path = nodeid.split("::", 1)[0]
    return next((folder for folder in TOGETHER if path.startswith(folder + "/")), path)


# optional: a pytest-xdist hook, unknown without the plugin; first: before xdist's own
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile` with the folders of TOGETHER as one unit each; other modes as given."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return LoadFileTogether(config, log)
