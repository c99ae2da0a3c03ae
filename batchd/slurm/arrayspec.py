"""`--array` specifications: `0-7`, `1,3,5`, `0-15:4`, `0,6,16-32`, with a `%N` throttle.

Pure and cheap (builtins only): sbatch may call it, the daemon's submit path does.

`parse(text, max_array_size=1001)` returns `(task_ids, max_running)`: task ids sorted
ascending without duplicates, `max_running` the `%N` throttle or None. Slurm's quirks
kept: an open range `0-` means the single index `0` (as the reference records), a
range whose end is below its start is invalid, indices must lie in
`0 .. max_array_size - 1`. Invalid input raises `ArraySpecError` with Slurm's
message `Invalid job array specification` (the submit then fails with exit 1).

`format_ids(ids)` compacts ids back into Slurm's display form (`0-3,7`).
"""

from __future__ import annotations

from collections.abc import Iterable

from batchd.slurm.digits import isdigits

MESSAGE = "Invalid job array specification"


class ArraySpecError(ValueError):
    """An `--array` value Slurm refuses; `str(e)` is Slurm's message."""

    def __init__(self, message: str = MESSAGE) -> None:
        super().__init__(message)
        self.message = message


def _int(s: str) -> int:
    if not isdigits(s):
        raise ArraySpecError()
    return int(s)


def parse(text: str | None, max_array_size: int = 1001) -> tuple[list[int], int | None]:
    """Task ids and throttle of an `--array` value; see the module docstring."""
    if text is None:
        raise ArraySpecError()
    spec = text.strip()
    max_running = None
    if "%" in spec:
        spec, _, thr = spec.partition("%")
        max_running = _int(thr)
        if max_running == 0:
            # Slurm accepts %0 as "no limit"
            max_running = None
    if not spec:
        raise ArraySpecError()
    ids: set[int] = set()
    for item in spec.split(","):
        if item == "":
            raise ArraySpecError()
        step = 1
        if ":" in item:
            item, _, st = item.partition(":")
            step = _int(st)
            if step <= 0:
                raise ArraySpecError()
        if "-" in item:
            a, _, b = item.partition("-")
            lo = _int(a)
            hi = lo if b == "" else _int(b)
            if hi < lo:
                raise ArraySpecError()
        else:
            lo = hi = _int(item)
        if hi >= max_array_size:
            raise ArraySpecError()
        ids.update(range(lo, hi + 1, step))
    return sorted(ids), max_running


def format_ids(ids: Iterable[int], max_running: int | None = None) -> str:
    """Compact `ids` (any order) as Slurm shows an array's tasks: consecutive runs as
    `a-b`, others alone (`1,3,5`, `0-3,7`; steps are never written, as in the
    reference's `ArrayTaskId=1,3,5`); `%N` appended when `max_running` is given."""
    xs = sorted(set(ids))
    parts = []
    i = 0
    n = len(xs)
    while i < n:
        j = i
        while j + 1 < n and xs[j + 1] == xs[j] + 1:
            j += 1
        parts.append(str(xs[i]) if j == i else f"{xs[i]}-{xs[j]}")
        i = j + 1
    out = ",".join(parts)
    if max_running:
        out += f"%{max_running}"
    return out
