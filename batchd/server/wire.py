"""The wire contract, checked at the door: one typed, bounded definition of every
endpoint's request (query and body) and reply, for `batchd/server/api.py`.

Daemon side only: the commands (`cli/`) never import this module (they keep their fast
start; `batchd/protocol.py` stays the prose reference both sides read). No third-party
dependency: a rule is a small declarative object (`Int`, `Num`, `Bool`, `Str`, `Enum`,
`List`, `Map`, `Obj`, `Either`, `Json`), and `check(rule, value, path, limits)` either
returns or raises `WireError`, an `InvalidRequest` (HTTP 400) whose message names the
field path and the rule: `spec.cpus_per_task: must be an integer >= 1 (got -8)`.

Contract of the rules:

- integers are JSON integers: a bool, a float (even `3.0`) or a string is not an integer;
  numbers (`Num`) are integers or finite floats, never bools;
- strings are valid Unicode (no lone surrogates) and hold no NUL unless the rule says so;
  lengths are UTF-8 bytes; `max_len` may name a `[limits]` key (`"max_script_bytes"`);
- `Obj` names its fields; `unknown="reject"` refuses any other key (`x.y: unknown field`),
  `"scalars"` lets other keys through when they hold null, a bool, a number or a string of
  at most 1024 bytes, at most 32 of them (JOB_SPEC: a newer command's extra keys reach an
  older daemon harmlessly; nothing in the daemon reads them), `"allow"` lets anything
  through (replies: optional keys are documented, not closed);
- an `Obj`'s `checks` are cross-field rules run after its fields passed;
- `shaped(shape, fields)` is the `Obj` of a message shape of `batchd/server/messages.py` (a
  TypedDict): its fields are exactly the shape's keys, its required fields the shape's
  required keys, or it refuses to be built; the rule keeps the shape (`Obj.shape`).

The request schemas are `batchd.server.wire_requests.REQUESTS[(method, path)] = Route(query,
body)` (`body` None: the route takes no body); the reply schemas (JOB_VIEW, ACCT_ROW,
NODE_VIEW, ...) are `batchd.server.wire_replies.REPLIES`, checked by the tests against a running
daemon. A test fails for any route of `batchd.server.api.ROUTES` without both.
Size caps come from the config's `[limits]` (`batchd.config.LIMITS`).
"""

from __future__ import annotations

import json
import math
import signal as _signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from batchd.config import LIMITS
from batchd.errors import InvalidRequest

#: Slurm's words for a field over its size (ESLURM_PATHNAME_TOO_LONG): what sbatch 22.05
#: prints for a script over max_script_size, a job name over 1024 bytes, a path over 4096
TOO_LONG = "Pathname of a file, directory or other parameter too long"
SIGRTMAX = int(getattr(_signal, "SIGRTMAX", 64))
_MISSING = object()


class WireError(InvalidRequest):
    """A request that breaks the contract; `path` is the field, `rule` what it must be."""

    def __init__(self, path: str, rule: str, got: Any = _MISSING, *, too_long: bool = False):
        text = f"{path}: {rule}" if path else (f"the request body {rule}" if rule.startswith("must") else rule)
        if got is not _MISSING:
            text += f" (got {show(got)})"
        if too_long:
            text = f"{TOO_LONG} ({text})"
        super().__init__(text)
        self.path, self.rule = path, rule


def show(v: Any) -> str:
    """A short JSON-ish rendering of a wrong value for a message."""
    try:
        text = json.dumps(v, ensure_ascii=False) if not isinstance(v, int) or abs(v) < 10 ** 40 else \
            f"an integer of {len(str(abs(v)))} digits"
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def limit(limits: Mapping[str, Any] | None, key: str) -> int:
    """A `[limits]` value: the config's, else the documented default."""
    if limits is not None and key in limits:
        return int(limits[key])
    return int(LIMITS[key][0])


def utf8_len(s: str, path: str) -> int:
    try:
        return len(s.encode("utf-8"))
    except UnicodeEncodeError:
        raise WireError(path, "must be valid Unicode text (it holds a lone surrogate)") from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# ---------------------------------------------------------------------------- rules
