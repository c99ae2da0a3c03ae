"""A hostile user on the raw socket cannot stall the cluster: every malformed class of
request (issue 12, found items 1, 2 and 5) is answered with a 4xx whose message names the
field, never a 500, and afterwards a canary job of another user, submitted with the normal
`sbatch`, starts within 2 seconds and completes. The real replies of the running daemon
(jobs, accounting, nodes and the other GET routes) validate against the reply schemas of
`batchd/server/wire_replies.py`.

As root the hostile requests come from one throwaway user and the canary from another
(both removed at the end); otherwise both are the test's own uid."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
import uuid

import pytest

from batchd.server.wire import TOO_LONG, check
from batchd.server.wire_replies import ERROR, REPLIES
from tests.hostlock import account_tool

# sends (method, path, body as latin-1 text) requests on the socket, prints [[status, reply]]
PROBE = r"""
import json, socket, sys
sock, cases = sys.argv[1], json.load(sys.stdin)
out = []
for method, path, body in cases:
    data = body.encode("latin-1")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(sock)
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: batchd\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
    raw = b""
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        raw += b
    s.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    out.append([int(head.split()[1]), json.loads(payload)])
json.dump(out, sys.stdout)
"""


@pytest.fixture
def users():
    """(hostile, canary): (uid, gid) pairs: two throwaway users as root, else the test's uid twice."""
    if os.geteuid() != 0 or not os.path.exists("/usr/sbin/useradd"):
        me = (os.getuid(), os.getgid())
        yield me, me
        return
    names = [f"bdh{uuid.uuid4().hex[:6]}" for _ in range(2)]
    for n in names:
        account_tool("useradd", "-M", "-N", "-s", "/bin/sh", n)
    try:
        yield tuple((pwd.getpwnam(n).pw_uid, pwd.getpwnam(n).pw_gid) for n in names)
    finally:
        for n in names:
            subprocess.run(["pkill", "-9", "-u", n], check=False)
            account_tool("userdel", n, check=False)


