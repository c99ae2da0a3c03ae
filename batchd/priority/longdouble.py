"""Exact emulation of the x87 80-bit ``long double`` Slurm's Fair Tree computes in.

Fair Tree ranks siblings by Level FS = S / U, where S (normalised shares) is a C
``double`` and U (usage / parent usage) a ``long double``; two Level FS values that are
mathematically equal can differ in their last bit, and Slurm's ranking follows the
bits (test24.4: 40/170 / 20/110 ranks below 50/170 / 25/110). Exact rationals would
tie them, float64 alone may order them differently; rounding every intermediate
result to a 64-bit significand (round half to even), as the x87 unit does, gives
Slurm's order.

Values are ``Fraction`` (exact) rounded to representable long doubles. Only finite,
non-negative values occur here (usage and shares are never negative); subnormals are
not modelled (the exponent range of long double is far beyond what usage reaches).
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["ld", "ld_div", "dbl"]

_MANT_BITS = 64
_ZERO = Fraction(0)


def _round(x: Fraction, bits: int) -> Fraction:
    n, d = x.numerator, x.denominator
    if n == 0:
        return _ZERO
    neg = n < 0
    if neg:
        n = -n
    if d & (d - 1) == 0 and n.bit_length() <= bits:
        return x  # representable already (a double, or an earlier result)
    # exponent e such that 2**(bits-1) <= x * 2**-e < 2**bits
    e = n.bit_length() - d.bit_length() - bits
    while True:
        scaled_n, scaled_d = (n, d << e) if e >= 0 else (n << -e, d)
        q, r = divmod(scaled_n, scaled_d)
        if q.bit_length() > bits:
            e += 1
            continue
        if q.bit_length() < bits:
            e -= 1
            continue
        break
    twice = 2 * r
    if twice > scaled_d or (twice == scaled_d and q & 1):
        q += 1  # may carry to 2**bits, still exactly representable
    m = -q if neg else q
    return Fraction(m << e) if e >= 0 else Fraction(m, 1 << -e)


def ld(x: Fraction | int | float) -> Fraction:
    """``x`` rounded to the nearest long double (64-bit significand, ties to even)."""
    return _round(Fraction(x), _MANT_BITS)


def dbl(x: Fraction | int | float) -> float:
    """``x`` rounded to the nearest double (the C cast ``(double)``; +-inf beyond range)."""
    try:
        return float(Fraction(x))
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


def ld_div(a: Fraction | int | float, b: Fraction | int | float) -> Fraction:
    """``a / b`` computed in long double: operands and result rounded to long double."""
    return ld(ld(a) / ld(b))