class Rule:
    null = False

    def describe(self) -> str:
        raise NotImplementedError

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        raise NotImplementedError

    def check(self, v: Any, path: str, lim: Mapping[str, Any] | None = None) -> None:
        if v is None:
            if self.null:
                return
            raise WireError(path, f"must be {self.describe()}", None)
        self._check(v, path, lim)

    def _or_null(self, text: str) -> str:
        return f"{text} or null" if self.null else text


class Int(Rule):
    """A JSON integer in [lo, hi]; `also` are extra allowed values with their meaning
    (`{-1: "UNLIMITED"}`)."""

    def __init__(self, lo: int | None = None, hi: int | None = None, *, null: bool = False,
                 also: Mapping[int, str] | None = None):
        self.lo, self.hi, self.null, self.also = lo, hi, null, dict(also or {})

    def _range(self) -> str:
        if self.lo is not None and self.hi is not None:
            text = f"an integer >= {self.lo}" if self.hi >= 10 ** 6 and self.lo in (0, 1) else \
                f"an integer between {self.lo} and {self.hi}"
        elif self.lo is not None:
            text = f"an integer >= {self.lo}"
        elif self.hi is not None:
            text = f"an integer <= {self.hi}"
        else:
            text = "an integer"
        for val, meaning in self.also.items():
            text += f" or {val} ({meaning})"
        return text

    def describe(self) -> str:
        return self._or_null(self._range())

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) is not int:
            raise WireError(path, f"must be {self.describe()}", v)
        if v in self.also:
            return
        if self.lo is not None and v < self.lo:
            raise WireError(path, f"must be {self._range()}", v)
        if self.hi is not None and v > self.hi:
            text = self._range()
            raise WireError(path, f"must be {text if 'between' in text else f'an integer <= {self.hi}'}", v)


class Num(Rule):
    """An integer or a finite float in [lo, hi] (unix times, prices, seconds)."""

    def __init__(self, lo: float | None = None, hi: float | None = None, *, null: bool = False):
        self.lo, self.hi, self.null = lo, hi, null

    def describe(self) -> str:
        text = "a number"
        if self.lo is not None:
            text += f" >= {self.lo:g}"
        if self.hi is not None:
            text += f" and <= {self.hi:g}" if self.lo is not None else f" <= {self.hi:g}"
        return self._or_null(text)

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) not in (int, float) or (type(v) is float and not math.isfinite(v)):
            raise WireError(path, f"must be {self.describe()}", v)
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            raise WireError(path, f"must be {self.describe()}", v)


class Bool(Rule):
    def __init__(self, *, null: bool = True):
        self.null = null

    def describe(self) -> str:
        return self._or_null("true or false")

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) is not bool:
            raise WireError(path, f"must be {self.describe()}", v)


StrCheck = Callable[[str, str, Mapping[str, Any] | None], None]


class Str(Rule):
    """A string of at most `max_len` UTF-8 bytes (an int, or a `[limits]` key), at least
    `min_len`; no NUL unless `nul`; `test(value, path, limits)` may refuse more;
    `too_long` words the size error as Slurm does."""

    def __init__(self, max_len: int | str = 1024, *, null: bool = False, min_len: int = 0, nul: bool = False,
                 test: StrCheck | None = None, too_long: bool = True, what: str = "a string"):
        self.max_len, self.null, self.min_len, self.nul = max_len, null, min_len, nul
        self.test, self.too_long, self.what = test, too_long, what

    def describe(self) -> str:
        text = self.what if self.min_len == 0 else f"a non-empty {self.what.removeprefix('a ')}"
        return self._or_null(text)

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) is not str:
            raise WireError(path, f"must be {self.describe()}", v)
        most = limit(lim, self.max_len) if isinstance(self.max_len, str) else self.max_len
        size = utf8_len(v, path)
        if size > most:
            raise WireError(path, f"must be at most {most} bytes (it has {size})", too_long=self.too_long)
        if len(v) < self.min_len:
            raise WireError(path, f"must be {self.describe()}", v)
        if not self.nul and "\x00" in v:
            raise WireError(path, "must not contain a NUL character")
        if self.test is not None:
            self.test(v, path, lim)


