"""What one run of a job is charged for, and how a run is cut into hours. Pure, standard
library only; the rollup and the per-job check of the report both use these rules, so
that the sum over accounts and the sum over jobs follow the same arithmetic.

Rules (the GPU model is batchd.slurm.gres's; a usage record's TRES are its charge's record form):

- Times are whole seconds: a run covers [floor(start), floor(end)) (as Slurm counts).
- `charge_counts(tres, billing)` turns a usage record's TRES (job totals) into the
  counts that are rolled up: every TRES as recorded, the card-share keys
  (`gres/gpu:CARD@PROFILE`, `gres/gpu:CARD@shard`) included, plus `billing`; a run whose GPUs
  carry no type at all gets them as `gres/gpu:gpu` (the controller's name for a GPU of
  unknown type). `gres/gpu` itself is rolled up for GPU-hours but never charged: each
  GPU is charged once, through its type or its card share.
- (legacy) a record with a MIG profile but no card-share key for it (written before
  charges were recorded) gets `gres/gpu:@PROFILE` = count x N/7 (`Ng.*`), priced at the
  `gres/gpu` price, as such records were priced before.
- `unit_price(book, tres, t)` is the price per unit-second at t as an exact Fraction:
  a whole card's type, a MIG profile, `gres/shard`, `cpu`, `mem` (per GiB): its own price.
  A card-share key `gres/gpu:CARD@KIND` (its amount is a share of CARD cards held as KIND,
  a MIG profile or `shard`): nothing when `gres/gpu:KIND` (or `gres/shard`) has a price of
  its own (that count is charged), else CARD's price (`gres/gpu:CARD`), else the `gres/gpu`
  price. So a MIG instance or a shard costs its profile's or gres/shard's price
  where one is set, else its card's price times its share. A whole card's type without a price
  of its own costs the `gres/gpu` price. `gres/gpu` itself and TRES without a price cost
  nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from batchd.accounting.prices import PriceBook
from batchd.model import HOUR_S
from batchd.slurm.gres import SHARD, SHARE_SEP, is_profile, profile_slices, share_key, split_share_key

UNTYPED_GPU = "gres/gpu:gpu"
NOT_CHARGED = frozenset({"gres/gpu", "gpu_busy", "gpu_measured"})
CENT = Decimal("0.01")


def legacy_mig_share(gpu_type: str) -> Fraction:
    """The card share records written before charges were recorded were priced at: N/7 for
    a MIG profile `Ng.*` whatever its card, 1 for anything else."""
    return Fraction(profile_slices(gpu_type), 7) if is_profile(gpu_type) else Fraction(1)


def gpu_type_of(tres: dict[str, float]) -> str:
    """The GPU type a run used: its typed GPU TRES with the largest count (ties: name
    order), "shard" for a run of shards only, "gpu" for untyped GPUs, "" for a CPU-only run."""
    typed = sorted((k for k, v in tres.items() if k.startswith("gres/gpu:") and SHARE_SEP not in k and v),
                   key=lambda k: (-float(tres[k]), k))
    if typed:
        return typed[0].split(":", 1)[1]
    if tres.get(SHARD):
        return "shard"
    return "gpu" if tres.get("gres/gpu") else ""


def charge_counts(tres: dict[str, Any], billing: float) -> dict[str, float]:
    """The counts rolled up for one run (see the module docstring). Zero counts are dropped."""
    out: dict[str, float] = {}
    for k, v in tres.items():
        key = k.strip().lower()
        if key == "billing" or not v:
            continue
        out[key] = float(v)
    if out.get("gres/gpu") and not any(k.startswith("gres/gpu:") or k.startswith(SHARD) for k in out):
        out[UNTYPED_GPU] = out["gres/gpu"]
    for k in [k for k in out if k.startswith("gres/gpu:") and is_profile(k[len("gres/gpu:"):])]:
        if not any(SHARE_SEP in o and o.endswith(SHARE_SEP + k[len("gres/gpu:"):]) for o in out):
            # a record written before charges were recorded: its instances' card share by
            # the old N/7 rule, on a card of unknown type (priced at the gres/gpu price)
            out[share_key("", k)] = out[k] * float(legacy_mig_share(k[len("gres/gpu:"):]))
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
    factor = Fraction(1)
    if SHARE_SEP in tres:  # a share of CARD cards held as KEY (batchd.slurm.gres)
        card, key = split_share_key(tres)
        if book.at(key, t) is not None:
            return None  # KEY's own price charges its count
        p = book.at(f"gres/gpu:{card}", t) if card else None
        if p is None:
            p = book.at("gres/gpu", t)
        return Fraction(p) / HOUR_S if p is not None else None
    p = book.at(tres, t)
    if p is None and tres.startswith("gres/gpu:") and not is_profile(tres[len("gres/gpu:"):]):
        p = book.at("gres/gpu", t)  # a whole card of a type without a price of its own
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
