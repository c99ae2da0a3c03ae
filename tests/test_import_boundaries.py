"""The layout's rules (docs/architecture.md, "The layout"), read from the source: every
import statement of every module, at module level or inside a function, TYPE_CHECKING
blocks included.

- `batchd.node` (the agent's processes and devices) imports neither `batchd.server` nor
  `batchd.control`; `batchd.server` (what a request touches) does not import `batchd.node`.
- `batchd.slurm`, `batchd.scheduler` and `batchd.priority` do no I/O (no module of the
  standard library or beyond that reaches files, processes, sockets, threads or
  databases); Slurm's vocabulary imports nothing of batchd but itself; the scheduler only
  itself, the priority maths and the vocabulary; the priority maths only itself and the
  vocabulary.
- Nothing of the daemon (`batchd` but `batchd.cli`) imports the commands' modules.
- `batchd.store` (all SQL) imports only the model, the errors, the fault points, Slurm's
  vocabulary and its own migrations.
- A Slurm-named command (`sbatch`, `squeue`, ...) reaches, through every import it makes
  and every import of what it imports, only the protocol, Slurm's vocabulary and the
  commands' own modules (`batchd.cli`), and `sshare`/`sprio` the priority maths they
  compute their rows with: never the daemon's code, SQLAlchemy or the scheduler.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: where a dotted module's file is (setuptools' package-dir: cli/ and migrations/ install
#: as batchd.cli and batchd.migrations)
PACKAGE_DIRS = {"batchd.cli": ROOT / "cli", "batchd.migrations": ROOT / "migrations", "batchd": ROOT / "batchd"}
SLURM_COMMANDS = ("sbatch", "salloc", "squeue", "scancel", "sacct", "sinfo", "scontrol", "sshare", "sprio", "sreport",
                  "sacctmgr", "srun", "bsub", "bjobs", "bkill")
#: standard-library and third-party modules that reach the world outside the process's memory
IO_MODULES = {"os", "io", "sys", "subprocess", "socket", "select", "selectors", "signal", "threading",
              "multiprocessing", "concurrent", "asyncio", "shutil", "pathlib", "tempfile", "glob", "fcntl",
              "pwd", "grp", "ctypes", "mmap", "sqlite3", "logging", "urllib", "http",
              "sqlalchemy", "psycopg", "psutil", "pynvml", "apscheduler", "click", "alembic"}


def file_of(module: str) -> Path | None:
    for prefix in sorted(PACKAGE_DIRS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            base = PACKAGE_DIRS[prefix].joinpath(*module[len(prefix) + 1:].split(".")) if module != prefix \
                else PACKAGE_DIRS[prefix]
            if base.with_suffix(".py").is_file():
                return base.with_suffix(".py")
            if (base / "__init__.py").is_file():
                return base / "__init__.py"
            return None
    return None


def modules_under(package: str) -> list[str]:
    top = file_of(package)
    assert top is not None and top.name == "__init__.py", package
    out = []
    for p in sorted(top.parent.rglob("*.py")):
        rel = p.relative_to(top.parent).with_suffix("").parts
        out.append(".".join((package, *rel[:-1])) if rel[-1] == "__init__" else ".".join((package, *rel)))
    return out


@cache
def imports_of(module: str) -> frozenset[str]:
    """Every module `module` imports (dotted; `from P import x` gives P.x where that is a
    module, else P), each one's parent packages included."""
    path = file_of(module)
    assert path is not None, module
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                src = ".".join([*base, *([node.module] if node.module else [])])
            else:
                src = node.module or ""
            out.add(src)
            out.update(f"{src}.{a.name}" for a in node.names if file_of(f"{src}.{a.name}") is not None)
    with_parents = set()
    for m in out:
        parts = m.split(".")
        with_parents.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    with_parents.discard(module)
    return frozenset(with_parents)


def batchd_imports(module: str) -> set[str]:
    return {m for m in imports_of(module) if m.startswith("batchd.")}


def within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(i for i in batchd_imports(m) if file_of(i) is not None)
    return seen


def violations(packages: tuple[str, ...], allowed: tuple[str, ...]) -> list[str]:
    return [f"{m} imports {i}" for p in packages for m in modules_under(p)
            for i in sorted(batchd_imports(m)) if not within(i, *allowed)]


