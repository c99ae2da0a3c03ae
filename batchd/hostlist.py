"""Slurm's host-list syntax: `gpu[01-03,07],login1` <-> ["gpu01", "gpu02", "gpu03", "gpu07", "login1"].

Cheap to import (no `re`): the Slurm-named commands use it too."""


def _split(name: str) -> tuple[str, str]:
    i = len(name)
    while i > 0 and name[i - 1].isdigit():
        i -= 1
    return name[:i], name[i:]


def compress(names: list[str]) -> str:
    """Group names by prefix and digit width, keeping first-seen order of the groups."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for n in names:
        prefix, digits = _split(n)
        if not digits:
            order.append(n)
            continue
        key = (prefix, len(digits))
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


def expand(text: str) -> list[str]:
    """The inverse of `compress`; raises ValueError on unbalanced brackets."""
    out: list[str] = []
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
