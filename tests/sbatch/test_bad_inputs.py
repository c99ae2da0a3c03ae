"""Every recorded rejected or dubious submission of sbatch_bad/bad_inputs.json, replayed
through the real sbatch code path (option parsing, script checks, JOB_SPEC, socket
client) against a fake daemon that runs the real `batchd.server.jobspec.resolve`: same
stdout, stderr and exit code as Slurm, and nothing accepted for a rejection."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from sbatch_helpers import CLUSTER, REF, FakeDaemon, recorded_caller_env

from batchd.cli import sbatch
from batchd.server import jobspec
from batchd.slurm.slurmtime import format_duration

BAD = REF / "sbatch_bad" / "bad_inputs.json"
DATA = json.loads(BAD.read_text())
CASES = DATA["results"]


def run_sbatch(argv, monkeypatch, capsys, environ=None):
    monkeypatch.setattr(sbatch.os, "environ", environ if environ is not None else recorded_caller_env())
    try:
        rc = sbatch.main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    sock = str(tmp_path / "d.sock")
    monkeypatch.setenv("BATCHD_SOCKET", sock)
    with FakeDaemon(sock) as d:
        yield d


def test_every_recorded_bad_input_is_replayed():
    assert len(CASES) == 17 and len({c["name"] for c in CASES}) == 17


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_bad_input(case, daemon, tmp_path, monkeypatch, capsys):
    work = tmp_path / "bad"
    work.mkdir()
    for name, content in DATA["files"].items():
        (work / name).write_text(content)
    monkeypatch.chdir(work)
    argv = shlex.split(case["command"])[1:]
    env = recorded_caller_env({"BATCHD_SOCKET": daemon.path})
    rc, out, err = run_sbatch(argv, monkeypatch, capsys, env)
    assert rc == case["rc"]
    # Slurm's lines exactly: batchd's reasons are for a terminal (BATCHD_HINTS), not a pipe
    assert err == case["stderr"]
    norm = re.sub(r"Submitted batch job \d+", "Submitted batch job <ID>", out)
    assert norm == re.sub(r"Submitted batch job \d+", "Submitted batch job <ID>", case["stdout"])
    if case["rc"] != 0:
        assert daemon.accepted == []  # nothing stored for a rejected submission
        return
    assert len(daemon.accepted) == 1
    shown = dict(re.findall(r"([A-Za-z][\w/:]*)=(\S*)", case.get("scontrol_show_job") or ""))
    resolved = jobspec.resolve(daemon.accepted[0], CLUSTER, "root", 0)
    if "TimeLimit" in shown:
        assert format_duration(resolved["time_limit_s"]) == shown["TimeLimit"]
    if "TRES" in shown:
        assert resolved["tres_req"] == shown["TRES"]
    if "NumCPUs" in shown:
        assert str(resolved["cpus"]) == shown["NumCPUs"]
    if "Nice" in shown:
        assert str(resolved["nice"]) == shown["Nice"]


def test_unreachable_daemon_is_one_line(tmp_path, monkeypatch, capsys):
    env = recorded_caller_env({"BATCHD_SOCKET": str(tmp_path / "none.sock")})
    rc, out, err = run_sbatch(["--wrap", "true"], monkeypatch, capsys, env)
    assert rc == 1 and out == ""
    assert err.startswith("sbatch: error: cannot reach the batchd daemon at ") and err.count("\n") == 1


@pytest.mark.parametrize("argv, first", [
    # Slurm 22.05 (peer, tests/compat/recorded/errors_slurm2205.json): getopt errors exit 255
    (["--bogus", "--wrap", "true"], "sbatch: unrecognized option '--bogus'"),
    (["--mail", "true"], "sbatch: option '--mail' is ambiguous; possibilities: '--mail-type' '--mail-user'"),
    (["--wrap"], "sbatch: option '--wrap' requires an argument"),
], ids=["unrecognized", "ambiguous", "missing-argument"])
def test_getopt_errors_exit_255_with_hint(argv, first, monkeypatch, capsys):
    rc, out, err = run_sbatch(argv, monkeypatch, capsys)
    assert (rc, out, err) == (255, "", f'{first}\nTry "sbatch --help" for more information\n')


def test_mail_type_needs_one_known_type(daemon, monkeypatch, capsys):
    # Slurm 22.05 (peer): --mail-type=bogus -> exit 255 "Invalid --mail-type specification";
    # END,bogus and lower-case end are accepted
    rc, out, err = run_sbatch(["--mail-type=bogus", "--wrap", "true"], monkeypatch, capsys)
    assert (rc, out, err) == (255, "", "sbatch: error: Invalid --mail-type specification\n")
    env = recorded_caller_env({"BATCHD_SOCKET": daemon.path, "BATCHD_HINTS": "1"})  # as on a terminal
    for value in ("END,bogus", "end"):
        rc, out, err = run_sbatch([f"--mail-type={value}", "--wrap", "true"], monkeypatch, capsys, env)
        assert rc == 0 and err == "sbatch: warning: --mail-type is ignored: batchd sends no mail\n"


def test_no_shebang_refused(tmp_path, monkeypatch, capsys):
    (tmp_path / "s.sh").write_text("env | sort\n")
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_sbatch(["s.sh"], monkeypatch, capsys)
    assert rc == 1
    assert err.splitlines()[0] == "sbatch: error: This does not look like a batch script.  The first"


@pytest.mark.parametrize("argv, message, code", [
    (["-t", "1:2:3:4", "--wrap", "x"], "sbatch: error: Invalid --time specification", 255),
    (["--mem", "12X", "--wrap", "x"], "sbatch: error: Invalid --mem specification", 255),
    (["--mem-per-cpu=abc", "--wrap", "x"], "sbatch: error: Invalid --mem-per-cpu specification", 255),
    (["-c", "zero", "--wrap", "x"], 'sbatch: error: Invalid numeric value "zero" for --cpus-per-task.', 1),
    (["-N", "0", "--wrap", "x"], "sbatch: error: invalid node count `0'", 255),
    (["--signal=FOO@10", "--wrap", "x"], "sbatch: error: Invalid --signal specification", 255),
    (["--open-mode=sideways", "--wrap", "x"], "sbatch: error: Invalid --open-mode specification", 255),
    (["--gres=gpu:h200:two", "--wrap", "x"], "sbatch: error: Invalid generic resource (gres) specification", 1),
    (["--mem=1G", "--mem-per-cpu=1G", "--wrap", "x"],
     "sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.", 1),
], ids=["time-fields", "mem-unit", "mem-per-cpu", "cpus-int", "nodes-zero", "signal-name", "open-mode",
        "gres-count", "mem-exclusive"])
def test_client_side_refusals(argv, message, code, monkeypatch, capsys):
    rc, out, err = run_sbatch(argv, monkeypatch, capsys)
    assert (rc, out, err) == (code, "", message + "\n")


@pytest.mark.parametrize("argv, message", [
    (["-A", "physics", "--wrap", "x"], "Invalid account or account/partition combination specified"),
    (["-q", "gold", "--wrap", "x"], "Invalid qos specification"),
    (["-c", "17", "--wrap", "x"], "Requested node configuration is not available"),
    (["--gpus=5", "--wrap", "x"], "Requested node configuration is not available"),
    (["-n", "3", "--gpus-per-task=2", "--wrap", "x"], "Requested node configuration is not available"),
    (["--gres=fpga:1", "--wrap", "x"], "Invalid generic resource (gres) specification"),
    (["--array=0-1001", "--wrap", "x"], "Invalid job array specification"),
    (["-d", "afterok:1,afterany:2?afterok:3", "--wrap", "x"], "Job dependency problem"),
    (["-N", "2", "--wrap", "x"], "Node count specification invalid"),
], ids=["account", "qos", "cpus", "gpus", "gpus-per-task", "gres-name", "array-size", "dep-mixed", "nodes"])
def test_server_side_refusals(argv, message, daemon, monkeypatch, capsys):
    env = recorded_caller_env({"BATCHD_SOCKET": daemon.path})
    rc, out, err = run_sbatch(argv, monkeypatch, capsys, env)
    assert (rc, out) == (1, "")
    # Slurm's line alone in a pipe (batchd's reason after it is for a terminal, BATCHD_HINTS)
    assert err == f"sbatch: error: Batch job submission failed: {message}\n"
    assert daemon.accepted == []
