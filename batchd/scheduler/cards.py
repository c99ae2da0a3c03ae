"""Shards on cards and CPU ids of one node: the per-device bookkeeping of placement (pure).

gres/shard belongs to cards: a node's `shards` are split evenly over its whole (non-MIG)
GPUs (the remainder to the lowest indices), and per node a job's shards all come from one
card (Slurm's default: a shard request must fit one GPU), reported as `"shard_gpus": [index]`.
A card is idle, shared (some shards in use: its whole slot is in neither `free` nor `rel`,
so no whole-GPU job gets it) or held whole (its shards are not offered). Shards go to the
shared card with the fewest idle shards that fits, then to an idle card (packing keeps whole
cards whole). A card whose shard users are all being preempted becomes a releasing whole
slot; shards released by a victim can be taken again on the same card. A card released
whole by a victim does not offer shards in that cycle (the next cycle sees it idle). A node
with shards but no whole GPU keeps them in one pool without a card (`CARDLESS`).

CPU ids: a node's CPUs are ids `0..cpus-1`; a take gets as many ids as its CPU count (rounded
up), from the idle ids for the idle part and from ids being released for the releasing part,
preferring the ids local to the take's GPUs (the inventory's per-GPU `"cpus"`, NVML's ideal
CPU affinity; for a MIG instance its parent's, for shards their card's), then the lowest.
A running job whose stored allocation has no `cpu_ids` (made before ids existed) holds its
CPUs by count only: it was started unpinned, so no choice of ids would describe it, and the
count check keeps the node from being overcommitted (its CPUs are never handed out twice by
count; new jobs may get ids that it also runs on, as before).
"""

from __future__ import annotations

import math
from typing import Any

EPS = 1e-9
#: Card key of a node's shards when the node has no whole GPU to tie them to.
CARDLESS = -1


def shard_caps(spec: Any) -> dict[int, float]:
    """Shards per card, as the node's inventory (batchd.slurm.gres) splits them: evenly over its
    whole GPUs in device order, the remainder to the first ones; {CARDLESS: shards} without
    whole GPUs; {} without shards."""
    inv = spec.inventory
    if inv.cardless_shards:
        return {CARDLESS: float(inv.cardless_shards)}
    return {c.index: float(c.shards) for c in inv.cards if c.shards}


def gpu_cpu_map(raw_gpus: list, ncpus: int) -> dict[int, frozenset[int]]:
    """GPU index -> the CPU ids local to it (the inventory's `"cpus"`), ids outside the node dropped."""
    out: dict[int, frozenset[int]] = {}
    for g in raw_gpus:
        if isinstance(g, dict) and isinstance(g.get("index"), int) and isinstance(g.get("cpus"), list):
            ids = frozenset(c for c in g["cpus"] if isinstance(c, int) and 0 <= c < ncpus)
            if ids:
                out[g["index"]] = ids
    return out


def sync_card(node: Any, k: int) -> None:
    """Put card `k`'s whole slot where its shard use says: in `free` when none of its
    shards is in use or being released, in `rel` when all those in use are being
    released, else in neither (a shared card is not free for whole-GPU jobs)."""
    if k == CARDLESS or k not in node.card_free:
        return
    slot = node.slots[k]
    rel = node.card_rel.get(k, 0.0)
    active = node.card_cap[k] - node.card_free[k] - rel > EPS
    want = None if active else ("rel" if rel > EPS else "free")
    lst = node.free.setdefault(slot.type, [])
    rl = node.rel.setdefault(slot.type, [])
    in_free = slot in lst
    in_rel = slot in rl
    if in_free and want != "free":
        lst.remove(slot)
    if in_rel and want != "rel":
        rl.remove(slot)
        node.rel_owner.pop(k, None)
    if want == "free" and not in_free:
        insert_slot(lst, slot)
    elif want == "rel" and not in_rel:
        insert_slot(rl, slot)
        node.rel_owner[k] = node.card_owners[k][0]


def hold_card(node: Any, tk: Any, s: Any) -> None:
    """Slot `s` is taken whole: its card offers no shards while `tk` holds it."""
    k = s.key
    if k in node.card_free:
        tk.cards.append((k, node.card_free.pop(k), node.card_rel.pop(k, 0.0), node.card_owners.pop(k, [])))
        for o in tk.cards[-1][3]:
            if o not in tk.rel_jobs:
                tk.rel_jobs.append(o)


