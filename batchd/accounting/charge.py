"""What one run of a job is charged for, and how a run is cut into hours. Pure, standard
library only; the rollup and the per-job check of the report both use these rules, so
that the sum over accounts and the sum over jobs follow the same arithmetic.

Rules:

- Times are whole seconds: a run covers [floor(start), floor(end)) (as Slurm counts).
- `charge_counts(tres, billing)` turns a usage record's TRES (job totals) into the
  counts that are rolled up: every TRES as recorded, plus `billing`; a run whose GPUs
  carry no type at all gets them as `gres/gpu:gpu` (the controller's name for a GPU of
  unknown type; it types every GPU it allocates, MIG slices by profile). `gres/gpu` itself is rolled up for
  GPU-hours but never charged: each GPU is charged once, through its type.
- `unit_price(book, tres, t)` is the price per unit-second at t as an exact Fraction:
  the TRES's own price; for a GPU type or MIG profile without one, the `gres/gpu`
  price times its share of a card (a MIG profile `Ng.*` counts N/7); `mem` prices are
  per GiB; `gres/gpu` itself and TRES without a price cost nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from batchd.accounting.prices import HOUR_S, PriceBook

_MIG_RE = re.compile(r"(?:^|[_:])(\d+)g\.\d+gb$")
UNTYPED_GPU = "gres/gpu:gpu"
NOT_CHARGED = frozenset({"gres/gpu", "gpu_busy", "gpu_measured"})
CENT = Decimal("0.01")


def mig_share(gpu_type: str) -> Fraction:
    """Share of a whole card a GPU type stands for: 1, or N/7 for a MIG profile `Ng.*`."""
    m = _MIG_RE.search(gpu_type)
    return Fraction(int(m.group(1)), 7) if m else Fraction(1)


def gpu_type_of(tres: dict[str, float]) -> str:
    """The GPU type a run used: its typed GPU TRES with the largest count (ties: name
    order), "gpu" for untyped GPUs, "" for a CPU-only run."""
    typed = sorted((k for k, v in tres.items() if k.startswith("gres/gpu:") and v),
                   key=lambda k: (-float(tres[k]), k))
    if typed:
        return typed[0].split(":", 1)[1]
    return "gpu" if tres.get("gres/gpu") else ""


def charge_counts(tres: dict[str, Any], billing: float) -> dict[str, float]:
    """The counts rolled up for one run (see the module docstring). Zero counts are dropped."""
    out: dict[str, float] = {}
    for k, v in tres.items():
        key = k.strip().lower()
        if key == "billing" or not v:
            continue
        out[key] = float(v)
    if out.get("gres/gpu") and not any(k.startswith("gres/gpu:") for k in out):
        out[UNTYPED_GPU] = out["gres/gpu"]
    if billing:
        out["billing"] = float(billing)
    return out


def run_seconds(start_time: float, end_time: float) -> tuple[int, int]:
    """A run's whole-second interval [floor(start), floor(end)); end never before start."""
    s, e = math.floor(start_time), math.floor(end_time)
    return s, max(s, e)


def split_hours(start_s: int, end_s: int) -> Iterator[tuple[int, int]]:
    """(hour start, seconds in that hour) for [start_s, end_s), in time order. UTC hours
    also cut days and months exactly."""
    t = start_s
    while t < end_s:
        hour = t - t % HOUR_S
        nxt = min(hour + HOUR_S, end_s)
        yield hour, nxt - t
        t = nxt


def unit_price(book: PriceBook, tres: str, t: float) -> Fraction | None:
    """Price of one unit of `tres` for one second at unix time t (exact), or None."""
    if tres in NOT_CHARGED:
        return None
    p = book.at(tres, t)
    factor = Fraction(1)
    if p is None and tres.startswith("gres/gpu:"):
        p = book.at("gres/gpu", t)
        factor = mig_share(tres.split(":", 1)[1])
    if p is None:
        return None
    if tres == "mem":
        factor /= 1024
    return Fraction(p) * factor / HOUR_S


def to_money(x: Fraction | Decimal | int) -> Decimal:
    """Round an exact amount to cents, half up."""
    if isinstance(x, Fraction):
        d = Decimal(x.numerator) / Decimal(x.denominator)
        # enough digits for any bill: quantize the exact quotient at 28 significant digits
        return d.quantize(CENT, rounding=ROUND_HALF_UP)
    return Decimal(x).quantize(CENT, rounding=ROUND_HALF_UP)
