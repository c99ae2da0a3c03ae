"""The OpenAPI checker the REST tests rely on (tests/openapi_check.py): it knows every
keyword Slurm's document uses, and it finds what is wrong."""

from __future__ import annotations

from tests import openapi_check as oc


def test_keywords():
    seen: set[str] = set()

    def walk(x, in_props=False):
        if isinstance(x, dict):
            for k, v in x.items():
                if not in_props:
                    seen.add(k)
                walk(v, k == "properties" and not in_props)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for s in oc.document()["components"]["schemas"].values():
        walk(s)
    assert seen <= oc.KNOWN | {"explode", "style", "in", "name", "required", "x-batchd-note"}, seen - oc.KNOWN


def test_it_finds_what_is_wrong():
    s = oc.schema("v0.0.38_job_submission")
    assert oc.errors({"script": "x", "job": {"environment": {}}}, s) == []
    assert oc.errors({"job": {"environment": {}}}, s) == ["$: required property 'script' missing"]
    assert oc.errors({"script": "x", "job": {"environment": {}, "time_limit": "10"}}, s) == [
        "$.job.time_limit: str where the schema says integer"]
    assert oc.errors({"script": "x", "job": {"environment": {}, "hold": 1}}, s) == [
        "$.job.hold: int where the schema says boolean"]
    assert oc.errors({"script": "x", "job": {"environment": {}, "nodes": [1, "2"]}}, s) == [
        "$.job.nodes[1]: str where the schema says integer"]
    assert oc.errors({"script": None}, s) == ["$.script: null where the schema says string"]
    ping = oc.response_schema("/slurm/v0.0.38/ping", "get")
    assert oc.errors({"pings": [{"status": True}]}, ping) == ["$.pings[0].status: bool where the schema says integer"]
    assert oc.errors({"pings": {}}, ping) == ["$.pings: dict where the schema says array"]