def test_the_roles_are_packages():
    for p in ("batchd.slurm", "batchd.server", "batchd.control", "batchd.node", "batchd.scheduler",
              "batchd.priority", "batchd.store", "batchd.accounting", "batchd.cli"):
        assert len(modules_under(p)) > 1, p


def test_the_node_imports_neither_the_server_nor_the_controller():
    bad = [v for v in violations(("batchd.node",), ("batchd",))
           if within(v.split(" imports ")[1], "batchd.server", "batchd.control")]
    assert not bad


def test_the_server_does_not_import_the_node():
    bad = [v for v in violations(("batchd.server",), ("batchd",)) if within(v.split(" imports ")[1], "batchd.node")]
    assert not bad


@pytest.mark.parametrize("package, allowed", [
    ("batchd.slurm", ("batchd.slurm",)),
    ("batchd.scheduler", ("batchd.scheduler", "batchd.priority", "batchd.slurm")),
    ("batchd.priority", ("batchd.priority", "batchd.slurm")),
])
def test_the_pure_packages_import_only_pure_code_and_do_no_io(package, allowed):
    assert not violations((package,), allowed)
    io = [f"{m} imports {i}" for m in modules_under(package) for i in sorted(imports_of(m))
          if i.split(".")[0] in IO_MODULES]
    assert not io


def test_the_daemon_imports_nothing_of_the_commands():
    """Presentation is the commands' (cli/): the daemon's code never imports it."""
    daemon = [m for m in modules_under("batchd") if not within(m, "batchd.cli", "batchd.migrations")]
    assert not [f"{m} imports {i}" for m in daemon for i in sorted(batchd_imports(m)) if within(i, "batchd.cli")]


def test_the_simulator_stays_out_of_the_daemon():
    """`batchd simulate` (batchd.sim) reaches the scheduler; nothing of the daemon reaches it."""
    daemon = [m for m in modules_under("batchd") if not within(m, "batchd.cli", "batchd.migrations", "batchd.sim")]
    assert not [f"{m} imports {i}" for m in daemon for i in sorted(batchd_imports(m)) if within(i, "batchd.sim")]


def test_the_store_imports_only_the_model_the_errors_and_slurm():
    assert not violations(("batchd.store",), ("batchd.store", "batchd.model", "batchd.errors", "batchd.faults",
                                              "batchd.slurm", "batchd.migrations"))


@pytest.mark.parametrize("command", SLURM_COMMANDS)
def test_a_slurm_command_reaches_only_the_protocol_slurm_and_the_commands(command):
    allowed = ("batchd.protocol", "batchd.slurm", "batchd.cli")
    if command in ("sshare", "sprio"):
        allowed += ("batchd.priority",)  # their rows are computed by the command (sshare_table)
    reached = closure(f"batchd.cli.{command}")
    assert not sorted(m for m in reached if not within(m, *allowed) and m != "batchd")
    # and no command module that is not a Slurm command's helper: never the admin's
    # `batchd` commands (which reach the daemon)
    assert not sorted(m for m in reached if within(m, "batchd.cli") and m.rsplit(".", 1)[1].startswith("cmd_"))


def test_the_rules_catch_a_crossing(tmp_path, monkeypatch):
    """The checker finds an import that crosses (a module written for the test)."""
    (tmp_path / "batchd" / "node").mkdir(parents=True)
    (tmp_path / "batchd" / "__init__.py").write_text("")
    (tmp_path / "batchd" / "node" / "__init__.py").write_text("")
    (tmp_path / "batchd" / "node" / "bad.py").write_text("def f():\n    from batchd.server import service\n")
    (tmp_path / "batchd" / "server").mkdir()
    (tmp_path / "batchd" / "server" / "__init__.py").write_text("")
    (tmp_path / "batchd" / "server" / "service.py").write_text("import os\n")
    monkeypatch.setitem(PACKAGE_DIRS, "batchd", tmp_path / "batchd")
    imports_of.cache_clear()
    try:
        assert violations(("batchd.node",), ("batchd.node",)) == [
            "batchd.node.bad imports batchd.server", "batchd.node.bad imports batchd.server.service"]
        assert "os" in imports_of("batchd.server.service")
    finally:
        imports_of.cache_clear()
