"""batchd.accounting.borrow against a plain segment-by-segment reference on random cases
(pure: no database)."""

from __future__ import annotations

import random

import pytest

from batchd.accounting.borrow import borrowing, node_intervals, over_quota, up_steps


def reference(runs, quota, t0, start, upto, capacity):
    """Every segment between two breakpoints, every account, straight from the rules."""
    cuts = {start, upto, min(upto, max(start, t0)) if t0 is not None else upto}
    cuts |= {min(max(t, start), upto) for _, s, e, _, _ in runs for t in (s, e)}
    cuts |= {min(max(t, start), upto) for t, _ in capacity}
    cuts = sorted(cuts)
    accts = sorted({r[0] for r in runs} | set(quota))
    bor = dict.fromkeys(accts, 0.0)
    lent = dict.fromkeys(accts, 0.0)
    for a, b in zip(cuts, cuts[1:], strict=False):
        active = t0 is not None and a >= t0
        q = {x: (quota.get(x, 0.0) if active or quota.get(x, 0.0) < 0 else 0.0) for x in accts}
        held = {x: sum(n for acct, s, e, n, _ in runs if acct == x and s <= a < e) for x in accts}
        cap = sum(c for t, c in capacity if t <= a)
        over = {x: 0.0 if q[x] < 0 else max(0.0, held[x] - q[x]) for x in accts}
        unused = {x: 0.0 if q[x] < 0 else max(0.0, q[x] - held[x]) for x in accts}
        guaranteed = sum(max(0.0, v) for v in quota.values()) if active else 0.0
        rest = max(0.0, sum(over.values()) - max(0.0, cap - guaranteed))
        u = sum(unused.values())
        for x in accts:
            bor[x] += over[x] * (b - a)
            if u > 0:
                lent[x] += min(rest, u) * unused[x] / u * (b - a)
    return bor, lent


@pytest.mark.parametrize("seed", range(60))
def test_sweep_equals_the_reference(seed):
    rng = random.Random(seed)
    start, upto = 1000, 1000 + rng.randrange(200, 5000)
    runs = []
    for _ in range(rng.randrange(0, 30)):
        s = rng.randrange(start - 300, upto + 100)
        runs.append((rng.choice("abcd"), s, s + rng.randrange(1, 2000), float(rng.choice([1, 2, 4, 8, 0.25])), {}))
    quota = {x: float(rng.choice([0, 2, 4, 6, -1])) for x in rng.sample("abce", rng.randrange(0, 5))}
    t0 = rng.choice([None, start - 50, start + rng.randrange(0, upto - start)])
    capacity = [(rng.randrange(start - 100, upto), float(rng.choice([4, 8, 16]))) for _ in range(rng.randrange(0, 3))]
    capacity += [(t + rng.randrange(1, 2000), -c) for t, c in capacity if rng.random() < 0.3]
    want_b, want_l = reference(runs, quota, t0, start, upto, capacity)
    got_b, got_l = borrowing(runs, quota, t0, start, upto, capacity)
    for x in want_b:
        assert got_b.get(x, 0.0) == pytest.approx(want_b[x], abs=1e-6), (x, runs, quota)
        assert got_l.get(x, 0.0) == pytest.approx(want_l[x], abs=1e-6), (x, runs, quota)
    # the same runs given as per-account edges (as the store reads them)
    edges = {}
    for a, s, e, n, _ in sorted(runs, key=lambda r: r[0]):
        edges.setdefault(a, {})
        for t, d in ((s, n), (e, -n)):
            edges[a][t] = edges[a].get(t, 0.0) + d
    edges2 = {a: (sorted(d), [d[t] for t in sorted(d)]) for a, d in edges.items()}
    got_b2, got_l2 = borrowing([], quota, t0, start, upto, capacity, edges2)
    for x in want_b:
        assert got_b2.get(x, 0.0) == pytest.approx(want_b[x], abs=1e-6)
        assert got_l2.get(x, 0.0) == pytest.approx(want_l[x], abs=1e-6)
    ov = over_quota([(a, s, e, n) for a, s, e, n, _ in runs], {x: v for x, v in quota.items()}, t0, start, upto)
    for x, v in ov.items():
        assert v == pytest.approx(want_b[x], abs=1e-6)


