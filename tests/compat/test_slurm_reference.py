"""Every recorded Slurm 22.05 case of tests/data/slurm-reference replayed against batchd.

A dev daemon (`batchd serve --dev --config examples/slurm-reference.toml`) is started in a
fresh directory and `slurm_replay.Replay` (beside this file: what is compared and what is
normalised) replays the recordings through batchd's commands against it. Each recorded case is
one test: all of its checks must agree. Bad inputs (`sbatch_bad/bad_inputs.json`) are one test
each.

The cases whose recording took minutes (a time limit, a requeue's two-minute hold) are marked
`slow`; each gets its own daemon, replayed in a thread of its own at the same time as the main
replay, so the file takes as long as the slowest case (about 2.5 minutes on a 2-core machine),
not their sum. `-m "not slow"` leaves them out (about 40 s).

The judge of the shared reference material (`shared/tools/run_slurm_golden.py --bin .venv/bin
--cases tests/data/slurm-reference`, with BATCHD_SOCKET naming a dev daemon of this cluster)
replays the same files its own way: a second opinion, run by hand; the suite does not need it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from slurm_recording import is_slow
from slurm_replay import Check, Replay

from tests.harness import serve_argv, socket_exists, start_daemon, stop_daemon

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "data" / "slurm-reference"
CONFIG = REPO / "examples" / "slurm-reference.toml"
BIN = Path(sys.executable).parent  # the venv's bin: batchd, sbatch, squeue, ...
#: seconds the main replay and a slow case's replay may take (generous for a loaded machine)
MAIN_TIMEOUT_S = 420
SLOW_TIMEOUT_S = 480


def recorded_cases() -> list[tuple[str, Path, bool]]:
    """(test id, recording, slow) for every recording: `NN_name` per sbatch case file,
    `bad:NAME` per bad input (all in the one bad-inputs file)."""
    out = [(p.stem, p, is_slow(json.loads(p.read_text()))) for p in sorted((CASES / "sbatch").glob("*.json"))]
    bad = CASES / "sbatch_bad" / "bad_inputs.json"
    return out + [(f"bad:{e['name']}", bad, False) for e in json.loads(bad.read_text())["results"]]


CASE_LIST = recorded_cases()

#: a dev daemon driven through the commands by the judge (about 40 s for the main run on
#: two cores): the e2e tier, not the fast one (docs/testing.md)
pytestmark = pytest.mark.e2e


def test_every_recording_is_replayed():
    assert len({p for _, p, _ in CASE_LIST}) == 21 and len(CASE_LIST) == 20 + 17
    assert [c for c, _, slow in CASE_LIST if slow] == ["00_signal_timeout", "30_requeue"]


class ReplayRun:
    """A dev daemon in its own fresh directory and one replay of `recordings` against it in a
    thread, both started at construction; `checks` waits for the replay, `close` stops both."""

    def __init__(self, workdir: Path, recordings: list[Path]) -> None:
        workdir.mkdir(parents=True)
        self.log = workdir / "daemon.log"
        sock = workdir / ".batchd" / "batchd.sock"
        self.daemon = start_daemon(serve_argv("--dev", "--config", str(CONFIG)), cwd=workdir, env=os.environ,
                                   log=self.log, ready=socket_exists(sock), timeout_s=60, poll_s=0.1)
        self.replay = Replay(BIN, sock, workdir / "golden")
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(recordings,), daemon=True)
        self.thread.start()

    def _run(self, recordings: list[Path]) -> None:
        try:
            for path in recordings:
                self.replay.replay(path)
        except BaseException as e:  # reported by checks(), in the test's thread
            self.error = e
        finally:
            self.replay.cleanup()

    def checks(self, timeout_s: float) -> list[Check]:
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            pytest.fail(f"the replay took over {timeout_s} s; daemon log:\n{self.log.read_text()[-3000:]}")
        if self.error is not None:
            raise self.error
        return self.replay.checks

    def close(self) -> None:
        stop_daemon(self.daemon, timeout_s=20)
        self.thread.join(30)


@pytest.fixture(scope="module")
def replayed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """test id -> the ReplayRun holding its checks: the main one (every selected case but the
    slow ones, in file order, bad inputs last) and one per selected slow case; all start here."""
    selected = {item.callspec.params["case"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    runs: dict[str, ReplayRun] = {}
    opened: list[ReplayRun] = []
    try:
        for case, path, slow in CASE_LIST:
            if slow and case in selected:
                run = ReplayRun(tmp_path_factory.mktemp("compat") / case, [path])
                opened.append(run)
                runs[case] = run
        fast = [(case, path) for case, path, slow in CASE_LIST if not slow and case in selected]
        if fast:
            main = ReplayRun(tmp_path_factory.mktemp("compat") / "main", list(dict.fromkeys(p for _, p in fast)))
            opened.append(main)
            runs.update({case: main for case, _ in fast})
        yield runs
    finally:
        for run in opened:
            run.close()


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=[pytest.mark.slow] if slow else [], id=c) for c, _, slow in CASE_LIST])
def test_recorded_case_agrees(case: str, replayed: dict[str, ReplayRun]) -> None:
    """Every check the replay derives from the recording of `case` agrees."""
    slow = next(s for c, _, s in CASE_LIST if c == case)
    checks = [c for c in replayed[case].checks(SLOW_TIMEOUT_S if slow else MAIN_TIMEOUT_S) if c.case == case]
    assert checks, f"the replay made no check of {case}"
    failing = [f"{c.name}: recorded {c.want!r}\n{' ' * len(c.name)}  batchd   {c.got!r}" for c in checks if not c.ok]
    assert not failing, f"{len(failing)}/{len(checks)} checks of {case} disagree:\n" + "\n".join(failing)
