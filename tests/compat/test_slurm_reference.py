"""Every recorded Slurm 22.05 case of `../shared/slurm-reference/` replayed against batchd.

A dev daemon (`batchd serve --dev --config examples/slurm-reference.toml`) is started in a
fresh directory, and the judge `../shared/tools/run_slurm_golden.py` replays the recordings
through batchd's commands against it (`--json` gives every check's verdict). Each recorded
case is one test: all of its checks must agree. Bad inputs (`sbatch_bad/bad_inputs.json`)
are one test each.

The cases the judge calls slow (recorded span over its SLOW_S: a time limit, a requeue's
two-minute hold) are marked `slow`; each gets its own daemon and judge, started together
with the main run, so the file takes as long as the slowest case (about 2.5 minutes on a
2-core machine), not their sum. `-m "not slow"` leaves them out (about 40 s).

The judge's own normalisation (ids, times, paths, node and user names) is all there is,
with one addition documented at `burn_low_job_ids`. The tests skip when `../shared` (located
as `Path(repo).parent / "shared"`) or the judge is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.harness import serve_argv, socket_exists, start_daemon, stop_daemon

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
JUDGE = SHARED / "tools" / "run_slurm_golden.py"
CASES = SHARED / "slurm-reference"
CONFIG = REPO / "examples" / "slurm-reference.toml"
BIN = Path(sys.executable).parent  # the venv's bin: batchd, sbatch, squeue, ...
NODE = "vm"
#: Seconds the main judge run and a slow case's run may take (generous for a loaded machine).
MAIN_TIMEOUT_S = 420
SLOW_TIMEOUT_S = 480


def _judge() -> ModuleType | None:
    """The judge as a module (its `rec_span` and `SLOW_S` say which cases are slow)."""
    if not JUDGE.is_file():
        return None
    spec = importlib.util.spec_from_file_location("run_slurm_golden", JUDGE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def recorded_cases() -> list[tuple[str, bool]]:
    """(case id, slow) for every recording: `NN_name` per sbatch case file, `bad:NAME`
    per bad input. Empty when the recordings or the judge are missing."""
    judge = _judge()
    if judge is None or not (CASES / "sbatch").is_dir():
        return []
    out = []
    for path in sorted((CASES / "sbatch").glob("*.json")):
        rec = json.loads(path.read_text())
        simple = "steps" not in rec and "results" not in rec
        out.append((path.stem, simple and judge.rec_span(rec) > judge.SLOW_S))
    bad = CASES / "sbatch_bad" / "bad_inputs.json"
    if bad.is_file():
        out += [(f"bad:{e['name']}", False) for e in json.loads(bad.read_text())["results"]]
    return out


CASE_LIST = recorded_cases()

#: a dev daemon driven through the commands by the judge (about 40 s for the main run on
#: two cores): the e2e tier, not the fast one (docs/testing.md)
pytestmark = pytest.mark.e2e


def _env(sock: Path) -> dict[str, str]:
    return {**os.environ, "BATCHD_SOCKET": str(sock)}


def burn_low_job_ids(sock: Path) -> None:
    """The one normalisation beyond the judge's own: the judge reads any field value that
    is a bare number as a job id when the case has a job of that id (`Requeue=1`,
    `Restarts=1` of scontrol become `J1`); the recordings' ids were all far above 1, a
    fresh daemon's first job is 1. One held job, cancelled at once, takes id 1 first."""
    env = _env(sock)
    out = subprocess.run([str(BIN / "sbatch"), "--parsable", "--hold", "-J", "burn-id", "--wrap", "true"],
                         env=env, capture_output=True, text=True, timeout=60, check=True,
                         cwd=sock.parent.parent)  # the daemon's dir, never the checkout
    subprocess.run([str(BIN / "scancel"), out.stdout.strip().split(";")[0]], env=env,
                   capture_output=True, timeout=60, check=True)


