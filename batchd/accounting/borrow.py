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

import bisect
import functools
import itertools
import math
import operator
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
              capacity: list[tuple[int, float]],
              edges: dict[str, tuple[list[int], list[float]]] | None = None
              ) -> tuple[dict[str, float], dict[str, float]]:
    """(borrowed, lent) GPU-seconds per account over [start, upto) by the module's rules.
    `quota`: account -> GPUs (negative = no quota); accounts not in it have 0. The runs
    come as `runs` and/or as `edges` (account -> (times, count changes), as
    `accounting.gpu_edges` reads them). The sweep is written as whole-list passes
    (sorts, accumulate, comprehensions): a month of a busy cluster has millions of edges."""
    t0i = upto if t0 is None else min(upto, max(start, math.ceil(t0)))
    per: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for acct, (ts, ds) in (edges or {}).items():
        per[acct][0].extend(ts)
        per[acct][1].extend(ds)
    unsorted: set[str] = set()
    for acct, s, e, n, _typed in runs:
        if n and e > s:
            tl, dl = per[acct]
            tl += (s, e)
            dl += (n, -n)
            unsorted.add(acct)
    for a in quota:
        per[a]  # noqa: B018 - an account with a quota and no run still lends
    # per account: held after each edge, and the changes of over/unused quota it makes
    g_t: list[int] = []
    g_db: list[float] = []
    g_du: list[float] = []
    acct_data: dict[str, tuple[list[int], list[float], float]] = {}
    borrowed: dict[str, float] = {}
    for acct, (tl, dl) in per.items():
        q = quota.get(acct, 0.0)
        if acct in unsorted or not edges:
            order = sorted(range(len(tl)), key=tl.__getitem__)
            tl, dl = [tl[i] for i in order], [dl[i] for i in order]
        # clip to [start, upto): edges before start move to start, after upto to upto
        i, j = bisect.bisect_left(tl, start), bisect.bisect_right(tl, upto)
        if i:
            tl[:i] = [start] * i
        if j < len(tl):
            tl[j:] = [upto] * (len(tl) - j)
        k = bisect.bisect_left(tl, t0i)  # the quota starts at t0i: a segment of its own
        times = [start, *tl[:k], t0i, *tl[k:], upto]
        deltas = [0.0, *dl[:k], 0.0, *dl[k:], 0.0]
        k0 = k + 1
        held = list(itertools.accumulate(deltas))
        if q < 0:  # no quota: never borrows, never lends
            over = [0.0] * len(times)
            unused = over
        else:
            qs = [0.0] * k0 + [q] * (len(times) - k0)
            over = [h - x if h - x > EPS else 0.0 for h, x in zip(held, qs, strict=True)]
            unused = [x - h if x - h > EPS else 0.0 for h, x in zip(held, qs, strict=True)]
        dts = list(map(operator.sub, times[1:], times[:-1]))
        borrowed[acct] = math.fsum(map(operator.mul, over, dts))
        g_t += times
        g_db += map(operator.sub, over, [0.0] + over[:-1])
        g_du += map(operator.sub, unused, [0.0] + unused[:-1])
        acct_data[acct] = (times, unused, q)
    # the whole cluster: B(t), U(t), F(t) and X(t) = integral of min(R, U) / U
    f_t, f_v = _free_steps(capacity, quota, t0i, start, upto)
    g_t += f_t  # F changes: the rate changes there too
    g_db += [0.0] * len(f_t)
    g_du += [0.0] * len(f_t)
    order = sorted(range(len(g_t)), key=g_t.__getitem__)
    gt = [g_t[i] for i in order]
    big_b = list(itertools.accumulate(g_db[i] for i in order))
    big_u = list(itertools.accumulate(g_du[i] for i in order))
    free = [f_v[j] for j in map(functools.partial(bisect.bisect_right, f_t), gt)]
    xs = [(min(b - f, u) / u if b - f > EPS else 0.0) if u > EPS else 0.0
          for b, u, f in zip(big_b, big_u, free, strict=True)]
    xcum = list(itertools.accumulate(map(operator.mul, xs, map(operator.sub, gt[1:] + [upto], gt)), initial=0.0))
    x_at = dict(zip(gt, xcum, strict=False))  # X(t); equal times have equal X (no time between them)
    lent: dict[str, float] = {}
    for acct, (times, unused, _q) in acct_data.items():
        xa = [x_at[t] for t in times]
        lent[acct] = math.fsum(map(operator.mul, unused, map(operator.sub, xa[1:], xa[:-1])))
    return borrowed, lent


