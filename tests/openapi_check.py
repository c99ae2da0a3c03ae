"""Check JSON documents against Slurm's published OpenAPI 3.0 document for slurmrestd
v0.0.38 (`tests/fixtures/slurmrestd/openapi-v0.0.38.json`, from Slurm 22.05.8's
`GET /openapi/v3`, cut to that version's paths and the schemas they reach).

The document uses only `type`, `format`, `properties`, `items`, `required`, `enum`,
`$ref`, `minItems`, `maxItems`, `pattern` and `default` (checked by `test_keywords`), so
this checker implements those and nothing more; a keyword it does not know fails the
check rather than passing silently. As OpenAPI 3.0 says, `null` is valid only where a
schema says `nullable` (which none of Slurm's does), and properties a schema does not
name are allowed (no `additionalProperties: false` in the document).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

DOC_PATH = Path(__file__).parent / "fixtures" / "slurmrestd" / "openapi-v0.0.38.json"
KNOWN = {"type", "format", "properties", "items", "required", "enum", "$ref", "minItems", "maxItems",
         "pattern", "default", "description", "nullable"}


@cache
def document() -> dict[str, Any]:
    return json.loads(DOC_PATH.read_text())


def schema(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _resolve(s: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in s:
        ref = s["$ref"]
        assert ref.startswith("#/components/schemas/"), ref
        s = document()["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return s


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def errors(value: Any, s: dict[str, Any], where: str = "$") -> list[str]:
    """Every violation of `s` by `value`, as `path: what`; [] when valid."""
    s = _resolve(s)
    unknown = set(s) - KNOWN
    if unknown:
        return [f"{where}: schema keyword(s) this checker does not know: {sorted(unknown)}"]
    if value is None:
        return [] if s.get("nullable") else [f"{where}: null where the schema says {s.get('type', 'a value')}"]
    out: list[str] = []
    t = s.get("type")
    if t in _TYPES:
        if not isinstance(value, _TYPES[t]) or (t != "boolean" and isinstance(value, bool)):
            return [f"{where}: {type(value).__name__} where the schema says {t}"]
    elif t == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return [f"{where}: {type(value).__name__} where the schema says integer"]
        if s.get("format") == "int32" and not -2**31 <= value < 2**31:
            out.append(f"{where}: {value} is beyond int32")
    elif t == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return [f"{where}: {type(value).__name__} where the schema says number"]
    elif t is not None:
        return [f"{where}: schema type {t!r} unknown to this checker"]
    if "enum" in s and value not in s["enum"]:
        out.append(f"{where}: {value!r} is not one of {s['enum']}")
    if "pattern" in s and isinstance(value, str) and not re.search(s["pattern"], value):
        out.append(f"{where}: {value!r} does not match {s['pattern']!r}")
    if isinstance(value, dict):
        for key in s.get("required", ()):
            if key not in value:
                out.append(f"{where}: required property {key!r} missing")
        props = s.get("properties", {})
        for key, v in value.items():
            if key in props:
                out.extend(errors(v, props[key], f"{where}.{key}"))
    if isinstance(value, list):
        if "minItems" in s and len(value) < s["minItems"]:
            out.append(f"{where}: fewer than {s['minItems']} items")
        if "maxItems" in s and len(value) > s["maxItems"]:
            out.append(f"{where}: more than {s['maxItems']} items")
        if "items" in s:
            for i, v in enumerate(value):
                out.extend(errors(v, s["items"], f"{where}[{i}]"))
    return out


def response_schema(path: str, method: str, status: int = 200) -> dict[str, Any] | None:
    """The schema of a reply (application/json) to `method path` (a path of the document,
    `{job_id}` and all), the `default` one for a status the operation does not name; None
    where the document gives the reply no body."""
    op = document()["paths"][path][method.lower()]
    resp = op["responses"].get(str(status)) or op["responses"].get("default")
    if resp is None or "content" not in resp:
        return None
    return resp["content"]["application/json"]["schema"]


def request_schema(path: str, method: str) -> dict[str, Any]:
    op = document()["paths"][path][method.lower()]
    return op["requestBody"]["content"]["application/json"]["schema"]