def send(cluster, cases: list[tuple[str, str, bytes]], user: tuple[int, int]) -> list[tuple[int, dict]]:
    cmd = [sys.executable, "-c", PROBE, cluster.sock]
    if user != (os.getuid(), os.getgid()):
        cmd = ["setpriv", f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", *cmd]
    data = json.dumps([[m, p, b.decode("latin-1")] for m, p, b in cases])
    r = subprocess.run(cmd, input=data, capture_output=True, text=True, timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr
    return [(s, reply) for s, reply in json.loads(r.stdout)]


def base_spec(cluster, **kw) -> dict:
    spec = {"name": "hostile", "script": "#!/bin/sh\ntrue\n", "workdir": str(cluster.root),
            "submit_dir": str(cluster.root), "environment": {"PATH": "/usr/bin:/bin"}, "export": "ALL",
            "argv": [], "nodes_min": None, "ntasks": None}
    spec.update(kw)
    return spec


def submit_body(cluster, **kw) -> bytes:
    return json.dumps({"spec": base_spec(cluster, **kw)}).encode()


def test_hostile_requests_get_4xx_and_a_canary_still_runs(cluster, users):
    hostile, canary = users
    root = cluster.root
    # the hostile user's own jobs, to aim signals and updates at: one running, one held
    running = cluster.submit("--wrap", "sleep 60", user=hostile)
    held = cluster.submit("--hold", "--wrap", "true", user=hostile)
    cluster.wait(running, ("RUNNING",))

    huge = 10 ** 30
    names = ",".join(f"n{i}" for i in range(20_001))
    cases = [  # (name, method, path, body, field the message names (and a rule word))
        ("cpus_negative", "POST", "/v1/jobs", submit_body(cluster, cpus_per_task=-8), "spec.cpus_per_task", ">= 1"),
        ("mem_negative", "POST", "/v1/jobs", submit_body(cluster, mem_mb=-4096), "spec.mem_mb", ">= 0"),
        ("gpus_negative", "POST", "/v1/jobs", submit_body(cluster, gpus={"type": "h200", "count": -2}),
         "spec.gpus.count", ">= 0"),
        ("gres_negative", "POST", "/v1/jobs", submit_body(cluster, gres=[{"name": "gpu", "type": None, "count": -1}]),
         "spec.gres[0].count", ">= 0"),
        ("nodes_zero", "POST", "/v1/jobs", submit_body(cluster, nodes_min=0), "spec.nodes_min", ">= 1"),
        ("output_number", "POST", "/v1/jobs", submit_body(cluster, output=123), "spec.output", "string"),
        ("environment_text", "POST", "/v1/jobs", submit_body(cluster, environment="A=1"), "spec.environment",
         "object"),
        ("argv_number", "POST", "/v1/jobs", submit_body(cluster, argv=5), "spec.argv", "list"),
        ("signal_list", "POST", "/v1/jobs", submit_body(cluster, signal=[1, 2]), "spec.signal", "object"),
        ("spec_signal_999", "POST", "/v1/jobs", submit_body(cluster, signal={"signal": 999, "time_s": 60}),
         "spec.signal.signal", "between 1 and"),
        ("huge_int", "POST", "/v1/jobs", submit_body(cluster, ntasks=huge), "spec.ntasks", "<="),
        ("float_for_int", "POST", "/v1/jobs", submit_body(cluster, cpus_per_task=2.5), "spec.cpus_per_task",
         "integer"),
        ("whole_float_for_int", "POST", "/v1/jobs", submit_body(cluster, ntasks=2.0), "spec.ntasks", "integer"),
        ("bool_for_int", "POST", "/v1/jobs", submit_body(cluster, cpus_per_task=True), "spec.cpus_per_task",
         "integer"),
        ("time_zero", "POST", "/v1/jobs", submit_body(cluster, time_limit_s=0), "spec.time_limit_s", "UNLIMITED"),
        ("script_5mb", "POST", "/v1/jobs", submit_body(cluster, script="#!/bin/sh\n" + "#" * (5 << 20)),
         "spec.script", TOO_LONG),
        ("exclude_2m_names", "POST", "/v1/jobs", submit_body(cluster, exclude="node[1-2000000]"), "spec.exclude",
         "at most 10000 hosts"),
        ("exclude_20k_literal", "POST", "/v1/jobs", submit_body(cluster, exclude=names), "spec.exclude",
         "at most 10000 hosts"),
        ("nodelist_unbalanced", "POST", "/v1/jobs", submit_body(cluster, nodelist="node[1-"), "spec.nodelist",
         "host list"),
        ("nul_in_env", "POST", "/v1/jobs", submit_body(cluster, environment={"A": "a\x00b"}),
         "spec.environment.A", "NUL"),
        ("not_json", "POST", "/v1/jobs", b"{spec: nope", "", "not JSON"),
        ("json_list", "POST", "/v1/jobs", b"[1, 2, 3]", "", "must be a JSON object"),
        ("nan", "POST", "/v1/jobs", b'{"spec": {"ntasks": NaN}}', "", "not JSON"),
        ("deep_nesting", "POST", "/v1/jobs", b"[" * 50_000 + b"]" * 50_000, "", "not JSON"),
        ("lone_surrogate", "POST", "/v1/jobs", b'{"spec": {"name": "\\ud800"}}', "spec.name", "Unicode"),
        ("signal_999", "POST", "/v1/jobs/signal", json.dumps({"ids": [str(running)], "signal": 999}).encode(),
         "signal", "between 0 and"),
        ("update_time_text", "POST", "/v1/jobs/update",
         json.dumps({"ids": [str(running)], "changes": {"time_limit_s": "abc"}}).encode(),
         "changes.time_limit_s", "integer"),
        ("update_nice_bool", "POST", "/v1/jobs/update",
         json.dumps({"ids": [str(held)], "changes": {"nice": True}}).encode(), "changes.nice", "integer"),
        ("ids_not_list", "POST", "/v1/jobs/hold", b'{"ids": "1"}', "ids", "list"),
        ("step_argv_number", "POST", "/v1/steps", json.dumps({"job_id": running, "argv": 5}).encode(), "argv",
         "list"),
        ("step_env_text", "POST", "/v1/steps",
         json.dumps({"job_id": running, "argv": ["true"], "env": "A=1"}).encode(), "env", "object"),
        ("step_ntasks_zero", "POST", "/v1/steps",
         json.dumps({"job_id": running, "argv": ["true"], "ntasks": 0}).encode(), "ntasks", ">= 1"),
        ("bad_job_ids_query", "GET", "/v1/jobs?ids=1_[0-99999999999]", b"", "ids", "job ids"),
        ("bad_accounting_start", "GET", "/v1/accounting?start=yesterday", b"", "start", "number"),
        ("steps_query", "GET", "/v1/steps?job_id=1", b"", "step_id", "required"),
    ]
    replies = send(cluster, [(m, p, b) for _n, m, p, b, _f, _r in cases], hostile)
    for (name, _m, _p, _b, field, rule), (status, reply) in zip(cases, replies, strict=True):
        assert 400 <= status < 500, (name, status, reply)
        check(ERROR, reply, "reply")
        msg = reply["error"]["message"]
        named = not field or msg.startswith(f"{field}:") or msg.startswith(f"{TOO_LONG} ({field}:")
        assert named and rule in msg, (name, msg)

    # an unknown partition or QOS: refused per job with Slurm's words (scontrol prints
    # "Invalid partition name specified for job N" and exits 1); the job keeps its own
    (s1, r1), (s2, r2) = send(cluster, [
        ("POST", "/v1/jobs/update", json.dumps({"ids": [str(held)], "changes": {"partition": "nope"}}).encode()),
        ("POST", "/v1/jobs/update", json.dumps({"ids": [str(held)], "changes": {"qos": "nope"}}).encode())], hostile)
    assert (s1, r1) == (200, {"done": [], "errors": [{"id": str(held), "message": "Invalid partition name specified"}]})
    assert (s2, r2) == (200, {"done": [], "errors": [{"id": str(held), "message": "Invalid qos specification"}]})
    assert (cluster.job(held)["partition"], cluster.job(held)["qos"]) == ("gpu", "normal")
    r = cluster.run("scontrol", "update", f"JobId={held}", "Partition=nope", user=hostile, check=False)
    assert r.returncode == 1 and f"Invalid partition name specified for job {held}" in r.stderr, r.stderr

    # `%²j` is literal text, as in Slurm: accepted, and the job runs and writes that file
    (status, reply), = send(cluster, [("POST", "/v1/jobs", submit_body(cluster, output=str(root / "x-%²j.out"),
                                                                        script="#!/bin/sh\necho sup\n"))], hostile)
    assert status == 200, reply
    cluster.wait(reply["job_id"], ("COMPLETED",))
    assert (root / "x-%²j.out").read_text() == "sup\n"

    # nothing of the above stalled the cluster: squeue answers, and a canary of another user starts at once
    assert cluster.run("squeue", user=canary).returncode == 0
    t0 = time.time()
    job = cluster.submit("-o", str(root / "canary-%j.out"), "--wrap", "echo canary", user=canary)
    deadline = t0 + 2.0
    while cluster.job(job)["state"] == "PENDING":
        assert time.time() < deadline, f"the canary still pends after 2 s: {cluster.job(job)}"
        time.sleep(0.05)
    cluster.wait(job, ("COMPLETED",))
    assert (root / f"canary-{job}.out").read_text() == "canary\n"
    cluster.run("scancel", str(running), user=hostile)


def test_real_replies_validate_against_the_reply_schemas(cluster):
    """jobs (pending, running, finished, array, GPU), accounting, nodes and every other GET
    route of a running daemon, and the replies of the changing routes."""
    done = cluster.submit("--gres=gpu:h200:1", "-c", "2", "--mem=1G", "--wrap", "true")
    run = cluster.submit("-N", "2", "--gpus=2", "-t", "5", "--signal=B:USR1@30", "--wrap", "sleep 60")
    held = cluster.submit("--hold", "-a", "0-3%2", "-d", f"afterany:{done}", "--wrap", "true")
    cluster.wait(done, ("COMPLETED",))
    cluster.wait(run, ("RUNNING",))
    from batchd.cli.client import request

    os.environ["BATCHD_SOCKET"] = cluster.sock
    gets = {"/v1/ping": {}, "/v1/jobs": {"all": "1"}, "/v1/accounting": {"all_users": "1"}, "/v1/nodes": {},
            "/v1/snapshot": {}, "/v1/steps": {}, "/v1/why": {"job": str(held)}, "/v1/controller": {},
            "/v1/accounts": {}, "/v1/report": {}, "/v1/prices": {}, "/v1/eff": {"job": str(done)}}
    for path, query in gets.items():
        reply = request("GET", path, query=query)
        check(REPLIES[("GET", path)], reply, path)
    jobs = request("GET", "/v1/jobs", query={"all": "1"})["jobs"]
    assert {j["state"] for j in jobs} >= {"COMPLETED", "RUNNING", "PENDING"}
    assert any(j["array_job_id"] for j in jobs) and any(j["gres"] for j in jobs)
    rows = request("GET", "/v1/accounting", query={"all_users": "1"})["records"]
    assert any(r["job_id"].endswith(".batch") for r in rows)
    posts = [("/v1/jobs/update", {"ids": [str(held)], "changes": {"comment": "c", "nice": 5}}),
             ("/v1/jobs/release", {"ids": [str(held)]}), ("/v1/jobs/hold", {"ids": [str(held)]}),
             ("/v1/jobs/signal", {"ids": [str(run)], "signal": 10}),
             ("/v1/jobs", {"spec": base_spec(cluster, test_only=True)}),
             ("/v1/jobs/signal", {"ids": [str(run), str(held)], "signal": None})]
    for path, body in posts:
        check(REPLIES[("POST", path)], request("POST", path, body), path)
