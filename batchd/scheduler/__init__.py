"""The pure scheduler: `decide(snapshot, policy) -> Decisions` (docs/snapshot.md).

No I/O, no clock, no logging: time comes in as `snapshot.now`. Use:

    snap = load_snapshot(json.load(f))      # ValueError naming the bad key
    dec = decide(snap, {"passes": ["allocate"]})
    print(json.dumps(dec.to_dict()))

Modules: snapshot (input format, defaults, validation), model (its dataclasses), fields
(field checks), fairshare (KAI division), state (the cycle's working state and statement),
job (a job in the cycle), placement (gangs on nodes), ordering (queue and victim order),
allocate (allocate pass, reasons), backfill (EASY reservations), evict (reclaim, preempt),
cycle (decide: the cycle and the output).
"""

from .cycle import PASSES, Decisions, decide
from .snapshot import Snapshot, load_snapshot

__all__ = ["PASSES", "Decisions", "Snapshot", "decide", "load_snapshot"]
