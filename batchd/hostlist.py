"""Slurm's host-list syntax: `gpu[01-03,07],login1` <-> ["gpu01", "gpu02", "gpu03", "gpu07", "login1"].

Cheap to import (no `re`): the Slurm-named commands use it too."""

from collections.abc import Iterable


def _split(name: str) -> tuple[str, str]:
    i = len(name)
    while i > 0 and name[i - 1].isdigit():
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
    out = []
    for key in order:
        if isinstance(key, str):
            out.append(key)
            continue
        prefix, width = key
        nums = sorted(set(groups[key]))
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


def expand(text: str | None) -> list[str]:
    """The inverse of `compress` (order kept); raises ValueError on unbalanced brackets."""
    out: list[str] = []
    text = text or ""
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
            out.append(item)
            continue
        prefix, _, rest = item.partition("[")
        body, close, suffix = rest.partition("]")
        if not close:
            raise ValueError(f"bad host list {text!r}")
        for part in body.split(","):
            a, dash, b = part.partition("-")
            if dash:
                width = len(a)
                out.extend(f"{prefix}{k:0{width}d}{suffix}" for k in range(int(a), int(b) + 1))
            else:
                out.append(f"{prefix}{a}{suffix}")
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