def test_node_intervals_follow_registration_and_states():
    hist = [("n1", 100.0, [{"type": "h200", "count": 2}], [(100.0, "IDLE"), (200.0, "DRAIN"), (300.0, "IDLE")]),
            ("n2", 500.0, [{"type": "h200", "count": 4}], [(500.0, "DOWN")])]
    cap = {"gres/gpu": 2.0}

    def ncap(gpus):
        return {"gres/gpu": float(sum(g["count"] for g in gpus))}

    iv = node_intervals(hist, 0, 1000, ncap)
    assert iv == [(100, 200, False, cap), (200, 300, True, cap), (300, 1000, False, cap),
                  (500, 1000, True, {"gres/gpu": 4.0})]
    assert up_steps(iv) == [(100, 2.0), (200, -2.0), (300, 2.0), (1000, -2.0)]


@pytest.mark.parametrize("seed", range(60))
def test_by_hour_equals_the_reference(seed):
    """borrowing_by_hour (hour sums where they are exact, a sweep elsewhere) on runs over
    several hours, some rolled up (given as hour bounds, hourly use and edges on demand),
    some not (given whole)."""
    from collections import defaultdict

    from batchd.accounting.borrow import borrowing_by_hour
    from batchd.accounting.charge import split_hours

    rng = random.Random(1000 + seed)
    start = 3600 * 100
    upto = start + 3600 * rng.randrange(1, 12) + rng.choice([0, 0, rng.randrange(1, 3600)])
    runs = []
    for _ in range(rng.randrange(0, 25)):
        s = rng.randrange(start - 7200, upto + 3600)
        runs.append((rng.choice("abcd"), s, s + rng.randrange(60, 4 * 3600), float(rng.choice([1, 2, 4, 8, 0.25])), {}))
    rolled = [r for r in runs if rng.random() < 0.7]
    extra = [r for r in runs if r not in rolled]
    quota = {x: float(rng.choice([0, 2, 4, 6, 8, -1])) for x in rng.sample("abce", rng.randrange(0, 5))}
    t0 = rng.choice([None, start - 50, start + rng.randrange(0, upto - start)])
    capacity = [(rng.randrange(start - 100, upto), float(rng.choice([4, 8, 16]))) for _ in range(rng.randrange(0, 3))]
    bounds = defaultdict(lambda: [0.0, 0.0])
    for a, s, e, n, _ in rolled:
        for i, t in ((0, s), (1, e)):
            if t - t % 3600 >= start:
                bounds[(t - t % 3600, a)][i] += n
    used = defaultdict(float)
    for a, s, e, n, _ in runs:
        for h, secs in split_hours(max(s, start), min(e, upto)):
            used[(a, h)] += n * secs

    def fetch(hours, accounts):
        out = defaultdict(list)
        for a, s, e, n, _ in rolled:
            for t, d in ((s, n), (e, -n)):
                if t - t % 3600 in hours and (accounts is None or a in accounts):
                    out[a].append((t, d))
        return dict(out)

    want_b, want_l = reference(runs, quota, t0, start, upto, capacity)
    got_b, got_l = borrowing_by_hour({k: tuple(v) for k, v in bounds.items()}, dict(used), extra, quota, t0,
                                     start, upto, capacity, fetch)
    for x in want_b:
        assert got_b.get(x, 0.0) == pytest.approx(want_b[x], abs=1e-6), (x, runs, quota, t0)
        assert got_l.get(x, 0.0) == pytest.approx(want_l[x], abs=1e-6), (x, runs, quota, t0)
