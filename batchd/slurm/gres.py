"""The GPU model: what a node offers (whole cards, MIG instances, shards of a card) and what
an allocation holds and is charged for. Pure, standard library only, and the one place these
rules live: the scheduler's quota and limit checks, the charge the controller records
(AllocTRES, billing, fair-share usage, usage records, sacct, sshare) and the report's
GPU-hours, cost and idle capacity all read them from here.

Inventory (a node's `gpus` list, in either form of the snapshot format: `{"type", "count"}`
or devices `{"index", "uuid", "type", "mig": [{"profile", "uuid"}], "slices", "cpus"}`):

- A card with MIG instances is offered only as its instances, never whole. An instance
  counts its **share of its card**: its compute slices over the card's slices.
- The card's slices: the device's `"slices"` (NVML: its largest GPU-instance profile), else
  4 for RTX PRO / A30 class type names (containing `rtx` or `a30`), else 7 (A100/H100/H200).
- A profile's compute slices: `Nc.Mg.SIZE` (a compute instance inside an M-slice GPU
  instance) -> N, `Mg.SIZE` -> M, anything else -> 1. Counting a compute instance by its
  own slices keeps the instances of one card at most the whole card.
- A node's `gres/shard` units are split evenly over its whole cards in index order (the
  remainder to the first cards); one shard is 1/(shards of its card) of that card.

Charge of an allocation (`Charge`): the Slurm TRES (`cpu`, `mem` MiB, `node`, `gres/gpu` =
the sum of card shares held, `gres/gpu:TYPE` = whole cards, `gres/gpu:PROFILE` = MIG
instances, `gres/shard` = shards) and one `GpuPart` per kind of device held, which says what
card it is part of and what share of such cards it is. The **record** form (usage records,
`jobs.charge`) adds, for MIG and shard parts, a card-share key `"gres/gpu:CARD@KIND"` = the
share of CARD cards held as KIND (a MIG profile, or `shard`): `"gres/gpu:rtxpro6000@1g.24gb":
0.25`, `"gres/gpu:h200@shard": 0.5`. The report prices those at the card's price where the
profile (or `gres/shard`) has no price of its own, and counts them as used card time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

GPU = "gres/gpu"
TYPED = "gres/gpu:"
SHARD = "gres/shard"
SHARE_SEP = "@"
_PROFILE = re.compile(r"^(?:[A-Za-z0-9]+[_-])?(?:(\d+)c\.)?(\d+)g\.[^.]+$")


def card_slices(gpu_type: str, given: Any = None) -> int:
    """Slices of a whole card: `given` (the inventory's `"slices"`) when a positive integer,
    else 4 for RTX PRO / A30 class type names, else 7."""
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given
    t = gpu_type.lower()
    return 4 if ("rtx" in t or "a30" in t) else 7


def profile_slices(profile: str) -> int:
    """Compute slices of a MIG profile name: `1g.24gb` -> 1, `3g.40gb` -> 3, `1c.3g.40gb` -> 1
    (a compute instance of a 3-slice GPU instance), a vendor-prefixed `h200_2g.35gb` -> 2;
    1 when the name says nothing."""
    m = _PROFILE.match(profile.strip())
    if not m:
        return 1
    return int(m.group(1) or m.group(2)) or 1


def instance_share(profile: str, slices: int) -> float:
    """The share of its card a MIG instance of `profile` counts for, on a card of `slices`."""
    return min(1.0, profile_slices(profile) / slices) if slices > 0 else 1.0


@dataclass(frozen=True, slots=True)
class MigInstance:
    uuid: str
    profile: str
    share: float


@dataclass(frozen=True, slots=True)
class Card:
    """One physical GPU. `mig`: its instances (a card with any is never offered whole);
    `shards`: the gres/shard units it offers (0 on a MIG card); `cpus`: CPU ids local to it."""
    index: int
    type: str
    uuid: str | None = None
    slices: int = 7
    mig: tuple[MigInstance, ...] = ()
    shards: int = 0
    cpus: frozenset[int] | None = None

    @property
    def whole(self) -> bool:
        return not self.mig


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """A node's GPU inventory. `cardless_shards`: shards of a node with no whole card (they
    belong to no card and count no card share)."""
    cards: tuple[Card, ...] = ()
    cardless_shards: int = 0

    def card(self, index: int) -> Card | None:
        for c in self.cards:
            if c.index == index:
                return c
        return None

    def instance(self, uuid: str) -> tuple[Card, MigInstance] | None:
        for c in self.cards:
            for m in c.mig:
                if m.uuid == uuid:
                    return c, m
        return None

    def capacity(self) -> dict[str, float]:
        """What the node offers, in charge keys: `gres/gpu` (cards), `gres/gpu:TYPE` (whole
        cards), `gres/gpu:PROFILE` (instances) with `gres/gpu:TYPE@PROFILE` (their card share),
        `gres/shard`. A whole card's shards are part of its `gres/gpu:TYPE` unit."""
        cap: dict[str, float] = {}
        for c in self.cards:
            _add(cap, GPU, 1.0)
            if c.whole:
                _add(cap, TYPED + c.type, 1.0)
                if c.shards:
                    _add(cap, SHARD, float(c.shards))
            for m in c.mig:
                _add(cap, TYPED + m.profile, 1.0)
                _add(cap, share_key(c.type, TYPED + m.profile), m.share)
        if self.cardless_shards:
            _add(cap, SHARD, float(self.cardless_shards))
        return {k: _clean(v) for k, v in cap.items()}


