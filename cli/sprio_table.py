"""sprio's table: Slurm's ``%[.][width]X`` format letters over ``JobFactors``.

Pure formatting; the command ``batchd.cli.sprio`` adds option parsing and I/O.

Letters: ``i`` job id, ``r`` partition, ``u`` user, ``o`` account, ``n`` QOS name,
``c`` cluster, ``Y``/``y`` priority (integer / divided by 4294967295 as ``%16.14f``),
``S`` site, ``N`` nice, ``A``/``a`` age, ``B``/``b`` association, ``F``/``f``
fair-share, ``J``/``j`` job size, ``P``/``p`` partition, ``Q``/``q`` QOS,
``T``/``t`` TRES (upper case = weighted, ``%.0f``; lower case = normalised,
``%.7f``, TRES ``%.2f``). ``.`` right-justifies; every value is cut to its width.
The ``-w`` line prints the weights under the same columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from batchd.priority.multifactor import JobFactors

__all__ = ["default_format", "parse_format", "render", "WEIGHTS"]

WEIGHTS = object()  # marker row: the -w line
_TOKEN = re.compile(r"%(\.?)(\d*)([A-Za-z])")
_FACTOR = {"a": "age", "b": "assoc", "f": "fairshare", "j": "jobsize", "p": "partition", "q": "qos"}
_WEIGHT_KEY = {"age": "weight_age", "assoc": "weight_assoc", "fairshare": "weight_fairshare",
               "jobsize": "weight_jobsize", "partition": "weight_partition", "qos": "weight_qos"}
_HEAD = {"i": "JOBID", "r": "PARTITION", "u": "USER", "o": "ACCOUNT", "n": "QOSNAME", "c": "CLUSTER",
         "y": "PRIORITY", "S": "SITE", "N": "NICE", "a": "AGE", "b": "ASSOC", "f": "FAIRSHARE",
         "j": "JOBSIZE", "p": "PARTITION", "q": "QOS", "t": "TRES"}


def default_format(policy: dict, *, long: bool, normalized: bool, users: bool) -> str:
    """sprio's default format for ``-l``/``-n``/``-u`` and the weights that are non-zero."""
    if normalized:
        if long:
            return "%.15i %9r %.8u %10y %10a %10b %10f %10j %10p %10q %20t"
        fmt = "%.15i %9r" + (" %.8u" if users else "") + " %10y"
        cols = [("weight_age", " %10a"), ("weight_assoc", " %10b"), ("weight_fairshare", " %10f"),
                ("weight_jobsize", " %10j"), ("weight_partition", " %10p"), ("weight_qos", " %10q"),
                ("weight_tres", " %20t")]
    else:
        if long:
            return "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"
        fmt = "%.15i %9r" + (" %.8u" if users else "") + " %.10Y %.10S"
        cols = [("weight_age", " %.10A"), ("weight_assoc", " %.10B"), ("weight_fairshare", " %.10F"),
                ("weight_jobsize", " %.10J"), ("weight_partition", " %.10P"), ("weight_qos", " %.10Q"),
                ("weight_tres", " %.20T")]
    return fmt + "".join(c for k, c in cols if policy.get(k))


def parse_format(fmt: str) -> tuple[str, list[tuple[bool, int, str, str]]]:
    """(prefix, [(right, width, letter, suffix)]). ValueError on an unknown letter."""
    first = fmt.find("%")
    if first < 0:
        return fmt, []
    prefix, rest = fmt[:first], fmt[first:]
    out = []
    matches = list(_TOKEN.finditer(rest))
    for k, m in enumerate(matches):
        letter = m.group(3)
        if letter not in "iruoncyYSNaAbBfFjJpPqQtT":
            raise ValueError(f"Invalid job format specification: {letter}")
        end = matches[k + 1].start() if k + 1 < len(matches) else len(rest)
        out.append((m.group(1) == ".", int(m.group(2) or 0), letter, rest[m.end():end]))
    return prefix, out


def _cut(s: str, width: int, right: bool) -> str:
    if width == 0:
        return s
    if right:
        return s.rjust(width)[:width]
    return s[:width].ljust(width)


def _int(x: float) -> str:
    return f"{x:.0f}"


def _value(letter: str, job: JobFactors | object | None, policy: dict, cluster: str) -> str:
    low = letter.lower()
    if job is None:  # header
        if letter in "YS" or letter == "N":
            return {"Y": "PRIORITY", "S": "SITE", "N": "NICE"}[letter]
        if letter == "T":
            return "TRES"
        return _HEAD.get(letter) or _HEAD[low]
    if job is WEIGHTS:
        if letter == "i":
            return "Weights"
        if low in _FACTOR:
            return _int(float(policy.get(_WEIGHT_KEY[_FACTOR[low]], 0)))
        if letter == "S":
            return "1"
        if letter == "T":
            return str(policy.get("weight_tres") or "")
        return ""
    assert isinstance(job, JobFactors)
    if letter == "i":
        return job.job_id
    if letter == "r":
        return job.partition
    if letter == "u":
        return job.user
    if letter == "o":
        return job.account
    if letter == "n":
        return job.qos
    if letter == "c":
        return cluster
    if letter == "Y":
        return str(job.priority)
    if letter == "y":
        return f"{job.priority / 4294967295.0:16.14f}"
    if job.admin:
        return "" if low == "t" else "0"
    if letter == "S":
        return _int(job.site)
    if letter == "N":
        return _int(job.nice)
    if letter in "AaBbFfJjPpQq":
        name = _FACTOR[low]
        return _int(job.weighted[name]) if letter.isupper() else f"{(job.norm[name] if policy.get(_WEIGHT_KEY[name]) else 0.0):.7f}"
    if letter == "T":
        return ",".join(f"{k}={v:.0f}" for k, v in job.tres.items())
    return ",".join(f"{k}={v:.2f}" for k, v in job.tres_norm.items())


def render(jobs: list[JobFactors], fmt: str, policy: dict, *, header: bool = True, weights: bool = False,
           cluster: str = "cluster") -> str:
    """The sprio table (lines end with newline); with ``weights`` only the header and
    the weights line."""
    prefix, toks = parse_format(fmt)

    def line(job: JobFactors | object | None) -> str:
        parts = [prefix]
        for right, width, letter, suffix in toks:
            parts.append(_cut(_value(letter, job, policy, cluster), width, right))
            parts.append(suffix)
        return "".join(parts) + "\n"

    out: list[str] = []
    emit: Callable[[str], None] = out.append
    if header:
        emit(line(None))
    if weights:
        emit(line(WEIGHTS))
        return "".join(out)
    for j in jobs:
        emit(line(j))
    return "".join(out)
