"""The slurmrestd API (v0.0.38) on a dev daemon's TCP listener (issue 20, item 2): a token
from `scontrol token`, every endpoint's reply valid against Slurm's published OpenAPI
document (tests/openapi_check.py), a submission over REST and one over sbatch that make
the same job, cancel and update over REST, and the refusals: no token, a forged or
expired one, another user's name, someone else's job."""

from __future__ import annotations

import json
import os
import pwd
import re
import socket
import time
import urllib.error
import urllib.request

import pytest

from batchd.server import tokens
from tests import openapi_check as oc
from tests.e2e.conftest import merge_toml

API = "/slurm/v0.0.38"
DB = "/slurmdb/v0.0.38"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Rest:
    def __init__(self, port: int, user: str, token: str):
        self.base = f"http://127.0.0.1:{port}"
        self.user, self.token = user, token

    def __call__(self, method: str, path: str, body=None, headers=None, raw: bytes | None = None):
        h = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token, "Content-Type": "application/json"}
        h.update(headers or {})
        h = {k: v for k, v in h.items() if v is not None}
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text


def _valid(doc_path: str, method: str, status: int, reply) -> None:
    schema = oc.response_schema(doc_path, method, status)
    assert schema is not None
    problems = oc.errors(reply, schema)
    assert problems == [], problems[:10]


@pytest.fixture
def rest(cluster):
    port = _free_port()
    cluster.stop()
    cluster.cfg.write_text(merge_toml(cluster.cfg.read_text(), f'[http]\nlisten = "127.0.0.1:{port}"\n'))
    cluster.start()
    out = cluster.run("scontrol", "token", "lifespan=600").stdout
    m = re.fullmatch(r"SLURM_JWT=(\S+)\n", out)
    assert m, out
    me = pwd.getpwuid(os.getuid()).pw_name
    return Rest(port, me, m.group(1))


def test_every_read_endpoint_answers_as_the_document_says(cluster, rest):
    jid = cluster.submit("--gres=gpu:h200:1", "-t", "10", "--wrap", "sleep 30")
    cluster.wait(jid, ("RUNNING",))
    done = cluster.submit("-J", "quick", "--wrap", "true")
    cluster.wait(done, ("COMPLETED",))
    for path, doc_path in ((f"{API}/ping", f"{API}/ping"), (f"{API}/diag", f"{API}/diag"),
                           (f"{API}/jobs", f"{API}/jobs"), (f"{API}/job/{jid}", f"{API}/job/{{job_id}}"),
                           (f"{API}/nodes", f"{API}/nodes"), (f"{API}/node/node1", f"{API}/node/{{node_name}}"),
                           (f"{API}/partitions", f"{API}/partitions"),
                           (f"{API}/partition/gpu", f"{API}/partition/{{partition_name}}"),
                           (f"{DB}/accounts", f"{DB}/accounts"), (f"{DB}/account/default", f"{DB}/account/{{account_name}}"),
                           (f"{DB}/associations", f"{DB}/associations"), (f"{DB}/jobs", f"{DB}/jobs"),
                           (f"{DB}/job/{done}", f"{DB}/job/{{job_id}}")):
        status, reply = rest("GET", path)
        assert status == 200, (path, reply)
        assert reply["errors"] == [], (path, reply)
        _valid(doc_path, "get", status, reply)
    _s, job = rest("GET", f"{API}/job/{jid}")
    (j,) = job["jobs"]
    squeue = cluster.job(jid)
    assert (j["job_id"], j["job_state"], j["nodes"], j["account"], j["user_name"]) == (
        jid, "RUNNING", squeue["node_list"], squeue["account"], squeue["user"])
    assert j["time_limit"] == 10 and j["tres_per_node"] == "gres:gpu:h200:1"
    _s, hist = rest("GET", f"{DB}/job/{done}")
    (h,) = hist["jobs"]
    assert (h["job_id"], h["name"], h["state"]["current"], h["exit_code"]["return_code"]) == (
        done, "quick", "COMPLETED", 0)
    assert {s["step"]["id"] for s in h["steps"]} >= {"batch"}
    _s, nodes = rest("GET", f"{API}/nodes")
    assert {n["name"] for n in nodes["nodes"]} == {"node1", "node2"}


def _comparable(view: dict) -> dict:
    drop = {"id", "display_id", "submit_time", "eligible_time", "start_time", "end_time", "accrue_time",
            "last_sched_eval", "priority", "alloc_sid", "run_time_s", "start_estimate", "state", "reason",
            "node_list", "batch_host", "gres", "gpus_str", "cpu_ids", "tres_alloc", "preempt_time", "alloc_node",
            "command", "stdout", "stderr"}
    return {k: v for k, v in view.items() if k not in drop}