def _add(d: dict[str, float], k: str, v: float) -> None:
    d[k] = d.get(k, 0.0) + v


def parse_node_gpus(raw: Any, shards: int = 0) -> NodeGpus:
    """The typed inventory of a node from its `gpus` list (either form) and its total
    `gres/shard` units. Raises ValueError naming the entry on a malformed one."""
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ValueError("gpus: must be a list")
    cards: list[Card] = []
    nxt = 0
    seen: set[int] = set()
    for i, g in enumerate(raw):
        if not isinstance(g, dict):
            raise ValueError(f"gpus[{i}]: must be an object")
        gtype = g.get("type")
        if not isinstance(gtype, str) or not gtype:
            raise ValueError(f"gpus[{i}].type: must be a non-empty string")
        if "count" in g and "index" not in g:
            n = g.get("count")
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError(f"gpus[{i}].count: must be an integer >= 0")
            for _ in range(n):
                cards.append(Card(nxt, gtype, slices=card_slices(gtype)))
                seen.add(nxt)
                nxt += 1
            continue
        idx = g.get("index", nxt)
        if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
            raise ValueError(f"gpus[{i}].index: must be an integer >= 0")
        if idx in seen:
            raise ValueError(f"gpus[{i}].index: duplicate GPU index {idx}")
        seen.add(idx)
        nxt = max(nxt, idx + 1)
        slices = card_slices(gtype, g.get("slices"))
        mig = g.get("mig") or []
        if not isinstance(mig, list):
            raise ValueError(f"gpus[{i}].mig: must be a list")
        insts = []
        for k, m in enumerate(mig):
            if not isinstance(m, dict) or not isinstance(m.get("profile"), str) or not isinstance(m.get("uuid"), str):
                raise ValueError(f"gpus[{i}].mig[{k}]: must be an object with a profile and a uuid")
            insts.append(MigInstance(m["uuid"], m["profile"], instance_share(m["profile"], slices)))
        cpus = g.get("cpus")
        cpuset = frozenset(c for c in cpus if isinstance(c, int)) if isinstance(cpus, list) else None
        uuid = g.get("uuid") if isinstance(g.get("uuid"), str) else None
        cards.append(Card(idx, gtype, uuid, slices, tuple(insts), 0, cpuset))
    return _with_shards(cards, shards)


def _with_shards(cards: list[Card], shards: int) -> NodeGpus:
    whole = [i for i, c in enumerate(cards) if c.whole]
    if shards <= 0:
        return NodeGpus(tuple(cards))
    if not whole:
        return NodeGpus(tuple(cards), shards)
    q, r = divmod(int(shards), len(whole))
    out = list(cards)
    for n, i in enumerate(whole):
        c = out[i]
        out[i] = Card(c.index, c.type, c.uuid, c.slices, c.mig, q + (1 if n < r else 0), c.cpus)
    return NodeGpus(tuple(out))


