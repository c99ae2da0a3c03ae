"""Borrowed and lent GPU-time, and the capacity that existed, moment by moment. Pure:
standard library only; `batchd.accounting.report` reads the inputs from the store.

Rules (docs/report.md, "Quota, borrowing and capacity"):

- Capacity exists from a node's first registration on (`nodes.registered`), with the
  node's current GPU inventory. A node is *down* while its state (`node_events`) is
  DOWN or DRAIN: its GPU-time then counts as down, not idle.
- An account's quota `q` (`gres/gpu` quota, GPUs) is guaranteed only while the cluster
  has capacity: from the first node registration `t0` on; before it, the quota is 0.
- held_a(t) = the `gres/gpu` count of the account's runs open at t (whole seconds, as
  charged). borrowed_a = integral of max(0, held_a(t) - q_a(t)) dt; an account without
  a quota (or unknown) has q = 0, one with a negative quota (no quota) never borrows.
- Lent: at each moment the total borrowed B(t) is served first from the capacity no
  account is guaranteed, F(t) = max(0, C(t) - sum of quotas) with C(t) the `gres/gpu`
  capacity of registered nodes that are not down; the rest R(t) = max(0, B(t) - F(t))
  from the unused quota of the accounts, U_a(t) = max(0, q_a(t) - held_a(t)), pro rata:
  lent_a(t) = min(R(t), U(t)) x U_a(t) / U(t), U(t) = sum of U_a(t).
  lent_gpu_hours = integral of lent_a(t) dt.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from batchd.accounting.charge import split_hours

DOWN_STATES = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL"})

# (account, start_s, end_s, gres/gpu count, {gpu type: count})
GpuRun = tuple[str, int, int, float, dict[str, float]]
NodeHistory = tuple[str, float, list[Any], list[tuple[float, str]]]


def node_intervals(history: Iterable[NodeHistory], start: int, upto: int,
                   node_capacity: Callable[[list[Any]], dict[str, float]]
                   ) -> list[tuple[int, int, bool, dict[str, float]]]:
    """[(a, b, down, capacity)] of every node, clipped to [start, upto): the stretches of
    time it existed, each up or down, with the node's capacity ({tres: count})."""
    out: list[tuple[int, int, bool, dict[str, float]]] = []
    for _name, registered, gpus, events in history:
        cap = node_capacity(gpus)
        if not cap:
            continue
        t = max(start, math.ceil(registered))
        state_at = [(math.ceil(et), st.upper() in DOWN_STATES) for et, st in events]
        down = False
        for et, d in state_at:  # the state in force at t
            if et <= t:
                down = d
        cuts = [(et, d) for et, d in state_at if t < et < upto]
        for et, d in cuts + [(upto, down)]:
            if et > t:
                out.append((t, et, down, cap))
                t = et
            down = d
    return out


def capacity_by_hour(intervals: list[tuple[int, int, bool, dict[str, float]]]
                     ) -> tuple[dict[tuple[int, str], float], dict[tuple[int, str], float]]:
    """Per (hour, tres): the capacity-seconds that existed, and those down."""
    have: dict[tuple[int, str], float] = defaultdict(float)
    down: dict[tuple[int, str], float] = defaultdict(float)
    for a, b, is_down, cap in intervals:
        for h, secs in split_hours(a, b):
            for t, c in cap.items():
                have[(h, t)] += c * secs
                if is_down:
                    down[(h, t)] += c * secs
    return have, down


def up_steps(intervals: list[tuple[int, int, bool, dict[str, float]]]) -> list[tuple[int, float]]:
    """The `gres/gpu` capacity of nodes up, as steps (time, change)."""
    steps: list[tuple[int, float]] = []
    for a, b, is_down, cap in intervals:
        c = cap.get("gres/gpu", 0.0)
        if c and not is_down:
            steps += [(a, c), (b, -c)]
    return steps


