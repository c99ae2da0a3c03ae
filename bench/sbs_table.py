"""The figures of bench/side_by_side.py and the one table they end in.

A `Row` holds every sample of one figure per target key ("slurm", "sqlite", "pg", "floor",
"null"); a cell shows the median (rates: the median and the range over rounds). Ratios are
*cost* ratios, batchd's cost over the other's (a time or memory over the other's; for a rate,
the other's rate over batchd's): 1.0x is even, 6.0x means batchd takes six times as long.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

BATCHD = ("sqlite", "pg", "batchd")   # target keys that are batchd daemons


@dataclass
class Row:
    figure: str
    unit: str                                   # "s" | "/s" | "MB"
    values: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)   # a cell's text instead of its value
    goal: str = ""                              # the goal, in words
    check: Callable[[Row], bool | None] | None = None    # goal met? None: cannot tell

    def add(self, key: str, value: float) -> None:
        self.values.setdefault(key, []).append(value)

    def med(self, key: str) -> float:
        vals = [v for v in self.values.get(key, []) if not math.isnan(v)]
        return statistics.median(vals) if vals else float("nan")

    def cost(self, key: str) -> float:
        """The median as a cost (higher is worse)."""
        m = self.med(key)
        if self.unit == "/s":
            return 1.0 / m if m and not math.isnan(m) else float("nan")
        return m

    def ratio(self, key: str, other: str) -> float:
        a, b = self.cost(key), self.cost(other)
        if math.isnan(a) or math.isnan(b) or b == 0:
            return float("nan")
        return a / b


def fmt_value(v: float, unit: str) -> str:
    if math.isnan(v):
        return "—"
    if math.isinf(v):
        return "∞"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 0.995 else f"{v:.2f} s"
    if unit == "/s":
        return f"{v:.0f} /s" if v >= 100 else f"{v:.1f} /s"
    if unit == "MB":
        return f"{v:.0f} MB"
    return f"{v:g} {unit}"


def cell(row: Row, key: str) -> str:
    if key in row.notes:
        return row.notes[key]
    vals = [v for v in row.values.get(key, []) if not math.isnan(v)]
    if not vals:
        return "failed" if key in row.values else ""
    text = fmt_value(row.med(key), row.unit)
    if row.unit == "/s" and len(vals) > 1:
        lo, hi = min(vals), max(vals)
        text += f" ({lo:.0f}–{hi:.0f})" if lo >= 100 else f" ({lo:.1f}–{hi:.1f})"
    return text


def fmt_ratio(r: float) -> str:
    return "" if math.isnan(r) else f"{r:.1f}×" if r < 100 else f"{r:.0f}×"


def render(rows: list[Row], keys: list[str]) -> str:
    """The table: figure | Slurm | batchd (per backend) | floor | null daemon | ratios | goal."""
    bkeys = [k for k in keys if k in BATCHD]
    head = ["figure", "Slurm"] + [f"batchd {k}" if k != "batchd" else "batchd" for k in bkeys]
    head += ["floor", "null daemon"]
    head += [f"{k} ÷ Slurm" for k in bkeys] + [f"{k} ÷ floor" for k in bkeys] + ["goal"]
    body = []
    for r in rows:
        if not any(r.values.get(k) for k in keys) and not r.notes:
            continue   # nothing measured (a daemon start with --socket)
        line = [r.figure, cell(r, "slurm")] + [cell(r, k) for k in bkeys] + [cell(r, "floor"), cell(r, "null")]
        line += [fmt_ratio(r.ratio(k, "slurm")) for k in bkeys]
        line += [fmt_ratio(r.ratio(k, "floor")) for k in bkeys]
        ok = r.check(r) if r.check else None
        line.append(f"{r.goal}: {'ok' if ok else 'MISS' if ok is False else '?'}" if r.goal else "")
        body.append(line)
    keep = [i for i in range(len(head)) if i == 0 or any(line[i] for line in body)]
    head = [head[i] for i in keep]
    body = [[line[i] for i in keep] for line in body]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(line) + " |" for line in body]
    return "\n".join(out)


# ---------------------------------------------------------------------- the goals
def each_batchd(test: Callable[[Row, str], bool | None]) -> Callable[[Row], bool | None]:
    """A goal that must hold for every batchd backend measured."""
    def check(row: Row) -> bool | None:
        res = [test(row, k) for k in BATCHD if row.values.get(k)]
        if not res or any(r is None for r in res):
            return None
        return all(res)
    return check


def at_most_floor(times: float) -> Callable[[Row], bool | None]:
    def test(row: Row, k: str) -> bool | None:
        r = row.ratio(k, "floor")
        return None if math.isnan(r) else r <= times
    return each_batchd(test)


def at_most(limit: float) -> Callable[[Row], bool | None]:
    def test(row: Row, k: str) -> bool | None:
        v = row.med(k)
        return False if math.isnan(v) else v <= limit   # every sample failed (refused): missed
    return each_batchd(test)


def rate_at_least(per_backend: dict[str, float]) -> Callable[[Row], bool | None]:
    def test(row: Row, k: str) -> bool | None:
        v = row.med(k)
        return None if math.isnan(v) else v >= per_backend.get(k, per_backend["sqlite"])
    return each_batchd(test)


def par16_goal(row: Row) -> bool | None:
    """>= 90 % of the null daemon's rate, and never below Slurm's / 2."""
    def test(r: Row, k: str) -> bool | None:
        v, null, slurm = r.med(k), r.med("null"), r.med("slurm")
        if math.isnan(v) or math.isnan(null):
            return None
        return v >= 0.9 * null and (math.isnan(slurm) or v >= slurm / 2)
    return each_batchd(test)(row)


def at_most_slurm(row: Row) -> bool | None:
    def test(r: Row, k: str) -> bool | None:
        v, s = r.med(k), r.med("slurm")
        return None if math.isnan(v) or math.isnan(s) else v <= s
    return each_batchd(test)(row)