class Enum(Rule):
    def __init__(self, *choices: str, null: bool = False):
        self.choices, self.null = choices, null

    def describe(self) -> str:
        return self._or_null("one of " + ", ".join(self.choices))

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) is not str or v not in self.choices:
            raise WireError(path, f"must be {self.describe()}", v)


class List(Rule):
    """A list of `item`s, `min_items`..`max_items` long; `max_bytes` (an int or a
    `[limits]` key) caps the sum of its strings' UTF-8 sizes plus one per item."""

    def __init__(self, item: Rule, *, max_items: int = 10_000, min_items: int = 0, null: bool = False,
                 max_bytes: int | str | None = None):
        self.item, self.max_items, self.min_items, self.null = item, max_items, min_items, null
        self.max_bytes = max_bytes

    def describe(self) -> str:
        return ("null or " if self.null else "") + f"a list, each item {self.item.describe()}"

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) is not list:
            raise WireError(path, f"must be {self.describe()}", v)
        if len(v) > self.max_items:
            raise WireError(path, f"must have at most {self.max_items} items (it has {len(v)})", too_long=True)
        if len(v) < self.min_items:
            raise WireError(path, f"must have at least {self.min_items} item{'s' * (self.min_items > 1)}")
        for i, x in enumerate(v):
            self.item.check(x, f"{path}[{i}]", lim)
        if self.max_bytes is not None:
            most = limit(lim, self.max_bytes) if isinstance(self.max_bytes, str) else self.max_bytes
            size = sum(utf8_len(x, path) + 1 for x in v if isinstance(x, str))
            if size > most:
                raise WireError(path, f"must be at most {most} bytes in all (it has {size})", too_long=True)


class Map(Rule):
    """An object of `key` -> `value` (an environment: str -> str), at most `max_items`
    keys; `max_bytes` caps the sum of len(key) + len(value) + 2 (UTF-8) over string values."""

    def __init__(self, key: Str, value: Rule, *, max_items: int = 100_000, null: bool = False,
                 max_bytes: int | str | None = None):
        self.key, self.value, self.max_items, self.null, self.max_bytes = key, value, max_items, null, max_bytes

    def describe(self) -> str:
        return ("null or " if self.null else "") + f"an object, each value {self.value.describe()}"

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) is not dict:
            raise WireError(path, f"must be {self.describe()}", v)
        if len(v) > self.max_items:
            raise WireError(path, f"must have at most {self.max_items} keys (it has {len(v)})", too_long=True)
        size = 0
        for k, x in v.items():
            self.key.check(k, f"{path} key {show(k)}", lim)
            self.value.check(x, _join(path, k), lim)
            if isinstance(x, str):
                size += utf8_len(k, path) + utf8_len(x, path) + 2
        if self.max_bytes is not None:
            most = limit(lim, self.max_bytes) if isinstance(self.max_bytes, str) else self.max_bytes
            if size > most:
                raise WireError(path, f"must be at most {most} bytes in all (it has {size})", too_long=True)


ObjCheck = Callable[[dict, str, Mapping[str, Any] | None], None]


class Obj(Rule):
    def __init__(self, fields: Mapping[str, Rule], *, required: tuple[str, ...] = (), unknown: str = "reject",
                 null: bool = False, checks: tuple[ObjCheck, ...] = (), what: str = "an object",
                 shape: Any = None):
        assert unknown in ("reject", "scalars", "allow")
        self.fields, self.required, self.unknown = dict(fields), required, unknown
        self.null, self.checks, self.what = null, checks, what
        self.shape = shape  # the TypedDict of batchd/server/messages.py this rule checks (`shaped`), or None

    def describe(self) -> str:
        return self._or_null(self.what)

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) is not dict:
            raise WireError(path, f"must be {self.describe()}", v)
        for k in self.required:
            if k not in v:
                raise WireError(_join(path, k), "is required")
        extra = 0
        for k, x in v.items():
            rule = self.fields.get(k)
            if rule is not None:
                rule.check(x, _join(path, k), lim)
                continue
            if self.unknown == "reject":
                raise WireError(_join(path, str(k)), "unknown field")
            if self.unknown == "scalars":
                extra += 1
                if extra > 32:
                    raise WireError(path, "has more than 32 fields this daemon does not know")
                _SCALAR.check(x, _join(path, k), lim)
        for c in self.checks:
            c(v, path, lim)


