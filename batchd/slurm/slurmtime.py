"""Slurm's time grammars on the command side: `--time`/`--time-min` limits and `--begin`.

Cheap to import (only `time`): sbatch parses every time option with it.

Time limits (`time_limit_s`)
----------------------------
`M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`, and `-1`/`INFINITE`/`UNLIMITED`. The
value is rounded up to whole minutes as Slurm stores it, and returned in seconds:
`-1` means UNLIMITED, `0` too (Slurm treats `--time=0` as "no limit"), `None` means
the text is not a time. Slurm reads the fields with `sscanf("%d-%d:%d:%d")`, so a
leading sign is accepted and lands in the first field (`-t -5` is "minus five days",
which Slurm stores as an unsigned 32-bit minute count: a limit of 2982611-04:17:00).
That quirk is reproduced because the reference shows it.

Begin times (`parse_begin`)
---------------------------
`now[+-]N[seconds|minutes|hours|days|weeks]` (unit abbreviations as Slurm's prefix
match), `today`, `tomorrow`, `midnight`, `noon`, `elevenses`, `fika`, `teatime`,
`HH:MM[:SS][AM|PM]`, `MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`, `YYYY-MM-DD[THH:MM[:SS]]`;
a time of day alone that is already past means tomorrow, a date without year that is
past means next year. Returns unix seconds (local time) or raises `ValueError` whose
first argument is the character position where parsing failed (Slurm prints
`Invalid time specification (pos=N): TEXT`).
"""

import time as _time

from batchd.slurm.digits import isdigits

UINT32 = 1 << 32
INFINITE = -1


def _scan_int(s: str, i: int) -> tuple[int, int] | None:
    """sscanf %d at s[i:]: optional whitespace, sign, digits -> (value, next index) or None."""
    n = len(s)
    while i < n and s[i] in " \t":
        i += 1
    j = i
    if j < n and s[j] in "+-":
        j += 1
    k = j
    while k < n and isdigits(s[k]):
        k += 1
    if k == j:
        return None
    return int(s[i:k]), k


def _scanf(s: str, seps: str) -> list[int]:
    """Read ints separated by the literal characters `seps` (like sscanf); stop at the
    first mismatch. Returns the list of values read."""
    out = []
    i = 0
    for idx in range(len(seps) + 1):
        r = _scan_int(s, i)
        if r is None:
            break
        out.append(r[0])
        i = r[1]
        if idx < len(seps):
            if i < len(s) and s[i] == seps[idx]:
                i += 1
            else:
                break
    return out


def _valid_timespec(s: str) -> bool:
    """Slurm's _is_valid_timespec: digits, at most one '-', colons only after it, at most
    two colons (three fields after the dash)."""
    dash = 0
    colon = 0
    digit = False
    for ch in s:
        if isdigits(ch):
            digit = True
        elif ch == "-":
            if colon or dash:
                return False
            dash += 1
        elif ch == ":":
            colon += 1
        else:
            return False
    return digit and colon <= 2


def time_str2secs(s: str) -> int | None:
    """Seconds for a Slurm duration (no rounding), INFINITE (-1), or None if invalid."""
    if s is None or s == "":
        return None
    if s.upper() in ("-1", "INFINITE", "UNLIMITED"):
        return INFINITE
    if not _valid_timespec(s):
        return None
    if "-" in s:
        v = _scanf(s, "-::") + [0, 0, 0, 0]
        d, h, m, sec = v[:4]
        return d * 86400 + h * 3600 + m * 60 + sec
    v = _scanf(s, "::")
    if len(v) == 3:
        return v[0] * 3600 + v[1] * 60 + v[2]
    v = v + [0, 0]
    return v[0] * 60 + v[1]


def time_limit_s(s: str) -> int | None:
    """A `--time` value in seconds, rounded up to a whole minute; -1 = UNLIMITED (also
    for 0); None when the text is not a time (sbatch then fails with
    `Invalid --time specification`)."""
    secs = time_str2secs(s)
    if secs is None:
        return None
    if secs == INFINITE:
        return INFINITE
    # C integer division truncates toward zero
    q = secs + 59
    mins = abs(q) // 60 * (1 if q >= 0 else -1)
    if mins < 0:
        mins += UINT32
    if mins == 0 or mins == UINT32 - 1:
        return INFINITE
    return mins * 60


def update_time_limit(s: str) -> tuple[str, int] | None:
    """`scontrol update TimeLimit=` text -> (op, seconds): op "=" sets the limit (-1
    UNLIMITED; 0 is a zero limit, which Slurm ends at once), "+" / "-" add to or take from
    the job's current limit (Slurm's relative form, `+30`, `-1:00:00`). Durations are
    rounded up to whole minutes as Slurm stores them. None when the text is not a time
    (scontrol: `Invalid TimeLimit value`). Unlike `--time`, `0` is not UNLIMITED here
    (recorded from Slurm 22.05: TimeLimit=0 shows 00:00:00)."""
    if s is None or s == "":
        return None
    if s.upper() in ("INFINITE", "UNLIMITED"):
        return "=", INFINITE
    op = "="
    if s[0] in "+-":
        op, s = s[0], s[1:]
    if not s or s[0] in "+-":
        return None
    secs = time_str2secs(s)
    if secs is None or secs < 0:
        return None
    return op, (secs + 59) // 60 * 60


