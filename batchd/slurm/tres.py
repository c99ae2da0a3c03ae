"""TRES names, `TRESBillingWeights` and the TRES strings Slurm prints.

Pure and cheap to import (standard library only): the daemon, the scheduler, the
accounting code and the Slurm-named commands all use it.

TRES dictionaries
-----------------
A job's trackable resources are a ``dict[str, float]`` keyed by Slurm TRES names, all
lower case: ``cpu``, ``mem`` (MiB), ``node``, ``energy``, ``billing``, ``gres/gpu`` (all
GPUs, a MIG slice counting as its fraction of a card), ``gres/gpu:TYPE`` (only that
type, e.g. ``gres/gpu:h200``; a MIG profile is a type, e.g. ``gres/gpu:1g.24gb``, and
each instance counts 1), ``gres/shard``, ``license/NAME``, ``bb/NAME``... Counts are job
totals (all nodes), never per node.

Billing weights
---------------
``parse_billing_weights("CPU=1.0,Mem=0.25G,GRES/gpu=2.0,GRES/gpu:h200=4.0")`` reads
Slurm's ``TRESBillingWeights`` syntax: a comma list of ``TYPE[/NAME]=FLOAT[UNIT]``, the
type case-insensitive (cpu, mem, node, energy, gres, license, bb, fs, vmem, pages;
``billing`` is refused, as Slurm refuses to weight billing by itself). The optional unit
K|M|G|T|P divides the weight by 1024 per step above the TRES's base unit: the base unit
of ``mem`` and ``bb`` is MiB, so ``Mem=0.25G`` is 0.25 per GiB and ``Mem=0.25`` is 0.25
per MiB; ``Mem=1K`` is treated like ``Mem=1M`` (Slurm's quirk, kept); other TRES have no
base unit, so ``CPU=1K`` is 1 per 1024 CPUs.

Modes (Slurm's ``PriorityFlags``; pass them as ``priority_flags="MAX_TRES"``):

* SUM (default): ``billing = sum(count[t] * w[t])``.
* ``MAX_TRES``: ``max(count*w over cpu, mem, node and every gres/*) + sum(others)``
  (others: licenses, burst buffers, energy, fs, vmem, pages).
* ``MAX_TRES_GRES``: ``max(count*w over cpu, mem, node) + sum(gres/*) + sum(others)``.

Without any weight the billing is the CPU count, as in Slurm.

Deliberate difference from Slurm: a typed GPU weight **replaces** the generic
``GRES/gpu`` weight for the GPUs of that type. Slurm adds both when a job names the
type (a known trap: ``GRES/gpu=2,GRES/gpu:h200=4`` bills an h200 at 6). Here the generic
weight applies only to the part of ``gres/gpu`` that no weighted type accounts for.
Each unit of a weighted type removes its share of a card from the generic count: 1 for
a whole-GPU type, and for a MIG profile the fraction given in ``gpu_fraction`` or,
failing that, ``slices/7`` read from the profile name (``2g.35gb`` -> 2/7, the
A100/H100/H200 layout; pass ``gpu_fraction`` for other layouts such as 4-slice cards).
MIG profiles and ``gres/shard`` are weighted as their own types.

TRES strings
------------
``format_tres`` writes ReqTRES/AllocTRES as Slurm does: TRES id order
(``cpu,mem,energy,node,billing,fs/disk,vmem,pages``, then ``gres/gpu``, the typed GPUs
sorted by name, other GRES, licenses, burst buffers), or alphabetical as sacct prints
it; memory with the largest exact unit (``16G``, ``1500M``); billing truncated to an
integer; zero counts left out (sacct sorts the ``name=value`` items as strings,
so ``gres/gpu:h200=2`` comes before ``gres/gpu=2``). ``parse_tres`` reads such a string back.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from batchd.slurm.memunits import format_mem

__all__ = [
    "BillingWeights",
    "parse_billing_weights",
    "billing",
    "format_tres",
    "parse_tres",
    "normalize_tres_name",
    "tres_sort_key",
]

# TRES types Slurm knows; those in _NAMED need a "/name" part.
_TYPES = ("cpu", "mem", "node", "energy", "billing", "gres", "license", "bb", "fs", "vmem", "pages")
_NAMED = ("gres", "license", "bb", "fs")
_MIB_BASED = ("mem", "bb")
_UNITS = {"K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
# The "node-local" TRES that MAX_TRES takes the maximum over (besides gres/*).
_MAX_GROUP = ("cpu", "mem", "node")
# Slurm's fixed TRES ids 1..8, the order of scontrol's strings.
_ID_ORDER = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")
_FLOAT_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([A-Za-z]?)$")
_MIG_RE = re.compile(r"(?:^|[_:])(\d+)g\.\d+gb$")
_MODES = ("sum", "max_tres", "max_tres_gres")


@dataclass(frozen=True)
class BillingWeights:
    """Parsed ``TRESBillingWeights``.

    ``weights`` maps a lower-case TRES name to its weight per base unit (per MiB for
    ``mem``/``bb``, per unit otherwise). ``mode`` is ``"sum"``, ``"max_tres"`` or
    ``"max_tres_gres"``. An empty mapping means "no weights": billing = CPUs.
    """

    weights: dict[str, float] = field(default_factory=dict)
    mode: str = "sum"

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"unknown billing mode {self.mode!r} (expected one of {', '.join(_MODES)})")


def normalize_tres_name(name: str) -> str:
    """``"GRES/gpu:H200"`` -> ``"gres/gpu:h200"``: TRES names compare case-insensitively."""
    return name.strip().lower()


def _mode_from_flags(priority_flags: str) -> str:
    flags = {f.strip().upper() for f in priority_flags.split(",") if f.strip()}
    if "MAX_TRES_GRES" in flags:
        return "max_tres_gres"
    if "MAX_TRES" in flags:
        return "max_tres"
    return "sum"


def parse_billing_weights(s: str, priority_flags: str = "") -> BillingWeights:
    """Parse a ``TRESBillingWeights`` string (see the module docstring).

    ``priority_flags`` is Slurm's ``PriorityFlags`` list; ``MAX_TRES`` or
    ``MAX_TRES_GRES`` in it select those modes, other flags are ignored here.
    An empty or blank string gives no weights (billing = CPU count).
    Raises ``ValueError`` naming the bad item.
    """
    weights: dict[str, float] = {}
    for raw in (s or "").split(","):
        item = raw.strip()
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"TRESBillingWeights: {item!r} is not TYPE=WEIGHT")
        key, _, val = item.partition("=")
        key = normalize_tres_name(key)
        typ, slash, name = key.partition("/")
        if typ not in _TYPES:
            raise ValueError(f"TRESBillingWeights: unknown TRES type {key.partition('/')[0]!r} in {item!r}")
        if typ == "billing":
            raise ValueError("TRESBillingWeights: billing cannot be weighted")
        if typ in _NAMED and not (slash and name):
            raise ValueError(f"TRESBillingWeights: {typ!r} needs a name, e.g. {typ.upper()}/NAME, in {item!r}")
        if typ not in _NAMED and slash:
            raise ValueError(f"TRESBillingWeights: {typ!r} takes no name in {item!r}")
        m = _FLOAT_RE.match(val.strip())
        if not m:
            raise ValueError(f"TRESBillingWeights: bad weight {val!r} for {key}")
        w = float(m.group(1))
        if not math.isfinite(w):
            raise ValueError(f"TRESBillingWeights: weight for {key} is not finite")
        unit = m.group(2).upper()
        if unit:
            if unit not in _UNITS:
                raise ValueError(f"TRESBillingWeights: unknown unit {m.group(2)!r} for {key} (K, M, G, T or P)")
            steps = _UNITS[unit]
            if typ in _MIB_BASED:
                steps = max(steps - _UNITS["M"], 0)  # base MiB; K is taken as M (Slurm's quirk)
            w /= 1024.0 ** steps
        if key in weights:
            raise ValueError(f"TRESBillingWeights: {key} given twice")
        weights[key] = w
    return BillingWeights(weights, _mode_from_flags(priority_flags))


def _mig_fraction(typed_key: str) -> float | None:
    m = _MIG_RE.search(typed_key)
    return int(m.group(1)) / 7.0 if m else None


def _items(weights: BillingWeights, tres: dict[str, float],
           gpu_fraction: dict[str, float] | None) -> list[tuple[str, float]]:
    """(tres name, weighted amount) for every weighted TRES the job has."""
    w = weights.weights
    counts = {normalize_tres_name(k): float(v) for k, v in tres.items() if v}
    fractions = {normalize_tres_name(k): float(v) for k, v in (gpu_fraction or {}).items()}
    out: list[tuple[str, float]] = []
    covered = 0.0  # GPUs of gres/gpu billed through their own typed weight
    for name, count in counts.items():
        if name == "billing" or name == "gres/gpu":
            continue
        if name.startswith("gres/gpu:") and name in w:
            frac = fractions.get(name)
            if frac is None:
                frac = _mig_fraction(name)
            covered += count * (1.0 if frac is None else frac)
        if name in w:
            out.append((name, count * w[name]))
    if "gres/gpu" in counts and "gres/gpu" in w:
        generic = max(counts["gres/gpu"] - covered, 0.0)
        out.append(("gres/gpu", generic * w["gres/gpu"]))
    return out


def _part_items(weights: BillingWeights, tres: dict[str, float],
                parts: list[tuple[str, float, str, float]]) -> list[tuple[str, float]]:
    """(tres name, weighted amount) with the GPUs given as parts `(tres, count, card type,
    share of such cards)`: each part is weighted by its own TRES's weight (a whole card's
    type, a MIG profile, `gres/shard`), else its share by the weight of its card's type,
    else its share by the generic `gres/gpu` weight (batchd.slurm.gres)."""
    w = weights.weights
    out: list[tuple[str, float]] = []
    for k, v in tres.items():
        name = normalize_tres_name(k)
        if not v or name == "billing" or name.startswith("gres/gpu") or name == "gres/shard" or "@" in name:
            continue
        if name in w:
            out.append((name, float(v) * w[name]))
    for key, count, card_type, share in parts:
        name = normalize_tres_name(key)
        card = normalize_tres_name(f"gres/gpu:{card_type}") if card_type else ""
        if name in w:
            out.append((name, float(count) * w[name]))
        elif card in w:
            out.append((card, float(share) * w[card]))
        elif "gres/gpu" in w:
            out.append(("gres/gpu", float(share) * w["gres/gpu"]))
    return out


def billing(weights: BillingWeights, tres: dict[str, float],
            gpu_fraction: dict[str, float] | None = None,
            parts: list[tuple[str, float, str, float]] | None = None) -> float:
    """The billing rate (billing units) of a job with ``tres`` (job totals, mem in MiB).

    A double, unrounded: fair-share usage accrues ``billing * seconds``; the integer in
    AllocTRES is ``int(billing)``. ``parts``, the GPU parts of an allocation's charge
    (``batchd.slurm.gres.Charge.billing_parts``), weight the GPUs by the one rule of the GPU
    model (a part's own weight, else its card type's weight times its share, else the
    generic ``gres/gpu`` weight times its share); without them (a pending request)
    ``gpu_fraction`` optionally maps a typed GPU TRES (MIG profile) to its share of a
    whole card, for the typed-replaces-generic rule.
    """
    if not weights.weights:
        return float(tres.get("cpu", 0.0) or 0.0)
    items = _part_items(weights, tres, parts) if parts is not None else _items(weights, tres, gpu_fraction)
    if weights.mode == "sum":
        return sum(v for _, v in items)
    if weights.mode == "max_tres":
        in_max = [v for k, v in items if k in _MAX_GROUP or k.startswith("gres/")]
        rest = [v for k, v in items if not (k in _MAX_GROUP or k.startswith("gres/"))]
    else:  # max_tres_gres
        in_max = [v for k, v in items if k in _MAX_GROUP]
        rest = [v for k, v in items if k not in _MAX_GROUP]
    return (max(in_max) if in_max else 0.0) + sum(rest)


def tres_sort_key(name: str) -> tuple[int, str]:
    """Sort key giving Slurm's TRES id order (cpu, mem, energy, node, billing, ...,
    gres/gpu, gres/gpu:TYPE sorted, other gres, licenses, burst buffers)."""
    if name in _ID_ORDER:
        return (_ID_ORDER.index(name), "")
    if name == "gres/gpu":
        return (100, "")
    if name.startswith("gres/gpu:"):
        return (101, name)
    if name.startswith("gres/"):
        return (102, name)
    if name.startswith("license/"):
        return (103, name)
    if name.startswith("bb/"):
        return (104, name)
    return (105, name)


def _fmt_count(v: float) -> str:
    if v == int(v):
        return str(int(v))
    return f"{v:.4f}".rstrip("0").rstrip(".")


def format_tres(tres: dict[str, float], billing: float | None, *, alphabetical: bool = False) -> str:
    """Slurm's TRES string, e.g. ``cpu=4,mem=16G,node=1,billing=9,gres/gpu=2,gres/gpu:h200=2``.

    ``billing`` (when not None) replaces any ``billing`` key of ``tres`` and is
    truncated to an integer. Order is TRES id order (scontrol), or alphabetical
    (``alphabetical=True``, as sacct's AllocTRES/ReqTRES). Zero counts are omitted,
    except billing, which is shown whenever given.
    """
    vals = {normalize_tres_name(k): float(v) for k, v in tres.items()
            if v and normalize_tres_name(k) != "billing" and "@" not in k}  # no card-share keys
    if billing is not None:
        vals["billing"] = float(math.trunc(billing))
    elif tres.get("billing"):
        vals["billing"] = float(math.trunc(float(tres["billing"])))
    out = []
    for k in sorted(vals, key=tres_sort_key):
        if k == "billing" and billing is not None:
            out.append(f"billing={int(vals[k])}")
        elif k == "mem":
            out.append(f"mem={format_mem(vals[k])}")
        else:
            out.append(f"{k}={_fmt_count(vals[k])}")
    if alphabetical:
        out.sort()  # sacct sorts the whole "name=value" items: gres/gpu:h200=2 before gres/gpu=2
    return ",".join(out)


def parse_tres(s: str) -> dict[str, float]:
    """Read a TRES string (``cpu=4,mem=16G,gres/gpu:h200=2``) into a dict.

    ``mem`` (and ``bb/*``) come back in MiB (``16G`` -> 16384, ``500M`` -> 500,
    ``1024K`` -> 1); other counts accept K|M|G|T|P as powers of 1024. Names are lower
    case. Raises ``ValueError`` on a malformed item.
    """
    out: dict[str, float] = {}
    for raw in (s or "").split(","):
        item = raw.strip()
        if not item:
            continue
        key, eq, val = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"TRES string: {item!r} is not NAME=COUNT")
        key = normalize_tres_name(key)
        m = _FLOAT_RE.match(val.strip())
        if not m:
            raise ValueError(f"TRES string: bad count {val!r} for {key}")
        v = float(m.group(1))
        unit = m.group(2).upper()
        if unit:
            if unit not in _UNITS:
                raise ValueError(f"TRES string: unknown unit {m.group(2)!r} for {key}")
            steps = _UNITS[unit]
            if key == "mem" or key.startswith("bb/"):
                steps -= _UNITS["M"]
            v *= 1024.0 ** steps
        out[key] = v
    return out
