"""Slurm's host-list syntax: `gpu[01-03,07],login1` <-> ["gpu01", "gpu02", "gpu03", "gpu07", "login1"].

Cheap to import (no `re`): the Slurm-named commands use it too. Numbers are ASCII digits
only (as in Slurm's C parser): `node²` is a name without a number, `node[1-²]` is refused.
`expand` never builds more than `limit` names (default `MAX_NAMES`, the daemon passes its
`[limits] max_hostlist_names`): a list naming more is refused before anything is expanded,
and `count` tells how many names a list holds without expanding it.
"""

from collections.abc import Iterable, Iterator

#: The most names one host list may expand to (the daemon's default `[limits]
#: max_hostlist_names`): far above any cluster batchd serves, far below what would stall it.
MAX_NAMES = 10_000


def _is_ascii_digit(ch: str) -> bool:
    return "0" <= ch <= "9"


def _number(text: str, whole: str) -> int:
    if not text or not all(_is_ascii_digit(c) for c in text):
        raise ValueError(f"bad host list {whole!r}: {text!r} is not a number")
    return int(text)


def _split(name: str) -> tuple[str, str]:
    i = len(name)
    while i > 0 and _is_ascii_digit(name[i - 1]):
        i -= 1
    return name[:i], name[i:]


def compress(names: Iterable[str]) -> str:
    """Host names -> Slurm's ranged form, prefixes in first-seen order, duplicates
    dropped: `["gpu01", "gpu02", "gpu04", "vm"]` -> `gpu[01-02,04],vm`, `n9,n10,n11` ->
    `n[9-11]`. Zero-padded numbers group by their width; a prefix with one host prints
    without brackets."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    seen: set[str] = set()
    for n in names:
        if not n or n in seen:
            continue
        seen.add(n)
        prefix, digits = _split(n)
        if not digits:
            order.append(n)
            continue
        key = (prefix, len(digits) if digits.startswith("0") else 0)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    out: list[str] = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        nums = sorted(set(groups[item]))
        if len(nums) == 1:
            out.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        parts, i = [], 0
        while i < len(nums):
            j = i
            while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
                j += 1
            parts.append(f"{nums[i]:0{width}d}" if i == j else f"{nums[i]:0{width}d}-{nums[j]:0{width}d}")
            i = j + 1
        out.append(f"{prefix}[{','.join(parts)}]")
    return ",".join(out)


def _items(text: str) -> Iterator[tuple[str, str, list[tuple[int, int, int]], str]]:
    """The items of a host list as (name, prefix, ranges, suffix): `name` for an item
    without brackets (ranges empty), else ranges of (first, last, width) between
    `prefix[` and `]suffix`. Raises ValueError on unbalanced brackets or a bad number."""
    i, n = 0, len(text)
    while i < n:
        j = i
        depth = 0
        while j < n and (text[j] != "," or depth):
            if text[j] == "[":
                depth += 1
            elif text[j] == "]":
                depth -= 1
            j += 1
        item = text[i:j]
        i = j + 1
        if not item:
            continue
        if "[" not in item:
            yield item, "", [], ""
            continue
        prefix, _, rest = item.partition("[")
        body, close, suffix = rest.partition("]")
        if not close:
            raise ValueError(f"bad host list {text!r}")
        spans = []
        for part in body.split(","):
            a, dash, b = part.partition("-")
            lo = _number(a, text)
            hi = _number(b, text) if dash else lo
            if hi < lo:
                raise ValueError(f"bad host list {text!r}: range {part} runs backwards")
            spans.append((lo, hi, len(a)))
        yield "", prefix, spans, suffix


def count(text: str | None) -> int:
    """How many names `text` expands to (duplicates counted), without expanding it;
    raises ValueError as `expand` does on a malformed list."""
    return sum(1 if not spans else sum(hi - lo + 1 for lo, hi, _w in spans)
               for _name, _p, spans, _s in _items(text or ""))


def expand(text: str | None, limit: int | None = MAX_NAMES) -> list[str]:
    """The inverse of `compress` (order kept); raises ValueError on unbalanced brackets,
    a number that is not ASCII digits, or a list of more than `limit` names (None: no
    limit, for lists the daemon built itself)."""
    text = text or ""
    if limit is not None:
        total = count(text)
        if total > limit:
            raise ValueError(f"host list {text[:40]!r}: {total} names, more than the limit of {limit}")
    out: list[str] = []
    for name, prefix, spans, suffix in _items(text):
        if not spans:
            out.append(name)
            continue
        for lo, hi, width in spans:
            out.extend(f"{prefix}{k:0{width}d}{suffix}" for k in range(lo, hi + 1))
    return out


def ranges(ids: Iterable[int]) -> str:
    """Integer ids in Slurm's and systemd's range form: [7, 0, 1, 5, 6] -> "0-1,5-7";
    duplicates collapse, empty -> ""."""
    out: list[str] = []
    vals = sorted(set(int(i) for i in ids))
    k = 0
    while k < len(vals):
        m = k
        while m + 1 < len(vals) and vals[m + 1] == vals[m] + 1:
            m += 1
        out.append(str(vals[k]) if k == m else f"{vals[k]}-{vals[m]}")
        k = m + 1
    return ",".join(out)

