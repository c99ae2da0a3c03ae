"""Dev daemons for bench/side_by_side.py: databases made from a template, start, stop, RSS,
and finished-job history loaded in bulk.

A `Backend` is one database kind (SQLite, or PostgreSQL from a server URL). Its template is
migrated once (by a first daemon start) and optionally filled with history; every phase of
the benchmark then starts a fresh daemon on a copy of it (SQLite: the file copied after a
clean stop; PostgreSQL: CREATE DATABASE ... TEMPLATE), so each phase begins from the same
state without re-inserting 100,000 jobs.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import loadgen

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "examples" / "slurm-reference.toml"    # the same cluster as ../shared/slurm-peer
REFERENCE_ACCOUNTS = REPO / "examples" / "slurm-reference-accounts.toml"


class Backend:
    """One database kind and its template database."""

    def __init__(self, kind: str, root: Path, pg_url: str | None = None):
        self.kind = kind          # "sqlite" | "pg"
        self.root = root
        self.pg_url = pg_url
        self.tag = uuid.uuid4().hex[:8]
        self.dbs: list[str] = []  # PostgreSQL databases made (dropped by cleanup)
        self.template = self.new_db("base", template=False)

    # ------------------------------------------------------------------ databases
    def _pg(self, sql: str) -> list[tuple]:
        import psycopg

        conninfo = self.pg_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo, autocommit=True) as c:
            cur = c.execute(sql)
            return cur.fetchall() if cur.description else []

    def _pg_db_url(self, name: str) -> str:
        head, _, _ = self.pg_url.rpartition("/")
        return f"{head}/{name}"

    def new_db(self, phase: str, template: bool = True) -> str:
        """A database URL for `phase`: a copy of the template (or an empty one)."""
        if self.kind == "sqlite":
            d = self.root / f"{self.kind}-{phase}"
            d.mkdir(parents=True, exist_ok=True)
            path = d / "batchd.db"
            if template:
                src = Path(self.template.split("///", 1)[1])
                for suffix in ("", "-wal", "-shm"):
                    if Path(str(src) + suffix).exists():
                        shutil.copyfile(str(src) + suffix, str(path) + suffix)
            return f"sqlite:///{path}"
        name = f"batchd_bench_{self.tag}_{phase}"
        base = f' TEMPLATE "batchd_bench_{self.tag}_base"' if template else ""
        self._pg(f'CREATE DATABASE "{name}"{base}')
        self.dbs.append(name)
        return self._pg_db_url(name)

    def cleanup(self) -> None:
        for name in self.dbs:
            try:
                self._pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as e:  # noqa: BLE001 - a leftover database is reported, not fatal
                print(f"warning: could not drop {name}: {e}", file=sys.stderr)

    def count_jobs(self, url: str, where: str) -> int:
        """SELECT count(*) FROM jobs WHERE ..., read without the daemon (a plain reader:
        SQLite in WAL does not block the writer)."""
        sql = f"SELECT count(*) FROM jobs WHERE {where}"
        if self.kind == "sqlite":
            con = sqlite3.connect(url.split("///", 1)[1], timeout=30)
            try:
                return int(con.execute(sql).fetchone()[0])
            finally:
                con.close()
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
            return int(c.execute(sql).fetchone()[0])


class Daemon:
    """`batchd serve --dev` in its own directory and process group."""

    def __init__(self, backend: Backend, phase: str, db_url: str):
        self.backend = backend
        self.db_url = db_url
        self.dir = backend.root / f"{backend.kind}-{phase}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket = str(self.dir / ".batchd" / "batchd.sock")
        self.proc: subprocess.Popen | None = None
        self.start_s = float("nan")
        shutil.copyfile(REFERENCE_ACCOUNTS, self.dir / REFERENCE_ACCOUNTS.name)
        # the arrays phase submits --array=0-9999: Slurm's MaxArraySize (1001 on the peer)
        # raised here to 10001, as an admin of such a cluster would
        (self.dir / "batchd.toml").write_text(f'database_url = "{db_url}"\n' + REFERENCE.read_text()
                                              + "\n[limits]\nmax_array_size = 10001\n")

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, BATCHD_SOCKET=self.socket, BATCHD_HINTS="0")

    def start(self, timeout_s: float = 120.0) -> None:
        """Start it and wait until it answers a ping; `start_s` is how long that took."""
        log = open(self.dir / "daemon.log", "a")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([str(BIN / "batchd"), "serve", "--dev", "--log-level", "WARNING",
                                      "--config", str(self.dir / "batchd.toml")],
                                     cwd=self.dir, stdout=log, stderr=log, env=self.env, start_new_session=True)
        log.close()
        while time.perf_counter() - t0 < timeout_s:
            if self.proc.poll() is not None:
                break
            if os.path.exists(self.socket) and loadgen.ping(self.socket):
                self.start_s = time.perf_counter() - t0
                return
            time.sleep(0.05)
        self.stop()
        sys.exit(f"the {self.backend.kind} daemon did not come up:\n"
                 + (self.dir / "daemon.log").read_text()[-3000:])

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after 60 s."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def rss_mb(self) -> float:
        """Resident memory of the daemon process (not its job supervisors), MB."""
        import psutil

        if self.proc is None:
            return float("nan")
        try:
            return psutil.Process(self.proc.pid).memory_info().rss / 1e6
        except psutil.Error:
            return float("nan")

    def pending(self, name: str) -> int:
        return self.backend.count_jobs(self.db_url, f"state = 'PENDING' AND name = '{name}'")


def slurmctld_rss_mb() -> float:
    """slurmctld's resident memory (MB), or nan when none runs."""
    import psutil

    for p in psutil.process_iter(["name", "memory_info"]):
        if p.info["name"] == "slurmctld" and p.info["memory_info"] is not None:
            return p.info["memory_info"].rss / 1e6
    return float("nan")
