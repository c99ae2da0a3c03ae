"""C printf behaviours the Slurm tables rely on, for sshare and sprio output."""

from __future__ import annotations

import math

__all__ = ["c_f", "c_double_field", "cut_field"]


def c_f(x: float, prec: int = 6) -> str:
    """C's ``%.<prec>f``: ``inf``/``-inf``/``nan`` spelled as glibc does."""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if math.isnan(x):
        return "nan" if math.copysign(1.0, x) > 0 else "-nan"
    return f"{x:.{prec}f}"


def _c_e(x: float, width: int, prec: int) -> str:
    if math.isinf(x) or math.isnan(x):
        return c_f(x).rjust(width)
    return f"{x:{width}.{max(prec, 0)}e}"


def c_double_field(x: float, width: int, right: bool) -> str:
    """Slurm's print_fields_double cell body (no trailing space): ``%*f``, or when that
    is wider than the column, ``%*.*e`` with the precision shrunk to fit."""
    s = c_f(x)
    if len(s) <= width:
        return s.rjust(width) if right else s.ljust(width)
    w = width
    e = _c_e(x, w, w)
    if len(e) > w:
        w -= len(e) - w
    e = _c_e(x, w, w)
    return e.rjust(w) if right else e.ljust(w)


def cut_field(s: str, width: int, right: bool) -> str:
    """Slurm's print_fields_str cell body: longer than the column -> cut, last char '+'."""
    if width <= 0:
        return s
    if len(s) > width:
        s = s[: width - 1] + "+"
    return s.rjust(width) if right else s.ljust(width)
