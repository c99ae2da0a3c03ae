"""Long id lists cut for `IN (...)`: SQLite limits the bound parameters of one statement."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

#: ids in one `IN (...)` list
ID_BATCH = 500


def batches(items: Sequence[T], size: int = ID_BATCH) -> Iterator[Sequence[T]]:
    """`items` in order, `size` at a time."""
    for i in range(0, len(items), size):
        yield items[i:i + size]
