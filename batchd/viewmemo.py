"""JOB_VIEWs kept by the store row they were built from, with their JSON text.

A listing (squeue, scontrol show job) reads the same rows again and again: the pending jobs
of a queue change rarely between two `squeue`s. A job's JOB_VIEW is a function of its row
(the columns and document keys `batchd.store.jobviews` loads) and of the daemon's config,
and of the clock only while the job runs (its run time). So a row seen before gives back
the view built then and its JSON text, without decoding its documents, building the view
or encoding it again; a row that differs in anything is a new key, so a changed job is
never shown stale.

Bounded: at most `cap` rows are kept, the oldest dropped first. Not kept: RUNNING and
SUSPENDED rows (their run time moves), and a row holding a JSON value that cannot be a key
(an allocation).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

#: the states whose views change with the clock
_CLOCKED = ("RUNNING", "SUSPENDED")


class ViewList(list[dict[str, Any]]):
    """Views that carry each one's JSON text (`texts`, in the same order), so that a reply
    holding them is encoded by joining the texts (`batchd.httpwire.encode_reply`). To
    everything else an ordinary list of dicts; the views in it must not be changed."""

    def __init__(self, views: Iterable[dict[str, Any]] = (), texts: Sequence[str] = ()):
        super().__init__(views)
        self.texts = list(texts)
        if len(self.texts) != len(self):
            raise ValueError("ViewList: one text per view")

    def json(self) -> str:
        """The list as `json.dumps` writes it."""
        return "[" + ", ".join(self.texts) + "]"


def trimmed(views: Iterable[dict[str, Any]], keys: Sequence[str]) -> ViewList:
    """The views with only `keys` (those they have), and their texts: what a command that
    reads a few columns is sent (squeue's `keys=`), a fraction of the whole views' bytes."""
    out = [{k: v[k] for k in keys if k in v} for v in views]
    return ViewList(out, [json.dumps(v) for v in out])


def dumps(payload: Any) -> str:
    """`json.dumps(payload)`, byte for byte, taking the texts of the ViewLists that are
    values of a top-level object as they are."""
    if type(payload) is dict and any(isinstance(v, ViewList) for v in payload.values()):
        return "{" + ", ".join(f"{json.dumps(k)}: {v.json() if isinstance(v, ViewList) else json.dumps(v)}"
                               for k, v in payload.items()) + "}"
    return json.dumps(payload)


class ViewMemo:
    """Views by row (see the module's doc); safe on the API threads."""

    def __init__(self, cap: int = 5000):
        self.cap = cap
        self._views: dict[tuple[Any, int], tuple[dict[str, Any], str]] = {}
        self._lock = threading.Lock()

    def views(self, rows: Iterable[Sequence[Any]], state_at: int, build: Callable[[Sequence[Any]], dict[str, Any]]
              ) -> ViewList:
        """The views of `rows` (each a store row whose first column is the job id and whose
        column `state_at` is the job's state), built by `build(row)` where not kept already."""
        out, texts = [], []
        memo = self._views
        for row in rows:
            # (the job id, the row's hash): a row's own strings are not kept (a 64-bit
            # SipHash collision of two rows of one job is the only way to a stale view)
            try:
                key = None if row[state_at] in _CLOCKED else (row[0], hash(tuple(row)))
            except TypeError:  # a value that is not hashable
                key = None
            kept = memo.get(key) if key is not None else None
            if kept is None:
                view = build(row)
                kept = (view, json.dumps(view))
                if key is not None:
                    self._keep(key, kept)
            out.append(kept[0])
            texts.append(kept[1])
        return ViewList(out, texts)

    def _keep(self, key: tuple[Any, int], kept: tuple[dict[str, Any], str]) -> None:
        with self._lock:
            memo = self._views
            memo[key] = kept
            while len(memo) > self.cap:
                del memo[next(iter(memo))]

    def __len__(self) -> int:
        return len(self._views)
