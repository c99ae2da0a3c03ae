"""Field checks for snapshot parsing: each returns the value or raises `ValueError` whose
message starts with the path of the bad key (`jobs[3].per_task.cpu: must be a number`)."""

from __future__ import annotations

import math
from typing import Any

UNLIMITED = -1.0


def field_error(path: str, msg: str, value: Any = None) -> ValueError:
    shown = "" if value is None else f", got {value!r}"
    return ValueError(f"{path}: {msg}{shown}")


def get_num(d: dict, key: str, path: str, default: float | None = None, *, minimum: float | None = 0.0,
            allow_unlimited: bool = False, required: bool = False) -> float | None:
    if key not in d or d[key] is None:
        if required:
            raise field_error(f"{path}.{key}", "is required")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and math.isnan(v)):
        raise field_error(f"{path}.{key}", "must be a number", v)
    v = float(v)
    if allow_unlimited and v == UNLIMITED:
        return v
    if minimum is not None and v < minimum:
        raise field_error(f"{path}.{key}", f"must be >= {minimum:g}" + (" or -1 (unlimited)" if allow_unlimited else ""), v)
    return v


def get_int(d: dict, key: str, path: str, default: int | None = None, *, minimum: int = 0) -> int | None:
    v = get_num(d, key, path, None, minimum=minimum)
    if v is None:
        return default
    if v != int(v):
        raise field_error(f"{path}.{key}", "must be an integer", d[key])
    return int(v)


def get_str(d: dict, key: str, path: str, default: str | None = None, *, required: bool = False) -> str | None:
    v = d.get(key)
    if v is None:
        if required:
            raise field_error(f"{path}.{key}", "is required")
        return default
    if not isinstance(v, str) or (required and not v):
        raise field_error(f"{path}.{key}", "must be a non-empty string", v)
    return v


def req_str(d: dict, key: str, path: str) -> str:
    v = get_str(d, key, path, required=True)
    assert v is not None
    return v


def check_resource_key(key: str, path: str) -> None:
    if key in ("gres/gpu", "cpu", "mem", "gres/shard"):
        return
    if key.startswith("gres/gpu:") and len(key) > len("gres/gpu:"):
        return
    raise field_error(path, "unknown resource (gres/gpu, gres/gpu:TYPE, gres/shard, cpu, mem)")


def is_num(v: Any) -> bool:
    c = v.__class__
    return (c is int or c is float) and v == v
