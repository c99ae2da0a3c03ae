"""ASCII digit checks for everything that parses numbers from users' text.

`str.isdigit()` is true for characters such as "²" that `int()` refuses, so a check
with it followed by `int()` raises on such input; the daemon and the commands use
`isdigits` instead, which accepts the ASCII digits 0-9 only (as Slurm's C parsers do).
"""


def isdigits(s: str) -> bool:
    """True when `s` is non-empty and made of ASCII digits only."""
    return s.isascii() and s.isdigit()
