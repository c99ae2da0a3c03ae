"""batchd/protocol.py's ENDPOINTS is the protocol that runs: every route api.py registers
is in the table and every endpoint of the table is a route, with the handler it names;
the request and reply rules are built from the shapes it names (batchd/server/messages.py); its
prose names every endpoint; and real replies, from the service called in-process on a
small store, carry exactly the keys their shapes declare (no undeclared key, every
required key), views inside them included."""

from __future__ import annotations

import re
import types
import typing
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest
from endpoint_cases import ADMIN, CASES, make_world
from wire_helpers import call

from batchd import protocol
from batchd.server import api, messages, wire_replies, wire_requests
from batchd.server.wire import Either, Obj, check

ENDPOINTS = {(e[0], e[1]): e for e in protocol.ENDPOINTS}


def _shape(name: str | None) -> Any:
    return None if name is None else getattr(messages, name)


def test_the_table_is_the_routes_both_ways():
    assert len(ENDPOINTS) == len(protocol.ENDPOINTS), "an endpoint is in the table twice"
    routes = set(api.ROUTES)
    assert routes - set(ENDPOINTS) == set(), "routes the table does not document"
    assert set(ENDPOINTS) - routes == set(), "documented endpoints that are no route"


def test_a_route_outside_the_table_is_caught(monkeypatch):
    monkeypatch.setitem(api.ROUTES, ("GET", "/v1/new"), lambda s, c, q, b: {})
    with pytest.raises(AssertionError, match="routes the table does not document"):
        test_the_table_is_the_routes_both_ways()


@pytest.mark.parametrize("key", sorted(ENDPOINTS), ids=lambda k: f"{k[0]} {k[1]}")
def test_each_endpoint_has_the_handler_and_shapes_the_table_names(key):
    method, path, handler, query, body, reply, who = ENDPOINTS[key]
    fn = api.ROUTES[key]
    assert f"{fn.__module__}.{fn.__qualname__}" == handler
    assert who in (protocol.ANYONE, protocol.OWNER, protocol.ADMIN)
    route = wire_requests.REQUESTS[key]
    # the query rule is the query shape's (a route without one reads no query key)
    assert route.query.shape is _shape(query) and (query is not None or route.query.fields == {})
    if body is None:
        assert route.body is None, "a route the table says takes no body has a body rule"
    else:
        assert isinstance(route.body, Obj) and route.body.shape is _shape(body)
    rule = wire_replies.REPLIES[key]
    names = reply if isinstance(reply, tuple) else (reply,)
    rules = rule.rules if isinstance(rule, Either) else (rule,)
    assert [r.shape for r in rules] == [_shape(n) for n in names]  # type: ignore[attr-defined]
    for n in (query, body, *names):
        assert n is None or is_typeddict(_shape(n)), n


def test_the_prose_names_every_endpoint_and_no_other():
    doc = protocol.__doc__ or ""
    named = set(re.findall(r"^(GET|POST) +(/v1/[a-z/]+)", doc, re.M))
    assert named == set(ENDPOINTS)


# ---------------------------------------------------------------------------- replies
def problems(tp: Any, value: Any, path: str) -> list[str]:
    """What in `value` its declared type `tp` does not account for: keys a shape does not
    declare, required keys missing, in nested shapes too. (Scalar types are the reply
    rules' business.)"""
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        hints = get_type_hints(tp)
        out = [f"{path}.{k}: not declared in {tp.__name__}" for k in value if k not in hints]
        out += [f"{path}.{k}: required by {tp.__name__}, missing" for k in sorted(tp.__required_keys__)
                if k not in value]
        for k, v in value.items():
            if k in hints:
                out += problems(hints[k], v, f"{path}.{k}")
        return out
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return []
        found = [problems(a, value, path) for a in get_args(tp) if a is not type(None)]
        return [] if any(not p for p in found) else min(found, key=len)
    if origin is list and isinstance(value, list):
        return [p for i, x in enumerate(value) for p in problems(get_args(tp)[0], x, f"{path}[{i}]")]
    if origin is dict and isinstance(value, dict):
        return [p for k, x in value.items() for p in problems(get_args(tp)[1], x, f"{path}.{k}")]
    return []


def test_problems_sees_undeclared_and_missing_keys():
    view = {"id": 1, "display_id": "1", "surprise": 2}
    found = problems(messages.JobsReply, {"jobs": [view]}, "")
    assert ".jobs[0].surprise: not declared in JobView" in found
    assert ".jobs[0].name: required by JobView, missing" in found
    assert problems(messages.Ping, {"cluster": "c", "version": "1"}, "") == []


@pytest.fixture
def world(tmp_path):
    w = make_world(tmp_path)
    yield w
    w.close()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_replies_carry_exactly_their_declared_keys(world, case):
    _id, key, request, nonempty = case
    target, body = request(world)
    status, reply = call(world.svc, key[0], target, body, caller=ADMIN)
    assert status == 200, reply
    check(wire_replies.REPLIES[key], reply)  # the reply rule: types and bounds
    names = ENDPOINTS[key][5]
    shapes = [_shape(n) for n in (names if isinstance(names, tuple) else (names,))]
    found = [problems(s, reply, "reply") for s in shapes]
    assert any(not p for p in found), min(found, key=len)
    for k in nonempty:  # so that the views inside were looked at
        assert reply[k], f"{k} is empty: the case checks nothing inside it"


def test_every_endpoint_has_a_reply_case():
    assert {c[1] for c in CASES} == set(ENDPOINTS)