EPS = 1e-9


def _free_steps(capacity: list[tuple[int, float]], quota: dict[str, float], t0i: int, start: int,
                upto: int) -> tuple[list[int], list[float]]:
    """F(t) = max(0, C(t) - guaranteed quotas(t)) as sorted change times and the value
    from each on (F before the first time: index 0 holds the value before any change)."""
    changes: dict[int, float] = defaultdict(float)
    for t, c in capacity:
        changes[max(start, min(t, upto))] += c
    qsum = sum(max(0.0, v) for v in quota.values())
    times = sorted(set(changes) | {t0i})
    vals = [0.0]
    c = 0.0
    for t in times:
        c += changes.get(t, 0.0)
        vals.append(max(0.0, c - (qsum if t >= t0i else 0.0)))
    return times, vals


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


def borrowing_by_hour(bounds: dict[tuple[int, str], tuple[float, float]], used: dict[tuple[str, int], float],
                      extra: list[GpuRun], quota: dict[str, float], t0: float | None, start: int, upto: int,
                      capacity: list[tuple[int, float]],
                      fetch_edges: Callable[[list[int], set[str] | None], dict[str, list[tuple[int, float]]]]
                      ) -> tuple[dict[str, float], dict[str, float]]:
    """`borrowing`, hour by hour where that is exact, to the second elsewhere (`start`
    on a whole hour). Inputs: `bounds` {(hour, account): (count of the GPUs of rolled-up
    runs starting in that hour, of those ending in it)} for every hour from `start` on
    (after the period too: every rolled-up run has ended, so what is held at `start` is
    what ends later minus what starts later); `used` {(account, hour): GPU-seconds} of all
    runs; `extra` the runs not rolled up (any count); `fetch_edges(hours, accounts)` the
    edges (time, change) of rolled-up runs inside those hours, per account (of those
    accounts; None: all).

    In an hour an account holds between lo = held at the hour's start minus what ends in
    it and hi = held at the start plus what starts in it. hi <= quota: it borrows nothing
    and leaves q x 3600 - used unused; lo >= quota: it borrows used - q x 3600 and leaves
    nothing unused; else its hour is swept to the second, alone. Lending: none where the
    borrowing cannot exceed the free capacity or no quota can be unused; where the least
    borrowing beyond the free capacity covers all quota that can be unused, every unused
    second is lent (the rate is 1); otherwise, and in the hours where the first node
    registers, the capacity changes or the period ends, all accounts are swept together."""
    t0i = upto if t0 is None else min(upto, max(start, math.ceil(t0)))
    up: dict[tuple[int, str], float] = defaultdict(float)
    dn: dict[tuple[int, str], float] = defaultdict(float)
    held0: dict[str, float] = defaultdict(float)
    for (h, a), (u, d) in bounds.items():
        held0[a] += d - u
        if h < upto:
            up[(h, a)] += u
            dn[(h, a)] += d
    for a, s, e, n, _ty in extra:
        if min(e, upto) <= max(s, start) or not n:
            continue
        if s < start:  # held from the start on, like a rolled-up run started before it
            held0[a] += n
        else:
            up[(s - s % 3600, a)] += n
        if e < upto:
            dn[(e - e % 3600, a)] += n
    accts = sorted(set(held0) | set(quota) | {a for _h, a in up})
    f_t, f_v = _free_steps(capacity, quota, t0i, start, upto)
    held = dict(held0)
    at_start: dict[int, dict[str, float]] = {}
    together: list[int] = []  # hours swept with every account
    alone: dict[str, list[tuple[int, float, bool]]] = defaultdict(list)  # account: (hour, quota, lent all unused)
    borrowed = dict.fromkeys(accts, 0.0)
    lent = dict.fromkeys(accts, 0.0)
    for h in range(start, upto, 3600):
        at_start[h] = dict(held)
        end = h + 3600
        odd = end > upto or h < t0i < end or any(h < t < end for t in f_t)
        bmax = bmin = umax = 0.0
        states = []
        for a in accts:
            n0 = held.get(a, 0.0)
            u, d = up.get((h, a), 0.0), dn.get((h, a), 0.0)
            held[a] = n0 + u - d
            q = quota.get(a, 0.0)
            if q < 0:
                continue
            q = q if h >= t0i else 0.0
            lo, hi = n0 - d, n0 + u
            if hi <= q + EPS:
                umax += q - lo
                states.append((a, q, "under"))
            elif lo >= q - EPS:
                bmax += hi - q
                bmin += lo - q
                states.append((a, q, "over"))
            else:
                bmax += hi - q
                umax += q - lo
                states.append((a, q, "mixed"))
        free = f_v[bisect.bisect_right(f_t, h)]
        lends = bmax > free + EPS and umax > EPS
        saturated = lends and bmin - free >= umax - EPS
        if odd or (lends and not saturated):
            together.append(h)
            continue
        for a, q, st in states:
            use = used.get((a, h), 0.0)
            if st == "over":
                borrowed[a] += max(0.0, use - q * 3600)
            elif st == "under":
                if saturated:
                    lent[a] += max(0.0, q * 3600 - use)
            else:
                alone[a].append((h, q, saturated))
    if not together and not alone:
        return borrowed, lent
    hours = sorted(set(together) | {h for v in alone.values() for h, _q, _s in v})
    inner = fetch_edges(hours, None if together else set(alone))
    for a, s, e, n, _ty in extra:
        for t, d in ((s, n), (e, -n)):
            if n and start <= t < upto:
                inner.setdefault(a, []).append((t, d))
    sorted_edges = {a: sorted(v) for a, v in inner.items()}
    edge_times = {a: [t for t, _ in v] for a, v in sorted_edges.items()}

    def between(a: str, wa: int, wb: int) -> tuple[list[int], list[float]]:
        ts, evs = edge_times.get(a, []), sorted_edges.get(a, [])
        i, j = bisect.bisect_left(ts, wa), bisect.bisect_left(ts, wb)
        return ts[i:j], [d for _, d in evs[i:j]]

    for a, hrs in alone.items():
        for h, q, all_lent in hrs:
            ts, ds = between(a, h, h + 3600)
            n, t_prev, over_s, unused_s = at_start[h].get(a, 0.0), h, 0.0, 0.0
            for t, d in zip([*ts, h + 3600], [*ds, 0.0], strict=True):
                over_s += max(0.0, n - q) * (t - t_prev)
                unused_s += max(0.0, q - n) * (t - t_prev)
                n, t_prev = n + d, t
            borrowed[a] += over_s
            if all_lent:
                lent[a] += unused_s
    windows: list[tuple[int, int]] = []
    for h in together:
        if windows and windows[-1][1] == h:
            windows[-1] = (windows[-1][0], min(h + 3600, upto))
        else:
            windows.append((h, min(h + 3600, upto)))
    for wa, wb in windows:
        edges: dict[str, tuple[list[int], list[float]]] = {}
        for a in accts:
            ts, ds = between(a, wa, wb)
            edges[a] = ([wa, *ts], [at_start[wa].get(a, 0.0), *ds])
        b, le = borrowing([], quota, t0, wa, wb, capacity, edges)
        for a in accts:
            borrowed[a] += b.get(a, 0.0)
            lent[a] += le.get(a, 0.0)
    return borrowed, lent
