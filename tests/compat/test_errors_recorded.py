"""The error cases of issue 15.6 ("errors that help") as Slurm 22.05 answered them, replayed
through batchd's commands against a dev daemon over its real socket.

`recorded/errors_slurm2205.json` was written by `record_errors.py` (beside this file) from the
real Slurm peer (`../shared/slurm-peer/`, cluster as `examples/slurm-reference.toml`). Each
case's command runs by `sh -c` with batchd's commands first on the PATH, in order, against one
fresh daemon; job ids are normalised. batchd must answer as Slurm did (exit code, stdout,
stderr), except where the tables below say how and why it answers otherwise:

- `EXPLAINED`: Slurm's lines, then batchd's reason on `sbatch: error:` lines of its own;
- `WARNED`: the same answer, plus batchd's warning that it ignores an option;
- `DIFFERENT`: batchd's own answer, a deliberate difference (README, "Deliberate
  differences"), each with its reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import serve_argv, socket_exists, start_daemon, stop_daemon

REPO = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).resolve().parent / "recorded" / "errors_slurm2205.json"
CONFIG = REPO / "examples" / "slurm-reference.toml"
BIN = Path(sys.executable).parent
CASES = json.loads(RECORDED.read_text())["results"]

NODE_CONFIG = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
EXPLAINED = {
    "sbatch_gres_type_unknown": "sbatch: error: no node of partition gpu offers gres/gpu:nonexistent; "
                                "GPU types there: h200\n",
    "sbatch_gres_too_many": "sbatch: error: 8 GPUs asked on one node; the most on one node of partition gpu "
                            "is 4 (vm), 4 in the partition\n",
    "sbatch_gpus_too_many": "sbatch: error: 8 GPUs asked on one node; the most on one node of partition gpu "
                            "is 4 (vm), 4 in the partition\n",
}
WARNED = {
    "sbatch_mail_type": "sbatch: warning: --mail-type is ignored: batchd sends no mail\n",
    "sbatch_mail_type_one_known": "sbatch: warning: --mail-type is ignored: batchd sends no mail\n",
    "sbatch_mail_user": "sbatch: warning: --mail-user is ignored: batchd sends no mail\n",
    "sbatch_container": "sbatch: warning: --container is ignored: batchd runs no OCI containers\n",
    "sbatch_container_env": "sbatch: warning: --container is ignored: batchd runs no OCI containers\n",
    "sbatch_directive_mail_container": "sbatch: warning: --mail-type is ignored: batchd sends no mail\n"
                                       "sbatch: warning: --container is ignored: batchd runs no OCI containers\n",
}
# (rc, stdout, stderr) batchd gives instead, and why
DIFFERENT = {
    # DESIGN.md section 3: what no node can ever hold is refused at submit, without burning a
    # job id or pending forever (Slurm accepts it and pends with PartitionConfig, or, held,
    # accepts it untested); batchd names the cause after Slurm's refusal line
    "sbatch_gres_type_unknown_held": (1, "", NODE_CONFIG + EXPLAINED["sbatch_gres_type_unknown"]),
    "sbatch_cpus_65": (1, "", NODE_CONFIG + "sbatch: error: 65 CPUs asked on one node; the most on one node "
                                            "of partition gpu is 16 (vm)\n"),
    "sbatch_cpus_65_mem": (1, "", NODE_CONFIG + "sbatch: error: 65 CPUs asked on one node; the most on one node "
                                                "of partition gpu is 16 (vm)\n"),
    "sbatch_cpus_17": (1, "", NODE_CONFIG + "sbatch: error: 17 CPUs asked on one node; the most on one node "
                                            "of partition gpu is 16 (vm)\n"),
    "sbatch_cpus_17_reason": (1, "", NODE_CONFIG + "sbatch: error: 17 CPUs asked on one node; the most on one "
                                                   "node of partition gpu is 16 (vm)\n"),
}


def _norm(text: str) -> str:
    text = re.sub(r"Submitted batch job \d+", "Submitted batch job <ID>", text)
    return re.sub(r"for job \d+", "for job <ID>", text)


def want(case: dict) -> tuple[int, str, str]:
    """What batchd must answer for a recorded case (module docstring)."""
    name = case["name"]
    if name in DIFFERENT:
        return DIFFERENT[name]
    stderr = case["stderr"] + EXPLAINED.get(name, "") + WARNED.get(name, "")
    return case["rc"], case["stdout"], stderr


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """name -> batchd's (rc, stdout, stderr) for every recorded case, run in order."""
    work = tmp_path_factory.mktemp("errors")
    sock = work / ".batchd" / "batchd.sock"
    try:
        daemon = start_daemon(serve_argv("--dev", "--config", str(CONFIG)), cwd=work, env=os.environ,
                              log=work / "daemon.log", ready=socket_exists(sock), timeout_s=60, poll_s=0.1)
    except RuntimeError as e:
        pytest.fail(str(e))
    try:
        # as a person at a terminal sees them (BATCHD_HINTS=1): in a pipe batchd's reasons and
        # warnings are left out and stderr is Slurm's exactly (test_slurm_reference checks that)
        env = {**os.environ, "BATCHD_SOCKET": str(sock), "PATH": f"{BIN}:/usr/bin:/bin", "BATCHD_HINTS": "1"}
        env.pop("SBATCH_CONTAINER", None)
        out = {}
        for case in CASES:
            cwd = work / "cases" / case["name"]
            cwd.mkdir(parents=True)
            p = subprocess.run(["sh", "-c", case["command"]], cwd=cwd, env=env, capture_output=True, text=True,
                               timeout=60)
            out[case["name"]] = (p.returncode, _norm(p.stdout), _norm(p.stderr))
        return out
    finally:
        stop_daemon(daemon, timeout_s=20)


def test_every_exception_names_a_recorded_case():
    names = {c["name"] for c in CASES}
    assert set(EXPLAINED) | set(WARNED) | set(DIFFERENT) <= names


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_batchd_answers_as_recorded(case: dict, answers: dict[str, tuple[int, str, str]]) -> None:
    rc, stdout, stderr = want(case)
    assert answers[case["name"]] == (rc, _norm(stdout), _norm(stderr)), case["command"]