def borrowing(runs: Iterable[GpuRun], quota: dict[str, float], t0: float | None, start: int, upto: int,
              capacity: list[tuple[int, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """(borrowed, lent) GPU-seconds per account over [start, upto) by the module's rules.
    `quota`: account -> GPUs (negative = no quota); accounts not in it have 0."""
    t0i = upto if t0 is None else min(upto, max(start, math.ceil(t0)))
    ev: list[tuple[int, int, float]] = []  # (time, kind: 0 capacity / 1 quota start / 2 run, ...)
    names: dict[str, int] = {}
    for acct, s, e, n, _typed in runs:
        s, e = max(s, start), min(e, upto)
        if e <= s or not n:
            continue
        i = names.setdefault(acct, len(names))
        ev.append((s, 2 + i, n))
        ev.append((e, 2 + i, -n))
    for t, c in capacity:
        if start <= t < upto:
            ev.append((t, 0, c))
        elif t < start:
            ev.append((start, 0, c))
    for a in quota:
        names.setdefault(a, len(names))
    ev.append((t0i, 1, 0.0))
    ev.sort(key=lambda x: x[0])
    k = len(names)
    acct_of = list(names)
    qfull = [quota.get(a, 0.0) for a in acct_of]
    q = [0.0 if x >= 0 else -1.0 for x in qfull]  # effective quota now (-1: none)
    held = [0.0] * k
    last = [start] * k
    xlast = [0.0] * k
    bor = [0.0] * k
    lent = [0.0] * k
    B = U = C = Q = X = x = 0.0
    tprev = start

    def over(i: int) -> float:
        return max(0.0, held[i] - q[i]) if q[i] >= 0 else 0.0

    def unused(i: int) -> float:
        return max(0.0, q[i] - held[i]) if q[i] >= 0 else 0.0

    def touch(i: int, t: int) -> None:
        bor[i] += over(i) * (t - last[i])
        lent[i] += unused(i) * (X - xlast[i])
        last[i], xlast[i] = t, X

    for t, kind, v in ev:
        if t > tprev:
            X += x * (t - tprev)
            tprev = t
        if kind >= 2:
            i = kind - 2
            touch(i, t)
            B -= over(i)
            U -= unused(i)
            held[i] += v
            B += over(i)
            U += unused(i)
        elif kind == 0:
            C += v
        else:
            for i in range(k):
                touch(i, t)
                B -= over(i)
                U -= unused(i)
                q[i] = qfull[i] if qfull[i] >= 0 else -1.0
                B += over(i)
                U += unused(i)
            Q = sum(max(0.0, v) for v in qfull)
        free = max(0.0, C - Q)
        rest = max(0.0, B - free)
        x = min(rest, U) / U if U > 1e-12 else 0.0
    if upto > tprev:
        X += x * (upto - tprev)
    for i in range(k):
        touch(i, upto)
    return ({a: bor[i] for i, a in enumerate(acct_of)}, {a: lent[i] for i, a in enumerate(acct_of)})


def over_quota(steps: Iterable[tuple[Any, int, int, float]], quota: dict[Any, float], t0: float | None,
               start: int, upto: int) -> dict[Any, float]:
    """Seconds x count held above the quota per key (an account, or an (account, GPU type)
    pair) over [start, upto): steps are (key, start_s, end_s, count); a key's quota
    counts from t0 (the first node registration) on, 0 before."""
    t0i = upto if t0 is None else min(upto, max(start, math.ceil(t0)))
    ev: dict[Any, list[tuple[int, float]]] = defaultdict(list)
    for key, s, e, n in steps:
        s, e = max(s, start), min(e, upto)
        if e > s and n and key in quota:
            ev[key] += [(s, n), (e, -n)]
    out: dict[Any, float] = {}
    for key, lst in ev.items():
        qv = quota[key]
        if qv < 0:
            out[key] = 0.0
            continue
        lst.append((t0i, 0.0))
        lst.sort(key=lambda x: x[0])
        held, tprev, tot = 0.0, start, 0.0
        for t, n in lst:
            qt = qv if tprev >= t0i else 0.0
            tot += max(0.0, held - qt) * (t - tprev)
            held += n
            tprev = t
        out[key] = tot + max(0.0, held - qv) * (upto - tprev)
    return out