def whole_cards(raw: Any) -> int:
    """Cards of an inventory that can be handed out whole (what gres/shard divides); 0 for
    an inventory that does not parse."""
    try:
        return sum(1 for c in parse_node_gpus(raw).cards if c.whole)
    except ValueError:
        return 0


# ---------------------------------------------------------------------------------- charges

def share_key(card_type: str, tres: str) -> str:
    """The card-share key of `tres` (`gres/gpu:PROFILE` or `gres/shard`) on CARD cards."""
    kind = "shard" if tres == SHARD else tres[len(TYPED):]
    return f"{TYPED}{card_type}{SHARE_SEP}{kind}"


def split_share_key(key: str) -> tuple[str, str]:
    """(card type, TRES held) of a card-share key: `gres/gpu:h200@shard` -> ("h200",
    "gres/shard"), `gres/gpu:rtxpro6000@1g.24gb` -> ("rtxpro6000", "gres/gpu:1g.24gb")."""
    head, _, kind = key.partition(SHARE_SEP)
    card = head[len(TYPED):] if head.startswith(TYPED) else head
    return card, (SHARD if kind == "shard" else TYPED + kind)


@dataclass(frozen=True, slots=True)
class GpuPart:
    """Devices of one kind held: `tres` (`gres/gpu:TYPE`, `gres/gpu:PROFILE` or
    `gres/shard`), how many (`count`), the type of card they are part of and the share of
    such cards they make together (`share`; whole cards: = count)."""
    tres: str
    count: float
    card_type: str
    share: float

    @property
    def share_key(self) -> str | None:
        """The record's card-share key, for parts that are not whole cards."""
        if self.tres == TYPED + self.card_type:
            return None
        return share_key(self.card_type, self.tres)


