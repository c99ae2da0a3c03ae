"""The wire contract at the door: every route has a request and a reply schema, and
every malformed request is a 400 naming the field and the rule before the service sees
it (`api.handle` on a real Service over SQLite, no socket)."""

from __future__ import annotations

import pytest
from wire_helpers import call, spec

from batchd.server import api, wire_replies, wire_requests
from batchd.server.wire import SIGRTMAX, TOO_LONG, WireError, check
from batchd.slurm import hostlist
from batchd.slurm.filepattern import expand_pattern


def test_every_route_has_a_request_and_a_reply_schema():
    routes = set(api.ROUTES)
    assert routes - set(wire_requests.REQUESTS) == set(), "routes without a request schema"
    assert routes - set(wire_replies.REPLIES) == set(), "routes without a reply schema"
    assert set(wire_requests.REQUESTS) - routes == set(), "request schemas of no route"
    assert set(wire_replies.REPLIES) - routes == set(), "reply schemas of no route"


def test_a_route_without_a_schema_is_caught(monkeypatch):
    """The check above is real: a route added without its schema makes it fail."""
    monkeypatch.setitem(api.ROUTES, ("GET", "/v1/new"), lambda s, c, q, b: {})
    with pytest.raises(AssertionError):
        test_every_route_has_a_request_and_a_reply_schema()


BIG = 10 ** 30

# (name, spec changes, the field path the message must name, a word of the rule)
BAD_SPECS = [
    ("cpus_negative", {"cpus_per_task": -8}, "spec.cpus_per_task", "must be an integer >= 1 (got -8)"),
    ("mem_negative", {"mem_mb": -1}, "spec.mem_mb", ">= 0"),
    ("mem_per_cpu_negative", {"mem_per_cpu_mb": -5}, "spec.mem_per_cpu_mb", ">= 0"),
    ("gpu_count_negative", {"gpus": {"type": "h200", "count": -2}}, "spec.gpus.count", ">= 0"),
    ("gres_count_negative", {"gres": [{"name": "gpu", "type": None, "count": -1}]}, "spec.gres[0].count", ">= 0"),
    ("gres_type_number", {"gres": [{"name": "gpu", "type": 5, "count": 1}]}, "spec.gres[0].type", "string"),
    ("nodes_zero", {"nodes_min": 0}, "spec.nodes_min", ">= 1"),
    ("nodes_max_below_min", {"nodes_min": 2, "nodes_max": 1}, "spec.nodes_max", ">= nodes_min"),
    ("ntasks_zero", {"ntasks": 0}, "spec.ntasks", ">= 1"),
    ("output_number", {"output": 123}, "spec.output", "string"),
    ("error_list", {"error": ["a"]}, "spec.error", "string"),
    ("environment_string", {"environment": "A=1"}, "spec.environment", "object"),
    ("environment_value_number", {"environment": {"A": 1}}, "spec.environment.A", "string"),
    ("environment_name_equals", {"environment": {"A=B": "1"}}, "spec.environment", "'='"),
    ("environment_nul", {"environment": {"A": "x\x00y"}}, "spec.environment.A", "NUL"),
    ("argv_number", {"argv": 5}, "spec.argv", "list"),
    ("argv_item_number", {"argv": ["a", 5]}, "spec.argv[1]", "string"),
    ("signal_list", {"signal": [1, 2]}, "spec.signal", "object"),
    ("signal_999", {"signal": {"signal": 999, "time_s": 60, "batch_only": False}}, "spec.signal.signal",
     f"between 1 and {SIGRTMAX}"),
    ("signal_zero", {"signal": {"signal": 0, "time_s": 60}}, "spec.signal.signal", "between 1"),
    ("signal_time_negative", {"signal": {"signal": 10, "time_s": -1}}, "spec.signal.time_s", "between 0"),
    ("time_zero", {"time_limit_s": 0}, "spec.time_limit_s", "-1 (UNLIMITED)"),
    ("time_negative", {"time_limit_s": -5}, "spec.time_limit_s", ">= 1"),
    ("time_text", {"time_limit_s": "abc"}, "spec.time_limit_s", "integer"),
    ("huge_int", {"ntasks": BIG}, "spec.ntasks", "<= 1000000"),
    ("huge_mem", {"mem_mb": BIG}, "spec.mem_mb", f"<= {1 << 40}"),
    ("float_for_int", {"cpus_per_task": 2.5}, "spec.cpus_per_task", "integer"),
    ("whole_float_for_int", {"ntasks": 3.0}, "spec.ntasks", "integer"),
    ("bool_for_int", {"cpus_per_task": True}, "spec.cpus_per_task", "integer"),
    ("bool_for_nice", {"nice": False}, "spec.nice", "integer"),
    ("nice_out_of_range", {"nice": 2147483646}, "spec.nice", "between -2147483645 and 2147483645"),
    ("name_number", {"name": 7}, "spec.name", "string"),
    ("name_too_long", {"name": "x" * 1025}, "spec.name", TOO_LONG),
    ("workdir_too_long", {"workdir": "/" + "x" * 4096}, "spec.workdir", TOO_LONG),
    ("account_dict", {"account": {"a": 1}}, "spec.account", "string"),
    ("hold_text", {"hold": "yes"}, "spec.hold", "true or false"),
    ("open_mode_bad", {"open_mode": "rw"}, "spec.open_mode", "truncate, append"),
    ("begin_nan_like", {"begin_time": "tomorrow"}, "spec.begin_time", "number"),
    ("script_number", {"script": 42}, "spec.script", "string"),
    ("script_too_big", {"script": "#!/bin/sh\n" + "#" * (5 << 20)}, "spec.script", TOO_LONG),
    ("environment_too_big", {"environment": {"BIG": "x" * (2 << 20)}}, "spec.environment", TOO_LONG),
    ("exclude_two_million", {"exclude": "node[1-2000000]"}, "spec.exclude", "at most 10000 hosts"),
    ("nodelist_unbalanced", {"nodelist": "node[1-"}, "spec.nodelist", "host list"),
    ("nodelist_unicode_digit", {"nodelist": "node[1-²]"}, "spec.nodelist", "host list"),
    ("lone_surrogate", {"comment": "\ud800"}, "spec.comment", "Unicode"),
    ("unknown_key_object", {"frobnicate": {"deep": [1]}}, "spec.frobnicate", "null, true, false"),
]


