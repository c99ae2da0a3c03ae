"""One scheduler scenario: a snapshot in, what one `decide()` must say out.

Every scheduler table (tests/scheduler/test_sched_*.py) is a list of `Scenario`s. A case names
only what it pins: an input left out takes the builders' default or the table's, and a `want_*`
left at None is not checked. A key that is not a field below (a misspelled `want_*`, an input
the type does not know) is refused when the table is built (TypeError at import), so a case can
never pass by not being checked. Like Kueue's scheduler tests, each `want_*` says here exactly
what it compares; `FIELD_DOCS` holds those sentences and a test checks every field has one.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from .sched_builders import Outcome, run, snapshot


def _in(doc: str, default: Any = None, factory: Any = MISSING, required: bool = False) -> Any:
    if required:
        return field(metadata={"doc": doc})
    if factory is not MISSING:
        return field(default_factory=factory, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def _want(doc: str) -> Any:
    return field(default=None, metadata={"doc": doc})


@dataclass(frozen=True, kw_only=True)
class Scenario:
    # --- in
    id: str = _in("the rule the case pins, in words (the pytest id)", required=True)
    nodes: list[dict] = _in("snapshot `nodes` (builders.node)", factory=list)
    accounts: list[dict] = _in("snapshot `accounts` (builders.account); a `default` top account is added "
                               "when a leaf names it as its parent", factory=list)
    jobs: list[dict] = _in("snapshot `jobs` (builders.job); submit times follow the list order", factory=list)
    users: list[dict] | None = _in("snapshot `users` (per-user association policies); None: none")
    partitions: list[dict] | None = _in("snapshot `partitions`; None: the snapshot has no partitions table")
    qos: list[dict] | None = _in("snapshot `qos` table; None: none")
    passes: list[str] | None = _in("the passes decide() runs; None: the table's default, given to `outcome`")
    policy: dict | None = _in("policy keys besides `passes` (builders.snapshot sets backfill off)")

    # --- out (None: not checked)
    want_started: set[str] | None = _want(
        "ids of the jobs started in the cycle, exactly (a relocated victim counts as started)")
    want_preempted: set[str] | None = _want("ids of the jobs preempted in the cycle, exactly")
    want_reasons: dict[str, str] | None = _want(
        "{job: pending reason} of every job left pending, exactly (Slurm's words: Resources, Priority, ...)")
    want_victim_reasons: dict[str, str] | None = _want(
        "{victim: its preemption's `reason`} for every victim, exactly: `preempt` (a job of the preemptor's "
        "own account) or `reclaim` (another account's)")
    want_victim_policies: dict[str, str | None] | None = _want(
        "{victim: its preemption's `policy`}, the rule that allowed it (`within_account=lower_priority`, ...), "
        "for every victim, exactly")
    want_victims_for: dict[str, str] | None = _want(
        "{victim: the job it is preempted `for`} for every victim, exactly")
    want_after: dict[str, list[str]] | None = _want(
        "{job: the sorted ids of the victims it starts `after`} for the started jobs listed")
    want_gpus: dict[str, list[int]] | None = _want(
        "{job: the whole-GPU indices of its first node} for the started jobs listed")
    want_shard_gpus: dict[str, list[int]] | None = _want(
        "{job: the card (`shard_gpus`) its shards come from on its first node} for the started jobs listed")
    want_cpu_ids: dict[str, dict[str, list[int]]] | None = _want(
        "{job: {node: the CPU ids it is pinned to}} for the started jobs listed")
    want_charge: dict[str, dict] | None = _want(
        "{job: the start's `charge` (TRES and card shares, shares rounded to 6 places)} for the jobs listed")
    want_fair_share: dict[str, float] | None = _want(
        "{account: its gres/gpu fair share} for the accounts listed")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or not f.name.startswith("want_"):
                continue
            kind = set if f.name in ("want_started", "want_preempted") else dict
            if not isinstance(value, kind):
                raise TypeError(f"{self.id}: {f.name} must be a {kind.__name__}, not {type(value).__name__}")

    def snapshot(self) -> dict:
        extra: dict[str, Any] = {}
        for key in ("users", "partitions", "qos"):
            if getattr(self, key) is not None:
                extra[key] = getattr(self, key)
        return snapshot(self.nodes, self.accounts, self.jobs, policy=self.policy, **extra)

    def outcome(self, passes: list[str] | None = None) -> Outcome:
        """One decide() over the case's snapshot; `passes`: the table's default when the case
        names none (None: decide()'s own, every pass)."""
        chosen = self.passes if self.passes is not None else passes
        return run(self.snapshot(), chosen)

    def check(self, out: Outcome) -> None:
        """Assert every `want_*` the case gives against `out`."""
        d = out.decisions
        starts = {s["job"]: s for s in d["start"]}
        victims = {p["job"]: p for p in d["preempt"]}
        if self.want_started is not None:
            assert out.started == self.want_started, "started"
        if self.want_preempted is not None:
            assert out.preempted == self.want_preempted, "preempted"
        if self.want_reasons is not None:
            assert out.reasons == self.want_reasons, "pending reasons"
        if self.want_victim_reasons is not None:
            assert {v: p["reason"] for v, p in victims.items()} == self.want_victim_reasons, "victim reasons"
        if self.want_victim_policies is not None:
            assert {v: p.get("policy") for v, p in victims.items()} == self.want_victim_policies, "victim policies"
        if self.want_victims_for is not None:
            assert {v: p["for"] for v, p in victims.items()} == self.want_victims_for, "victims for"
        for jid, after in (self.want_after or {}).items():
            assert sorted(starts[jid]["after"]) == sorted(after), f"after of {jid}"
        for jid, gpus in (self.want_gpus or {}).items():
            assert _first(starts[jid]["allocation"])["gpus"] == gpus, f"gpus of {jid}"
        for jid, cards in (self.want_shard_gpus or {}).items():
            assert _first(starts[jid]["allocation"])["shard_gpus"] == cards, f"shard cards of {jid}"
        for jid, ids in (self.want_cpu_ids or {}).items():
            assert {n: a.get("cpu_ids") for n, a in starts[jid]["allocation"].items()} == ids, f"cpu ids of {jid}"
        for jid, charge in (self.want_charge or {}).items():
            assert _rounded(starts[jid]["charge"]) == charge, f"charge of {jid}"
        for acct, share in (self.want_fair_share or {}).items():
            assert out.fair_share[acct] == share, f"fair share of {acct}"

    def verify(self, passes: list[str] | None = None) -> Outcome:
        """outcome() and check(); returns the outcome for a table's own extra assertions."""
        out = self.outcome(passes)
        self.check(out)
        return out


FIELD_DOCS = {f.name: f.metadata.get("doc", "") for f in fields(Scenario)}


def _first(alloc: dict) -> dict:
    return next(iter(alloc.values()))


def _rounded(charge: dict) -> dict:
    return {"tres": {k: round(v, 6) for k, v in charge["tres"].items()},
            "parts": [[t, c, ct, round(sh, 6)] for t, c, ct, sh in charge["parts"]]}


def ids(cases: list[Scenario]) -> list[str]:
    return [c.id for c in cases]