def take_shards(node: Any, tk: Any, amount: float, allow_rel: bool) -> None:
    """`amount` shards from one card: the shared card with the fewest idle shards that fits,
    then an idle card; with `allow_rel`, else a card counting the shards being released on it."""
    best = None
    best_key: tuple = ()
    cap = node.card_cap
    rel = node.card_rel
    for k, f in node.card_free.items():
        if f + EPS >= amount:
            key = (f >= cap[k] - EPS and not rel.get(k), f)
            if best is None or key < best_key:
                best, best_key = k, key
    if best is None and allow_rel and rel:
        for k, f in node.card_free.items():
            r = rel.get(k, 0.0)
            if r > 0 and f + r + EPS >= amount and (best is None or f + r < best_key[0]):
                best, best_key = k, (f + r,)
    if best is None:
        tk.short = True
        return
    f = node.card_free[best]
    use = min(max(f, 0.0), amount)
    node.card_free[best] = f - use
    tk.shard = use
    rest = amount - use
    if rest > EPS:
        rel[best] = rel[best] - rest
        tk.shard_rel = rest
        for o in node.card_owners.get(best, ()):
            if o not in tk.rel_jobs:
                tk.rel_jobs.append(o)
    tk.shard_card = best
    sync_card(node, best)


def _count(x: float) -> int:
    return int(math.ceil(x - EPS)) if x > EPS else 0


def _local_cpus(node: Any, tk: Any) -> frozenset[int] | set[int]:
    cards = set()
    for s in tk.idle_slots:
        cards.add(s.key if s.whole else int(str(s.key).split(":", 1)[0]))
    for s, _ in tk.rel_slots:
        cards.add(s.key if s.whole else int(str(s.key).split(":", 1)[0]))
    if tk.shard_card is not None:
        cards.add(tk.shard_card)
    out: set[int] = set()
    for c in cards:
        out |= node.gpu_cpus.get(c, frozenset())
    return out


def _pick_ids(pool: list[int], n: int, prefer: frozenset[int] | set[int]) -> list[int]:
    """Remove and return `n` ids of the ascending `pool`: those in `prefer` first, then the lowest."""
    if n <= 0 or not pool:
        return []
    if n >= len(pool):
        got = pool[:]
        pool.clear()
        return got
    if prefer:
        first = [c for c in pool if c in prefer]
        if first:
            got = first[:n]
            if len(got) < n:
                got += [c for c in pool if c not in prefer][:n - len(got)]
                got.sort()
            chosen = set(got)
            pool[:] = [c for c in pool if c not in chosen]
            return got
    got = pool[:n]
    del pool[:n]
    return got


def take_cpu_ids(node: Any, tk: Any) -> None:
    n_idle, n_rel = _count(tk.cpu), _count(tk.cpu_rel)
    if not (n_idle or n_rel):
        return
    prefer = _local_cpus(node, tk) if node.gpu_cpus else frozenset()
    if n_rel:
        tk.cpu_ids_rel = _pick_ids(node.cpu_ids_rel, n_rel, prefer)
        n_idle += n_rel - len(tk.cpu_ids_rel)  # releasing count without ids (stored without them)
    tk.cpu_ids = _pick_ids(node.cpu_ids, n_idle, prefer)


def place_stored_shards(claims: list[tuple[Any, int | None]]) -> None:
    """Put the shards of running jobs (`claims`: [(take, stored card or None)]) on their
    cards, once every whole GPU of every running job is adopted.

    Shards stored with their card (`shard_gpus`, or `shard_gpu` as the controller wrote
    it before the scheduler chose cards) go there. Shards stored without a card (older
    allocations) go where a new job's would (`_take_shards`' choice), or, when no card
    has room, on the card not held whole with the most idle shards: they are never
    handed out twice. Shards on a card held whole, or on a node with no card left, are
    still charged to their job but sit on no card."""
    later = []
    for tk, card in claims:
        node = tk.node
        if card is None or card not in node.card_cap:
            later.append(tk)
        elif card in node.card_free:
            node.card_free[card] -= tk.shard
            tk.shard_card = card
            sync_card(node, card)
    for tk in later:
        node = tk.node
        amount = tk.shard
        take_shards(node, tk, amount, False)
        if tk.short and node.card_free:
            card = max(node.card_free, key=lambda k: (node.card_free[k], -k))
            node.card_free[card] -= amount
            tk.shard_card = card
            sync_card(node, card)
        tk.shard, tk.short = amount, False


def insert_slot(lst: list, s: Any) -> None:
    i = len(lst)
    while i > 0 and lst[i - 1].order > s.order:
        i -= 1
    lst.insert(i, s)