def shaped(shape: Any, fields: Mapping[str, Rule], *, unknown: str = "reject", null: bool = False,
           checks: tuple[ObjCheck, ...] = (), what: str = "an object") -> Obj:
    """The rule of the TypedDict `shape` (batchd/server/messages.py): `fields` are the types and
    bounds of exactly its keys, its required keys are the rule's required fields. A rule
    that names a key the shape lacks, or lacks one the shape has, is refused here (at
    import: the shape and the door cannot drift apart)."""
    required: frozenset[str] = shape.__required_keys__
    keys = required | shape.__optional_keys__
    if set(fields) != keys:
        raise TypeError(f"the rule of {shape.__name__}: fields {sorted(set(fields) - keys)} are not the shape's, "
                        f"keys {sorted(keys - set(fields))} have no rule")
    return Obj(fields, required=tuple(k for k in fields if k in required), unknown=unknown, null=null,
               checks=checks, what=what, shape=shape)


class Either(Rule):
    """The first of `rules` that a value's type fits (e.g. an integer or "parent")."""

    def __init__(self, *rules: Rule, null: bool = False):
        self.rules, self.null = rules, null

    def describe(self) -> str:
        return self._or_null(" or ".join(r.describe().removesuffix(" or null") for r in self.rules))

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        for r in self.rules:
            try:
                r.check(v, path, lim)
                return
            except WireError:
                continue
        raise WireError(path, f"must be {self.describe()}", v)


class Json(Rule):
    """Any JSON value (a reply's free-form part), at most `max_depth` deep."""

    def __init__(self, *, max_depth: int = 32):
        self.null, self.max_depth = True, max_depth

    def describe(self) -> str:
        return "any JSON value"

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None, depth: int = 0) -> None:
        if depth > self.max_depth:
            raise WireError(path, f"must be at most {self.max_depth} levels deep")
        if isinstance(v, dict):
            for k, x in v.items():
                self._check(x, _join(path, str(k)), lim, depth + 1)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                self._check(x, f"{path}[{i}]", lim, depth + 1)
        elif isinstance(v, float) and not math.isfinite(v):
            raise WireError(path, "must be a finite number", v)


class _Scalar(Rule):
    null = True

    def describe(self) -> str:
        return "null, true, false, a number or a string of at most 1024 bytes"

    def _check(self, v: Any, path: str, lim: Mapping[str, Any] | None) -> None:
        if type(v) in (bool, int):
            return
        if type(v) is float and math.isfinite(v):
            return
        if type(v) is str and utf8_len(v, path) <= 1024 and "\x00" not in v:
            return
        raise WireError(path, f"must be {self.describe()}", v)


_SCALAR = _Scalar()


@dataclass(frozen=True)
class Route:
    """One endpoint's request: `query` (its keys are strings) and `body` (None: no body)."""
    query: Obj
    body: Rule | None


def check(rule: Rule, value: Any, path: str = "", limits: Mapping[str, Any] | None = None) -> None:
    """Raise WireError when `value` breaks `rule` (module docstring)."""
    rule.check(value, path, limits)


def check_request(route: Route, query: dict[str, str], body: Any, method: str, path: str,
                  limits: Mapping[str, Any] | None = None) -> None:
    """Check one parsed request (query dict, decoded JSON body or None) against its route."""
    route.query.check(query, "", limits)
    if route.body is None:
        if body is not None:
            raise WireError("", f"{method} {path} takes no request body")
        return
    route.body.check({} if body is None else body, "", limits)


__all__ = ["Route", "WireError", "check", "check_request", "Int", "Num", "Bool", "Str", "Enum",
           "List", "Map", "Obj", "Either", "Json", "TOO_LONG", "SIGRTMAX", "limit", "shaped"]
