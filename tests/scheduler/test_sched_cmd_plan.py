"""`batchd plan`: JSON and table output, stdin, one-line errors, --dump."""

import json

from click.testing import CliRunner

import batchd.cli.client as client
from batchd.cli.cmd_plan import command

from .sched_builders import account, job, node, snapshot


def write(tmp_path, data) -> str:
    p = tmp_path / "snap.json"
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(p)


SNAP = snapshot([node("n0", 1)], [account("a", quota=1)], [job("j1", "a"), job("j2", "a")])


def test_json(tmp_path):
    r = CliRunner().invoke(command, ["--json", write(tmp_path, SNAP)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [s["job"] for s in out["start"]] == ["j1"]
    assert out["pending"] == [{"job": "j2", "reason": "Resources"}]


def test_table_and_stdin():
    r = CliRunner().invoke(command, ["-"], input=json.dumps(SNAP))
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "START (1)"
    assert lines[1].split() == ["JOBID", "ALLOCATION", "AFTER"]
    assert lines[2].split()[0] == "j1" and "gpus=0" in lines[2]
    assert "PENDING (1)" in lines
    assert any(line.split()[:2] == ["j2", "Resources"] for line in lines)
    assert lines[-3].split() == ["ACCOUNT", "GRES/GPU"]


def test_bad_file_one_line_exit_1(tmp_path):
    bad = dict(SNAP, jobs=[dict(SNAP["jobs"][0], account="ghost")])
    r = CliRunner().invoke(command, ["--json", write(tmp_path, bad)])
    assert r.exit_code == 1
    assert r.output.strip().count("\n") == 0
    assert "jobs[0].account: unknown account" in r.output and r.output.startswith("batchd plan: error:")
    r = CliRunner().invoke(command, [write(tmp_path, "{not json")])
    assert r.exit_code == 1 and "not valid JSON" in r.output
    r = CliRunner().invoke(command, [str(tmp_path / "missing.json")])
    assert r.exit_code == 1 and "missing.json" in r.output


def test_dump(monkeypatch):
    calls = []

    def fake(method, path, body=None, query=None, timeout=60.0):
        calls.append((method, path))
        return SNAP
    monkeypatch.setattr(client, "request", fake)
    r = CliRunner().invoke(command, ["--dump"])
    assert r.exit_code == 0, r.output
    assert calls == [("GET", "/v1/snapshot")]
    assert json.loads(r.output) == SNAP


def test_dump_daemon_unreachable(monkeypatch):
    def fake(*a, **k):
        raise client.Unreachable("cannot reach the batchd daemon at /x: No such file")
    monkeypatch.setattr(client, "request", fake)
    r = CliRunner().invoke(command, ["--dump"])
    assert r.exit_code == 1 and "cannot reach the batchd daemon" in r.output


def test_table_golden():
    """The readable table for KAI case 19 (reclaim to equal share), against a golden file."""
    from pathlib import Path
    golden = Path(__file__).parent / "golden"
    r = CliRunner().invoke(command, [str(golden / "plan_reclaim_snapshot.json")])
    assert r.exit_code == 0, r.output
    assert r.output == (golden / "plan_reclaim_table.txt").read_text()