def format_duration(secs: int | None) -> str:
    """Seconds as Slurm prints a limit: `UNLIMITED`, `M:SS`... `[D-]HH:MM:SS`."""
    if secs is None or secs < 0:
        return "UNLIMITED"
    d, r = divmod(int(secs), 86400)
    h, r = divmod(r, 3600)
    m, s = divmod(r, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    return f"{h:02d}:{m:02d}:{s:02d}"


_NAMED_TOD = {"midnight": (0, 0), "noon": (12, 0), "elevenses": (11, 0), "fika": (15, 0),
              "teatime": (16, 0)}
_UNITS = (("seconds", 1), ("minutes", 60), ("hours", 3600), ("days", 86400), ("weeks", 604800))


def _unit(word: str) -> int | None:
    """Multiplier for a unit word of `now+N<unit>` (any prefix of seconds, minutes,
    hours, days, weeks; none = seconds), or None."""
    if word == "":
        return 1
    w = word.lower()
    for name, mult in _UNITS:
        if name.startswith(w):
            return mult
    return None


def _mktime(y: int, mo: int, d: int, h: int, mi: int, s: int) -> int:
    return int(_time.mktime((y, mo, d, h, mi, s, 0, 0, -1)))


def _tod(text: str) -> tuple[int, int, int] | None:
    """HH:MM[:SS][AM|PM] -> (h, m, s) or None."""
    t = text.lower()
    ampm = None
    if t.endswith("am") or t.endswith("pm"):
        ampm = t[-2:]
        t = t[:-2]
    parts = t.split(":")
    if len(parts) not in (2, 3) or not all(isdigits(p) and 1 <= len(p) <= 2 for p in parts):
        return None
    h, m = int(parts[0]), int(parts[1])
    s = int(parts[2]) if len(parts) == 3 else 0
    if ampm:
        if not 1 <= h <= 12:
            return None
        h = h % 12 + (12 if ampm == "pm" else 0)
    if h > 23 or m > 59 or s > 59:
        return None
    return h, m, s


def _year(yy: int | None, now_year: int) -> int | None:
    if yy is None:
        return None
    return 2000 + yy if yy < 100 else yy


def parse_begin(text: str, now: float | None = None) -> int:
    """Unix seconds for a `--begin` value (see the module docstring); ValueError(pos)."""
    now = _time.time() if now is None else now
    t = text.strip()
    low = t.lower()
    lt = _time.localtime(now)
    if low.startswith("now"):
        rest = low[3:]
        if rest == "":
            return int(now)
        sign = rest[0]
        if sign not in "+-":
            raise ValueError(3)
        j = 1
        while j < len(rest) and isdigits(rest[j]):
            j += 1
        if j == 1:
            raise ValueError(4)
        n = int(rest[1:j])
        mult = _unit(rest[j:])
        if mult is None:
            raise ValueError(3 + j)
        return int(now) + (n * mult if sign == "+" else -n * mult)
    date: tuple[int | None, int, int] | None = None  # (y, m, d); y None: this year or the next
    tod: tuple[int, int, int] | None = None
    if low in ("today", "tomorrow"):
        base = now + (86400 if low == "tomorrow" else 0)
        b = _time.localtime(base)
        return _mktime(b.tm_year, b.tm_mon, b.tm_mday, 0, 0, 0)
    if low in _NAMED_TOD:
        tod = _NAMED_TOD[low] + (0,)
    elif len(t) >= 10 and t[4] == "-" and t[7] == "-":
        ys, ms, ds = t[0:4], t[5:7], t[8:10]
        if not (isdigits(ys) and isdigits(ms) and isdigits(ds)):
            raise ValueError(0)
        date = (int(ys), int(ms), int(ds))
        if len(t) > 10:
            if t[10] != "T":
                raise ValueError(10)
            tod = _tod(t[11:])
            if tod is None:
                raise ValueError(11)
        else:
            tod = (0, 0, 0)
    elif ":" in t:
        tod = _tod(t)
        if tod is None:
            raise ValueError(0)
    else:
        for sep in "/.":
            if sep in t:
                parts = t.split(sep)
                if len(parts) not in (2, 3) or not all(isdigits(p) for p in parts):
                    raise ValueError(0)
                yy = int(parts[2]) if len(parts) == 3 else None
                date = (_year(yy, lt.tm_year), int(parts[0]), int(parts[1]))
                break
        else:
            if isdigits(t) and len(t) in (4, 6):
                yy = int(t[4:6]) if len(t) == 6 else None
                date = (_year(yy, lt.tm_year), int(t[0:2]), int(t[2:4]))
            else:
                raise ValueError(0)
        tod = (0, 0, 0)
    assert tod is not None  # every branch above sets it or raises
    if date is not None:
        y, mo, d = date
        if not (1 <= mo <= 12 and 1 <= d <= 31):
            raise ValueError(0)
        explicit_year = y is not None
        if y is None:
            y = lt.tm_year
        ts = _mktime(y, mo, d, *tod)
        if not explicit_year and ts < now - 86400:
            ts = _mktime(y + 1, mo, d, *tod)
        return ts
    ts = _mktime(lt.tm_year, lt.tm_mon, lt.tm_mday, *tod)
    if ts < now:
        b = _time.localtime(now + 86400)
        ts = _mktime(b.tm_year, b.tm_mon, b.tm_mday, *tod)
    return ts