def test_a_rest_submission_is_the_job_sbatch_makes(cluster, rest, tmp_path):
    script = "#!/bin/bash\nsleep 300\n"
    opts = ["--hold", "-J", "same", "-t", "45", "--gres=gpu:h200:2", "--mem=2G", "-c", "3", "-n", "2",
            "--nice=10", "-D", str(tmp_path), "-o", str(tmp_path / "out-%j.txt"), "--export=NONE,FOO=bar"]
    via_sbatch = cluster.submit(*opts, input=script, cwd=tmp_path)
    body = {"script": script, "job": {
        "name": "same", "time_limit": 45, "gres": "gpu:h200:2", "memory_per_node": 2048, "cpus_per_task": 3,
        "tasks": 2, "nice": 10, "hold": True, "current_working_directory": str(tmp_path),
        "standard_output": str(tmp_path / "out-%j.txt"), "environment": {"FOO": "bar"}}}
    assert oc.errors(body, oc.request_schema(f"{API}/job/submit", "post")) == []
    status, reply = rest("POST", f"{API}/job/submit", body)
    assert status == 200, reply
    _valid(f"{API}/job/submit", "post", status, reply)
    assert reply["step_id"] == "BATCH" and reply["errors"] == []
    via_rest = reply["job_id"]
    a, b = cluster.job(via_sbatch), cluster.job(via_rest)
    assert _comparable(a) == _comparable(b)
    assert b["state"] == "PENDING"
    assert (a["stdout"], b["stdout"]) == (str(tmp_path / f"out-{via_sbatch}.txt"), str(tmp_path / f"out-{via_rest}.txt"))


def test_update_and_cancel_over_rest(cluster, rest):
    jid = cluster.submit("--hold", "-t", "5", "--wrap", "true")
    status, reply = rest("POST", f"{API}/job/{jid}", {"time_limit": 20, "name": "renamed", "environment": {}})
    assert status == 200 and reply["errors"] == [], reply
    j = cluster.job(jid)
    assert (j["time_limit_s"], j["name"]) == (1200, "renamed")
    status, reply = rest("DELETE", f"{API}/job/{jid}")
    assert status == 200 and reply["errors"] == [], reply
    cluster.wait(jid, ("CANCELLED",))
    status, reply = rest("DELETE", f"{API}/job/999999")
    assert status == 500 and reply["errors"][0]["error_number"] == 2017, reply
    # the document's `default` reply (v0.0.38_errors) is a bare array, which slurmrestd never
    # sends: it sends the operation's reply with `errors` filled (tests/fixtures/slurmrestd/
    # real-job_999.json), and so does batchd
    assert oc.errors(reply, oc.schema("v0.0.38_jobs_response")) == []


def test_bad_submissions_are_refused_in_slurms_words(cluster, rest):
    cases = [({"job": {"environment": {}}}, "Job script not specified"),
             ({"script": "#!/bin/sh\ntrue\n", "job": {"environment": {}, "partition": "nope"}},
              "Invalid partition name specified"),
             ({"script": "#!/bin/sh\ntrue\n", "job": {"environment": {}, "gres": "gpu:h200:x:y"}},
              "Invalid generic resource (gres) specification"),
             ({"script": "#!/bin/sh\ntrue\n", "job": {"environment": {}, "bogus": 1}}, "unknown job property: bogus"),
             ({"script": "#!/bin/sh\ntrue\n", "job": {"environment": "PATH=/bin"}}, "environment")]
    before = len(cluster.run("squeue", "-h").stdout.splitlines())
    for body, words in cases:
        status, reply = rest("POST", f"{API}/job/submit", body)
        assert status == 500, (body, reply)
        assert words in reply["errors"][0]["error"], (body, reply)
    status, reply = rest("POST", f"{API}/job/submit", raw=b"{not json")
    assert status == 400
    assert len(cluster.run("squeue", "-h").stdout.splitlines()) == before  # nothing stored


def test_tokens_are_checked(cluster, rest, tmp_path):
    ping = f"{API}/ping"
    assert rest("GET", ping)[0] == 200
    assert rest("GET", ping, headers={"X-SLURM-USER-TOKEN": None})[0] == 401
    head, body, sig = rest.token.split(".")
    forged_sig = ("A" if sig[0] != "A" else "B") + sig[1:]
    assert rest("GET", ping, headers={"X-SLURM-USER-TOKEN": f"{head}.{body}.{forged_sig}"})[0] == 401
    assert rest("GET", ping, headers={"X-SLURM-USER-TOKEN": "garbage"})[0] == 401
    wrong_key = tokens.sign(b"k" * 32, rest.user, 600)
    assert rest("GET", ping, headers={"X-SLURM-USER-TOKEN": wrong_key})[0] == 401
    key_file = cluster.root / ".batchd" / tokens.KEY_NAME
    assert key_file.stat().st_mode & 0o777 == 0o600
    expired = tokens.sign(key_file.read_bytes(), rest.user, 10, now=time.time() - 60)
    status, reply = rest("GET", ping, headers={"X-SLURM-USER-TOKEN": expired})
    assert status == 401 and "expired" in reply["errors"][0]["error"], reply
    # the daemon's own user may act for another user (as Slurm's SlurmUser); scontrol
    # hands a plain user only their own token (tests/unit/test_tokens.py)
    status, _ = rest("GET", ping, headers={"X-SLURM-USER-NAME": "nobody"})
    assert status == 200
