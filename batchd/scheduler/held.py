"""The held pass: what earlier cycles preempted for a job stays that job's until it starts.

A preemption does not end at once: the victims keep running through their grace time (the
snapshot marks each with `preempting_for: <pending job id>`), and the job they were evicted
for (marked `preemptor: true` once the controller applied the decision) waits for them. Without
this pass, the next cycles would see the victims as ordinary running jobs (free to be chosen
again, or another victim to be added for the same need) and, once they ended, their freed
devices as plain idle capacity that any other pending job ranked before the preemptor takes.

Contract, run before every other pass:

- every eligible pending job X marked `preemptor`, or named by some running job's
  `preempting_for`, in job order, gets its running victims evicted for it again (their
  devices become releasing, usable by X only: the allocate pass never places on releasing
  devices, and an evicted job is no victim candidate for anybody), then X is placed on idle
  plus releasing resources. Placed: X starts, `after` the victims whose devices it uses (and,
  when its account's limit held it, after its own account's victims) (none
  once they have ended: it starts now, ahead of every other pending job, on the devices they
  freed). Not placed (its need is no longer covered: a node went down, its request changed):
  the evictions are undone and X is scheduled by the normal rules.
- a victim whose preemptor is not an eligible pending job (it started, was cancelled, is held)
  reserves nothing: it is an ordinary running job.
- re-evicting a victim for the job it is already being preempted for is not a new decision:
  `cycle.decide` leaves it out of `Decisions.preempt`.
"""

from __future__ import annotations

from typing import Any

from .allocate import OK, after_of, try_place
from .job import JobRT
from .state import Session


def preempting_for(v: JobRT) -> str | None:
    """The id (as str) of the job running job `v` is being preempted for, or None."""
    x = v.spec.raw.get("preempting_for")
    return None if x is None else str(x)


def held_pass(s: Session, reasons: dict[Any, str]) -> None:
    victims: dict[str, list[JobRT]] = {}
    for v in s.running:
        x = preempting_for(v)
        if x is not None and v.takes and v.spec.state == "RUNNING":
            victims.setdefault(x, []).append(v)
    marked = [j for j in s.pending if j.preemptor or j.sid in victims] if victims or s.any_preemptor else []
    for j in marked:  # s.pending is in job order
        cp = s.checkpoint()
        mine = [v for v in victims.get(j.sid, ()) if not v.evicted]
        blocked = bool(mine) and s.over_limit(j, j.R) is not None
        for v in mine:
            s.evict(v, "preempt", j)
        status, takes, _ = try_place(s, j, True)
        if status != OK:
            s.rollback(cp)
            continue
        after = after_of(takes)
        if blocked:  # they free its account's limit, not (only) devices: it waits for them all
            after.extend(v.id for v in mine if v.queue is j.queue and v.id not in after)
        s.start(j, takes, after)
        reasons.pop(j.id, None)
