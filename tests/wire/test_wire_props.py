"""Random JSON thrown at every route of `api.handle` (a real Service on SQLite): a
malformed request is always a 4xx, never batchd's 500. Two kinds of input: any JSON value
as the body or a query, and a valid body of the route with one field (or one field of a
job specification) replaced by a random value, which reaches deeper into the service."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_helpers import ME, call, spec

from batchd.server import api
from batchd.server.wire_requests import JOB_SPEC, REQUESTS

ROUTES = sorted(REQUESTS)

scalars = (st.none() | st.booleans() | st.integers() | st.integers(-10, 10) | st.sampled_from([10 ** 30, -1, 0])
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
           | st.sampled_from(["", "-1", "1", "node[1-3]", "%²j", "\x00", "1_[1-3]", "abc", "gpu", "ALL"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def base_body(route: tuple[str, str], tmp_path) -> dict:
    return {
        ("POST", "/v1/jobs"): {"spec": spec(tmp_path)},
        ("POST", "/v1/jobs/signal"): {"ids": ["1"], "signal": 10, "filters": {"users": "root"}},
        ("POST", "/v1/jobs/hold"): {"ids": ["1"], "user": True},
        ("POST", "/v1/jobs/release"): {"ids": ["1"]},
        ("POST", "/v1/jobs/requeue"): {"ids": ["1"], "hold": False},
        ("POST", "/v1/jobs/update"): {"ids": ["1"], "changes": {"time_limit_s": 60, "partition": "debug"}},
        ("POST", "/v1/steps"): {"job_id": 1, "argv": ["true"], "ntasks": 1, "env": {}, "cwd": "/"},
        ("POST", "/v1/steps/cancel"): {"job_id": 1, "step_id": 0},
        ("POST", "/v1/nodes/state"): {"node": "vm", "action": "drain", "reason": "x"},
        ("POST", "/v1/accounts/apply"): {"doc": {"account": [{"name": "a", "resources": {"cpu": {"quota": 2}}}]},
                                         "dry_run": True},
        ("POST", "/v1/accounts/modify"): {"op": "account.add", "name": "a", "dry_run": True},
        ("POST", "/v1/prices"): {"prices": [{"tres": "cpu", "per_hour": "1.00", "currency": "EUR",
                                             "valid_from": "2026-01-01"}]},
    }.get(route, {})


def base_query(route: tuple[str, str]) -> dict[str, str]:
    return {k: "1" for k in REQUESTS[route].query.fields}


@st.composite
def requests(draw, tmp_path):
    route = draw(st.sampled_from(ROUTES))
    method, path = route
    kind = draw(st.sampled_from(["any", "field", "spec_field"] if route == ("POST", "/v1/jobs") else
                                ["any", "field"]))
    query = base_query(route)
    body = base_body(route, tmp_path) if method == "POST" else None
    if kind == "any":
        if method == "GET":
            query = draw(st.dictionaries(st.sampled_from(sorted(query) or ["x"]), st.text(max_size=30), max_size=4))
        else:
            body = draw(values)
    elif kind == "field" and method == "GET" and query:
        query[draw(st.sampled_from(sorted(query)))] = draw(st.text(max_size=30) | st.sampled_from(
            ["1e400", "nan", "-1", "1_[0-9999999]", "²", "9" * 30]))
    elif kind == "field" and method == "POST":
        key = draw(st.sampled_from(sorted(set(body) | {"extra"})))
        body[key] = draw(values)
    elif kind == "spec_field":
        key = draw(st.sampled_from(sorted(JOB_SPEC.fields)))
        body["spec"][key] = draw(values)
    target = path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")
    return method, target, body


def test_random_json_never_answers_500(svc, tmp_path):
    status, reply = call(svc, "POST", "/v1/jobs", {"spec": spec(tmp_path)})
    assert status == 200, reply

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(requests(tmp_path))
    def probe(req):
        method, target, body = req
        raw = json.dumps(body).encode() if body is not None else b""
        status, reply = api.handle(svc, ME, method, target, raw)
        assert status != 500, (method, target, body, reply)
        assert status == 200 or set(reply) == {"error"}, reply

    probe()


def test_a_user_number_beyond_any_uid_is_no_error(svc, tmp_path):
    """Found by the property above: users=2**63 overflowed the uid column (a 500)."""
    for users in ("9223372036854775808", "4294967296", "99999999999999999999999"):
        status, reply = api.handle(svc, ME, "GET", f"/v1/jobs?users={users}", b"")
        assert status == 200 and reply["jobs"] == [], reply
        status, reply = api.handle(svc, ME, "GET", f"/v1/accounting?users={users}", b"")
        assert status == 200 and reply["records"] == [], reply