class JudgeRun:
    """A dev daemon in its own fresh directory and one judge run against it, both started
    at construction; `results` waits for the judge, `close` stops the daemon."""

    def __init__(self, workdir: Path, only: list[str] | None) -> None:
        workdir.mkdir(parents=True)
        self.workdir = workdir
        self.out = workdir / "judge.json"
        self.log = workdir / "judge.log"
        sock = workdir / ".batchd" / "batchd.sock"
        self.daemon = start_daemon(serve_argv("--dev", "--config", str(CONFIG)), cwd=workdir, env=os.environ,
                                   log=workdir / "daemon.log", ready=socket_exists(sock), timeout_s=60, poll_s=0.1)
        args = [sys.executable, str(JUDGE), "--bin", str(BIN), "--node", NODE, "--cases", str(CASES),
                "-v", "--json", str(self.out)]
        if only is not None:
            burn_low_job_ids(sock)
            args += ["--slow", "--only", "^(" + "|".join(re.escape(c) for c in only) + r")\.json$"]
        with open(self.log, "wb") as jlog:
            self.judge = subprocess.Popen(args, cwd=workdir, env=_env(sock), stdin=subprocess.DEVNULL,
                                          stdout=jlog, stderr=subprocess.STDOUT)
        self._results: list[dict[str, Any]] | None = None

    def results(self, timeout_s: float) -> list[dict[str, Any]]:
        """Every check the judge recorded: {category, case, check, ok, detail}."""
        if self._results is None:
            try:
                self.judge.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.judge.kill()
                self.judge.wait()
                pytest.fail(f"judge timed out after {timeout_s} s:\n{self.log.read_text()[-3000:]}")
            if self.judge.returncode != 0 or not self.out.is_file():
                pytest.fail(f"judge failed (rc {self.judge.returncode}):\n{self.log.read_text()[-3000:]}")
            self._results = json.loads(self.out.read_text())
        return self._results

    def close(self) -> None:
        if self.judge.poll() is None:
            self.judge.kill()
            self.judge.wait()
        stop_daemon(self.daemon, timeout_s=20)


@pytest.fixture(scope="module")
def judged(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """case id -> its JudgeRun: the main run (every case but the slow ones) and, for each
    selected slow case, a run of its own; all start here, at once."""
    selected = {item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    slow = [c for c, is_slow in CASE_LIST if is_slow and c in selected]
    fast = [c for c, is_slow in CASE_LIST if not is_slow and c in selected]
    runs: dict[str, JudgeRun] = {}
    opened: list[JudgeRun] = []
    try:
        for case in slow:
            run = JudgeRun(tmp_path_factory.mktemp("compat") / case, [case])
            opened.append(run)
            runs[case] = run
        if fast:
            main = JudgeRun(tmp_path_factory.mktemp("compat") / "main", None)
            opened.append(main)
            runs.update({c: main for c in fast})
        yield runs
    finally:
        for run in opened:
            run.close()


def _checks(results: list[dict[str, Any]], case: str) -> list[dict[str, Any]]:
    if case.startswith("bad:"):
        name = case[len("bad:"):]
        return [r for r in results if r["case"] == "bad" and r["check"].startswith(name + ".")]
    return [r for r in results if r["case"] == case]


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=[pytest.mark.slow] if slow else [], id=c) for c, slow in CASE_LIST])
def test_recorded_case_agrees(case: str, judged: dict[str, JudgeRun]) -> None:
    """Every check the judge derives from the recording of `case` agrees."""
    slow = dict(CASE_LIST)[case]
    checks = _checks(judged[case].results(SLOW_TIMEOUT_S if slow else MAIN_TIMEOUT_S), case)
    assert checks, f"the judge recorded no check for {case}"
    failing = [f"{r['check']}: {r['detail']}" for r in checks if not r["ok"]]
    assert not failing, f"{len(failing)}/{len(checks)} checks of {case} disagree:\n" + "\n".join(failing)