@pytest.mark.parametrize("changes, field, rule", [c[1:] for c in BAD_SPECS], ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_is_a_400_naming_the_field(svc, tmp_path, changes, field, rule):
    status, reply = call(svc, "POST", "/v1/jobs", {"spec": spec(tmp_path, **changes)})
    assert status == 400, reply
    msg = reply["error"]["message"]
    assert msg.startswith(field) or msg.startswith(f"{TOO_LONG} ({field}"), msg
    assert rule in msg, msg
    assert svc.store.list_jobs() == []  # nothing stored


def test_good_spec_and_unicode_digit_pattern_are_accepted(svc, tmp_path):
    ok = spec(tmp_path, output="x-%²j.out", error="e-%3j-%٣j", cpus_per_task=2, mem_mb=2048, nodes_min=1,
              nodes_max=1, gres=[{"name": "gpu", "type": "h200", "count": 1}], time_limit_s=-1,
              signal={"signal": 10, "time_s": 30, "batch_only": True}, newer_client_flag=True,
              exclude="vm")
    # 10,000 names pass the door; that they name no node is the service's refusal (Slurm's words)
    status, reply = call(svc, "POST", "/v1/jobs", {"spec": dict(ok, exclude="node[1-10000]")})
    assert status == 400 and reply["error"]["code"] == "InvalidNodeName", reply
    status, reply = call(svc, "POST", "/v1/jobs", {"spec": ok})
    assert status == 200, reply
    (job,) = svc.list_jobs({})["jobs"]
    assert job["stdout"].endswith("/x-%²j.out")  # literal text, as Slurm reads it
    # the agent's expansion reads ASCII digits only: `%٣j` and `%²j` are literal, `%3j` is padded
    assert expand_pattern("e-%3j-%٣j-%²j", {"id": 7}, "node1") == "e-007-%٣j-%²j"


@pytest.mark.parametrize("raw, rule", [
    (b"{not json", "not JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'"spec"', "must be a JSON object"),
    (b'{"spec": [1]}', "spec: must be a job specification"),
    (b'{"spec": {"ntasks": NaN}}', "not JSON"),
    (b'{"spec": {"ntasks": 1e400}}', "spec.ntasks"),
    (b"\xff\xfe", "not JSON"),
    (b"{}", "spec: is required"),
    (b"[" * 100000 + b"]" * 100000, "not JSON"),
])
def test_malformed_submit_bodies(svc, raw, rule):
    status, reply = call(svc, "POST", "/v1/jobs", raw=raw)
    assert status == 400 and rule in reply["error"]["message"], reply


@pytest.mark.parametrize("method, target, body, rule", [
    ("POST", "/v1/jobs/signal", {"ids": ["1"], "signal": 999}, f"signal: must be an integer between 0 and {SIGRTMAX}"),
    ("POST", "/v1/jobs/signal", {"ids": ["1"], "signal": "KILL"}, "signal: must be an integer"),
    ("POST", "/v1/jobs/signal", {"ids": "1"}, "ids: must be null or a list"),
    ("POST", "/v1/jobs/signal", {"ids": ["abc"]}, "ids[0]: must be"),
    ("POST", "/v1/jobs/signal", {"filters": {"users": 5}}, "filters.users"),
    ("POST", "/v1/jobs/hold", {"ids": [{"a": 1}]}, "ids[0]"),
    ("POST", "/v1/jobs/hold", {}, "ids: is required"),
    ("POST", "/v1/jobs/update", {"ids": ["1"], "changes": {"time_limit_s": "abc"}}, "changes.time_limit_s"),
    ("POST", "/v1/jobs/update", {"ids": ["1"], "changes": {"time_limit_s": 0}}, "-1 (UNLIMITED)"),
    ("POST", "/v1/jobs/update", {"ids": ["1"], "changes": {"nice": 2147483646}}, "changes.nice"),
    ("POST", "/v1/jobs/update", {"ids": ["1"], "changes": {"partition": 5}}, "changes.partition"),
    ("POST", "/v1/jobs/update", {"ids": ["1"], "changes": {"frob": 1}}, "changes.frob: unknown field"),
    ("POST", "/v1/jobs/update", {"ids": ["1"], "changes": [1]}, "changes: must be"),
    ("POST", "/v1/steps", {"job_id": 1, "argv": 5}, "argv: must be a list"),
    ("POST", "/v1/steps", {"job_id": 1, "argv": []}, "argv: must have at least 1 item"),
    ("POST", "/v1/steps", {"job_id": 1, "argv": ["x"], "ntasks": 0}, "ntasks"),
    ("POST", "/v1/steps", {"job_id": 1, "argv": ["x"], "env": {"A": 1}}, "env.A"),
    ("POST", "/v1/steps", {"job_id": 1, "argv": ["x"], "cwd": 3}, "cwd"),
    ("POST", "/v1/steps", {"job_id": "1", "argv": ["x"]}, "job_id"),
    ("POST", "/v1/steps/cancel", {"job_id": 1}, "step_id: is required"),
    ("GET", "/v1/steps?job_id=1", None, "step_id: is required"),
    ("GET", "/v1/steps?job_id=x&step_id=1", None, "job_id"),
    ("GET", "/v1/jobs?ids=1_[1-99999999999]", None, "ids"),
    ("GET", "/v1/jobs?ids=%C2%B2", None, "ids"),
    ("GET", "/v1/accounting?start=abc", None, "start: must be a number"),
    ("GET", "/v1/why", None, "job: is required"),
    ("GET", "/v1/report?zero_gpu_s=x", None, "zero_gpu_s"),
    ("GET", "/v1/report?end=later", None, "end: must be a number"),
    ("GET", "/v1/report?month=october", None, "month: must be a month YYYY-MM"),
    ("GET", "/v1/report?start=2026-10-01Tnoon", None, "start: must be a number"),
    ("GET", "/v1/jobs", [1], "takes no request body"),
    ("POST", "/v1/nodes/state", {"node": "vm", "action": "explode"}, "action: must be one of"),
    ("POST", "/v1/accounts/modify", {"op": "account.add", "name": "x", "priority": "high"}, "priority"),
    ("POST", "/v1/accounts/apply", {"doc": {"account": [{"name": "a", "resources": {"cpu": {"quota": "x"}}}]}},
     "doc.account[0].resources.cpu.quota"),
    ("POST", "/v1/prices", {"prices": [{"tres": "cpu", "per_hour": True}]}, "prices[0].per_hour"),
])
def test_other_routes_check_their_bodies(svc, method, target, body, rule):
    status, reply = call(svc, method, target, body)
    assert status == 400 and rule in reply["error"]["message"], reply


def test_report_end_now_passes_the_door(svc):
    # `batchd report --end now` sends the word; the daemon's clock decides (the door refused it)
    status, reply = call(svc, "GET", "/v1/report?start=0&end=now", None)
    assert status == 200 and reply["period"]["start"] == 0, reply


def test_report_month_tz_and_dates_pass_the_door(svc):
    # --month and --tz go as they are, dates as text: the daemon cuts them in the zone
    status, reply = call(svc, "GET", "/v1/report?month=2026-10&tz=Europe/Berlin", None)
    assert status == 200 and reply["period"]["tz"] == "Europe/Berlin", reply
    status, reply = call(svc, "GET", "/v1/report?start=2026-10-01&end=2026-10-02T06:00&tz=UTC", None)
    assert status == 200 and reply["period"]["end"] - reply["period"]["start"] == 30 * 3600, reply
    status, reply = call(svc, "GET", "/v1/report?month=2026-10&tz=Mars/Olympus", None)
    assert status == 400 and "unknown time zone" in reply["error"]["message"], reply


def test_update_to_unknown_partition_or_qos_is_refused_as_slurm(svc, tmp_path):
    status, reply = call(svc, "POST", "/v1/jobs", {"spec": spec(tmp_path, hold=True)})
    jid = str(reply["job_id"])
    for changes, message in (({"partition": "nope"}, "Invalid partition name specified"),
                             ({"qos": "nope"}, "Invalid qos specification"),
                             ({"account": "nope"}, "Invalid account or account/partition combination specified")):
        status, reply = call(svc, "POST", "/v1/jobs/update", {"ids": [jid], "changes": changes})
        assert status == 200 and reply == {"done": [], "errors": [{"id": jid, "message": message}]}, reply
    job = svc.list_jobs({"ids": jid})["jobs"][0]
    assert (job["partition"], job["qos"], job["account"]) == ("gpu", "normal", "default")
    status, reply = call(svc, "POST", "/v1/jobs/update", {"ids": [jid], "changes": {"partition": "debug"}})
    assert reply == {"done": [jid], "errors": []}


def test_limits_come_from_the_config(svc, tmp_path):
    svc.cfg.limits.update(max_script_bytes=100, max_hostlist_names=3, max_env_bytes=64)
    assert call(svc, "POST", "/v1/jobs", {"spec": spec(tmp_path, script="#!/bin/sh\n" + "#" * 100)})[0] == 400
    status, reply = call(svc, "POST", "/v1/jobs", {"spec": spec(tmp_path, exclude="n[1-4]")})
    assert status == 400 and "at most 3 hosts (it names 4)" in reply["error"]["message"]
    status, reply = call(svc, "POST", "/v1/jobs", {"spec": spec(tmp_path, environment={"A": "x" * 70})})
    assert status == 400 and "spec.environment.A: must be at most 64 bytes (it has 70)" in reply["error"]["message"]
    status, reply = call(svc, "POST", "/v1/jobs", {"spec": spec(tmp_path, exclude="n[1-3]")})
    assert status == 400 and reply["error"]["code"] == "InvalidNodeName"  # past the door: no such nodes


def test_hostlist_expand_is_bounded():
    assert hostlist.count("node[1-2000000],x") == 2_000_001
    with pytest.raises(ValueError, match="2000000 names, more than the limit of 10000"):
        hostlist.expand("node[1-2000000]")
    with pytest.raises(ValueError):
        hostlist.expand("node[1-²]")
    assert hostlist.expand("n[1-3]", limit=3) == ["n1", "n2", "n3"]
    assert hostlist.compress(["node²", "n1"]) == "node²,n1"  # no number: a plain name


def test_rule_messages():
    from batchd.server.wire_requests import JOB_SPEC

    with pytest.raises(WireError, match=r"^spec.cpus_per_task: must be an integer >= 1 \(got -8\)$"):
        check(JOB_SPEC, {"cpus_per_task": -8}, "spec")
    with pytest.raises(WireError, match=r"an integer of 61 digits"):
        check(JOB_SPEC, {"ntasks": 10 ** 60}, "spec")
    with pytest.raises(WireError, match=r"too long \(spec.environment: must be at most 10 bytes in all \(it has 12\)\)$"):
        check(JOB_SPEC, {"environment": {"A": "1234", "B": "12"}}, "spec", {"max_env_bytes": 10})


def test_service_refuses_a_signal_the_kernel_would_refuse(svc, tmp_path):
    """Direct callers of the service (not through api.handle) cannot store signal 999 either."""
    from wire_helpers import ME

    from batchd.errors import InvalidRequest

    jid = svc.submit(ME, spec(tmp_path))["job_id"]
    for bad in (999, -1, "9", 1.0):
        with pytest.raises(InvalidRequest, match="signal: must be an integer between 0 and"):
            svc.signal_jobs(ME, {"ids": [str(jid)], "signal": bad})
    assert svc.signal_jobs(ME, {"ids": [str(jid)], "signal": None})["done"] == [str(jid)]
