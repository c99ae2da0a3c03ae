"""JOB_VIEWs kept by the store row they were built from, with their JSON text.

A listing (squeue, scontrol show job) reads the same rows again and again: the pending jobs
of a queue change rarely between two `squeue`s. A job's JOB_VIEW is a function of its row
(the columns and document keys `batchd.store.jobviews` loads) and of the daemon's config,
and of the clock only while the job runs (its run time). So a row seen before gives back
the view built then and its JSON text, without decoding its documents, building the view
or encoding it again; a row that differs in anything is a new key, so a changed job is
never shown stale.

A kept view's trimmings (`ViewMemo.trimmed`: the view cut to the keys a command reads,
squeue's `keys=`, and that cut's JSON text) and the texts derived from it (`derived`: the
REST API's JSON of the job) are kept with it, per set of keys or tag, and go when it goes.

Bounded: at most `cap` rows are kept, the least recently used dropped first, but never one
the listing under way has used: a listing of more rows than `cap` keeps the first `cap` of
them (each later listing finds those and builds the rest) rather than every row pushing out
the one it will need next (which left a 10,000-job squeue with no kept view at all). Not
kept: RUNNING and
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
    holding them is encoded by joining the texts (`batchd.server.httpwire.encode_reply`). To
    everything else an ordinary list of dicts; the views in it must not be changed."""

    def __init__(self, views: Iterable[dict[str, Any]] = (), texts: Sequence[str] = ()):
        super().__init__(views)
        self.texts = list(texts)
        if len(self.texts) != len(self):
            raise ValueError("ViewList: one text per view")

    def json(self) -> str:
        """The list as `json.dumps` writes it."""
        return "[" + ", ".join(self.texts) + "]"


def _cut(view: dict[str, Any], keys: Sequence[str]) -> tuple[dict[str, Any], str]:
    """`view` with only `keys` (those it has), and its JSON text."""
    t = {k: view[k] for k in keys if k in view}
    return t, json.dumps(t)


def trimmed(views: Iterable[dict[str, Any]], keys: Sequence[str]) -> ViewList:
    """The views with only `keys` (those they have), and their texts: what a command that
    reads a few columns is sent (squeue's `keys=`), a fraction of the whole views' bytes."""
    cuts = [_cut(v, keys) for v in views]
    return ViewList([c[0] for c in cuts], [c[1] for c in cuts])


def dumps(payload: Any) -> str:
    """`json.dumps(payload)`, byte for byte, taking the texts of the ViewLists that are
    values of a top-level object as they are."""
    if type(payload) is dict and any(isinstance(v, ViewList) for v in payload.values()):
        return "{" + ", ".join(f"{json.dumps(k)}: {v.json() if isinstance(v, ViewList) else json.dumps(v)}"
                               for k, v in payload.items()) + "}"
    return json.dumps(payload)


class _Kept:
    """One kept view: the view, its JSON text, its trimmings by the keys cut to, and the
    listing that used it last."""
    __slots__ = ("view", "text", "trims", "used")

    def __init__(self, view: dict[str, Any], text: str, used: int = 0):
        self.view, self.text, self.used = view, text, used
        self.trims: dict[tuple[str, ...], tuple[dict[str, Any], str]] = {}


class ViewMemo:
    """Views by row (see the module's doc); safe on the API threads."""

    def __init__(self, cap: int = 5000):
        self.cap = cap
        self._views: dict[tuple[Any, int], _Kept] = {}
        # the kept views by id(), for `trimmed` (each entry's view is checked to be the one)
        self._by_view: dict[int, _Kept] = {}
        self._lock = threading.Lock()
        self._listing = 0  # numbers the listings (`views` calls), for the eviction rule

    def views(self, rows: Iterable[Sequence[Any]], state_at: int, build: Callable[[Sequence[Any]], dict[str, Any]]
              ) -> ViewList:
        """The views of `rows` (each a store row whose first column is the job id and whose
        column `state_at` is the job's state), built by `build(row)` where not kept already."""
        out, texts = [], []
        memo = self._views
        with self._lock:
            self._listing += 1
            listing = self._listing
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
                kept = _Kept(view, json.dumps(view), listing)
                if key is not None:
                    self._keep(key, kept)
            else:
                self._touch(key, kept, listing)
            out.append(kept.view)
            texts.append(kept.text)
        return ViewList(out, texts)

    def trimmed(self, views: Iterable[dict[str, Any]], keys: Sequence[str]) -> ViewList:
        """`trimmed(views, keys)`, taking the trimming of a view this memo keeps from the
        memo (cut and encoded once per set of keys), the others cut here."""
        keys = tuple(keys)
        out, texts = [], []
        by_view = self._by_view
        for v in views:
            kept = by_view.get(id(v))
            if kept is None or kept.view is not v:
                cut = _cut(v, keys)
            else:
                cut = kept.trims.get(keys) or kept.trims.setdefault(keys, _cut(v, keys))
            out.append(cut[0])
            texts.append(cut[1])
        return ViewList(out, texts)

    def derived(self, views: Iterable[dict[str, Any]], tag: str, make: Callable[[dict[str, Any]], str]) -> list[str]:
        """`make(view)` for each view (a text derived from it: the REST API's shape of it),
        kept with the view where this memo keeps the view, and made again where not."""
        out = []
        by_view = self._by_view
        key = (tag,)
        for v in views:
            kept = by_view.get(id(v))
            if kept is None or kept.view is not v:
                out.append(make(v))
                continue
            hit = kept.trims.get(key)
            if hit is None:
                hit = (v, make(v))
                kept.trims[key] = hit
            out.append(hit[1])
        return out

    def _touch(self, key: tuple[Any, int] | None, kept: _Kept, listing: int) -> None:
        """A kept view used: it moves to the recently used end."""
        with self._lock:
            kept.used = listing
            if key is not None and self._views.get(key) is kept:
                del self._views[key]
                self._views[key] = kept

    def _keep(self, key: tuple[Any, int], kept: _Kept) -> None:
        with self._lock:
            memo = self._views
            old = memo.pop(key, None)
            if old is not None:
                self._by_view.pop(id(old.view), None)
            if len(memo) >= self.cap:
                oldest = memo[next(iter(memo))]
                if oldest.used == kept.used:
                    return  # every kept view serves the listing under way: this one is not kept
            memo[key] = kept
            self._by_view[id(kept.view)] = kept
            while len(memo) > self.cap:  # (each kept view is built for its one key)
                self._by_view.pop(id(memo.pop(next(iter(memo))).view), None)

    def __len__(self) -> int:
        return len(self._views)