@dataclass(slots=True)
class Charge:
    """What an allocation is charged for (see the module docstring). `tres` holds job
    totals over all nodes; `parts` one entry per (TRES, card type)."""
    tres: dict[str, float] = field(default_factory=dict)
    parts: list[GpuPart] = field(default_factory=list)

    def add_part(self, tres: str, count: float, card_type: str, share: float) -> None:
        if not count:
            return
        for i, p in enumerate(self.parts):
            if p.tres == tres and p.card_type == card_type:
                self.parts[i] = GpuPart(tres, p.count + count, card_type, p.share + share)
                break
        else:
            self.parts.append(GpuPart(tres, count, card_type, share))
        _add(self.tres, tres, count)
        _add(self.tres, GPU, share)

    def record(self) -> dict[str, float]:
        """The record form: the TRES plus a card-share key per MIG or shard part."""
        out = {k: _clean(v) for k, v in self.tres.items() if v}
        for p in self.parts:
            k = p.share_key
            if k is not None and p.share:
                out[k] = _clean(out.get(k, 0.0) + p.share)
        return out

    def billing_parts(self) -> list[tuple[str, float, str, float]]:
        return [(p.tres, p.count, p.card_type, p.share) for p in self.parts]

    def to_json(self) -> dict[str, Any]:
        return {"tres": {k: _clean(v) for k, v in self.tres.items() if v},
                "parts": [[p.tres, _clean(p.count), p.card_type, _clean(p.share)] for p in self.parts]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Charge:
        """The inverse of `to_json`."""
        parts = [GpuPart(str(t), float(c), str(ct), float(sh)) for t, c, ct, sh in d.get("parts") or []]
        return cls({str(k): float(v) for k, v in (d.get("tres") or {}).items()}, parts)

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Charge:
        """A charge read back from its record form (or from a plain TRES dict of an older
        record: whole typed GPUs become parts of their type; MIG and shard keys without a
        card-share key become parts of an unknown card, type "")."""
        ch = cls()
        shares: dict[str, tuple[str, float]] = {}
        for k, v in rec.items():
            if SHARE_SEP in k:
                ctype, base = split_share_key(k)
                shares[base] = (ctype, float(v))
        for k, v in rec.items():
            if SHARE_SEP in k or k == "billing":
                continue
            v = float(v)
            if k == GPU:
                continue
            if k.startswith(TYPED) or k == SHARD:
                if k in shares:
                    ctype, sh = shares[k]
                    ch.parts.append(GpuPart(k, v, ctype, sh))
                elif k.startswith(TYPED) and not is_profile(k[len(TYPED):]):
                    ch.parts.append(GpuPart(k, v, k[len(TYPED):], v))
                else:
                    ch.parts.append(GpuPart(k, v, "", 0.0))
            ch.tres[k] = v
        if GPU in rec:
            ch.tres[GPU] = float(rec[GPU])
        return ch


def is_profile(name: str) -> bool:
    """Whether a GPU type name is a MIG profile (`1g.24gb`, `1c.3g.40gb`, `h200_2g.35gb`)."""
    return bool(_PROFILE.match(name))


def _clean(x: float) -> float:
    r = round(x, 9)
    return float(int(r)) if r == int(r) else r


def charge_of_allocation(allocation: Mapping[str, Any], nodes: Mapping[str, NodeGpus]) -> Charge:
    """The charge of a stored allocation (`{node: {"tasks", "gpus", "cpus", "memory_mb",
    "shards", "shard_gpus"}}`) against the nodes' inventories. GPUs are indices or
    `"<index>:<mig uuid>"` (or a bare card or instance uuid); a device or node the inventory no longer has counts as one
    whole card of type "gpu" (it was held; its kind is unknown)."""
    ch = Charge()
    for name, a in allocation.items():
        if not isinstance(a, Mapping):
            continue
        inv = nodes.get(name) or NodeGpus()
        _add(ch.tres, "cpu", float(a.get("cpus", 0) or 0))
        _add(ch.tres, "mem", float(a.get("memory_mb", 0) or 0))
        _add(ch.tres, "node", 1.0)
        for g in a.get("gpus") or []:
            s = str(g)
            whole = inv.card(int(s)) if s.isascii() and s.isdigit() else _card_by_uuid(inv, s)
            if whole is not None and whole.whole:
                ch.add_part(TYPED + whole.type, 1.0, whole.type, 1.0)
                continue
            hit = inv.instance(s.split(":", 1)[1] if ":" in s else s)
            if hit is not None:
                card, m = hit
                ch.add_part(TYPED + m.profile, 1.0, card.type, m.share)
                continue
            ch.add_part(TYPED + "gpu", 1.0, "gpu", 1.0)
        n = float(a.get("shards", 0) or 0)
        if n:
            cards = a.get("shard_gpus")
            on = inv.card(cards[0]) if isinstance(cards, list) and cards and isinstance(cards[0], int) else None
            if on is None:  # stored without its card: the first card that offers shards
                on = next((c for c in inv.cards if c.shards), None)
            if on is not None and on.shards:
                ch.add_part(SHARD, n, on.type, n / on.shards)
            else:
                ch.add_part(SHARD, n, "", 0.0)
    return ch


def _card_by_uuid(inv: NodeGpus, uuid: str) -> Card | None:
    return next((c for c in inv.cards if c.uuid is not None and c.uuid == uuid), None)


def node_inventories(nodes: Iterable[Any], shard_per_gpu: int = 0) -> dict[str, NodeGpus]:
    """name -> NodeGpus for stored nodes (objects with `name` and `gpus`) or snapshot node
    dicts (`{"name", "gpus", "shards"}`); `shard_per_gpu` applies where a node does not say
    its shards. A node whose inventory does not parse has none."""
    out: dict[str, NodeGpus] = {}
    for n in nodes:
        if isinstance(n, Mapping):
            name, gpus, shards = n.get("name"), n.get("gpus"), n.get("shards")
        else:
            name, gpus, shards = n.name, n.gpus, None
        try:
            if shards is None:
                shards = shard_per_gpu * whole_cards(gpus) if shard_per_gpu else 0
            out[str(name)] = parse_node_gpus(gpus, int(shards or 0))
        except (ValueError, TypeError):
            out[str(name)] = NodeGpus()
    return out


def shard_card(alloc_node: dict) -> int | None:
    """The card a gres/shard allocation's shards are on: `shard_gpus[0]` (a job's shards
    on one node all come from one card), or the older single `shard_gpu`; None when it
    names none or names it in a form that is not an index."""
    cards = alloc_node.get("shard_gpus")
    c = cards[0] if isinstance(cards, list) and cards else alloc_node.get("shard_gpu")
    if isinstance(c, str) and c.isascii() and c.isdigit():
        c = int(c)
    return c if c.__class__ is int else None
