"""JSON encoding and decoding for the client's requests and replies without importing the
`json` package.

`import json` costs a command more than the interpreter's own start does beside it: its
decoder compiles regular expressions, which imports `re` (and `enum`, `functools`...).
The work itself is done by CPython's C accelerator `_json` in both cases; this module calls
it directly, the way `json.dumps(obj)` and `json.loads(text)` do with their default
arguments (compact ASCII output with `", "` and `": "` separators, NaN and Infinity
accepted). Where `_json` is missing or its interface differs, `json` is used instead.
Errors in a document raise ValueError (a `json.JSONDecodeError` when the C scanner
reports them).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing `typing` costs as much as `json`
if TYPE_CHECKING:
    from typing import Any

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_SPACE = " \t\n\r"


def _default(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


class _Context:
    """The attributes `_json.make_scanner` reads from its decoder."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict = {}


try:
    import _json

    _encode = _json.make_encoder(None, _default, _json.encode_basestring_ascii, None, ": ", ", ",
                                 False, False, True)
    _scan = _json.make_scanner(_Context())
    if "".join(_encode({"a": [1, 2.5, None, True, "\u00e9"]}, 0)) != '{"a": [1, 2.5, null, true, "\\u00e9"]}':
        raise ImportError("unexpected _json behaviour")
except (ImportError, AttributeError, TypeError):  # another interpreter: the package
    _json = None  # type: ignore[assignment]


def dumps(obj: Any) -> str:
    """`json.dumps(obj)`."""
    if _json is None:
        import json

        return json.dumps(obj)
    return "".join(_encode(obj, 0))


def loads(data: bytes | str) -> Any:
    """`json.loads(data)` for a UTF-8 document."""
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    if _json is None:
        import json

        return json.loads(text)
    i, n = 0, len(text)
    while i < n and text[i] in _SPACE:
        i += 1
    try:
        obj, end = _scan(text, i)
    except StopIteration as e:
        raise ValueError(f"Expecting value: char {e.value}") from None
    while end < n and text[end] in _SPACE:
        end += 1
    if end != n:
        raise ValueError(f"Extra data: char {end}")
    return obj
