"""sbatch's option values -> the resource, time and policy part of a JOB_SPEC (the
`JOB_SPEC` of `batchd/protocol.py`): Slurm 22.05's grammar of `--time`, `--gres`, `--gpus`,
`--mem`, `--nodes`, `--signal`, `--nice` and the rest, with its error messages.

Pure (no I/O), so that every way in shares it: `sbatch`, `srun`, `salloc` and `bsub`
(through `batchd.cli.sbatch_opts`) and the daemon's slurmrestd API (`POST .../job/submit`),
which is why a job submitted over REST is the job `sbatch` makes of the same options.

Errors are raised as `OptionError(message, exit_code)` carrying the complete stderr text:
value errors that Slurm detects while parsing options exit 255 (`sbatch: error: Invalid
--time specification`), `parse_int` failures and refused combinations exit 1, as Slurm.
"""

from __future__ import annotations

from batchd.slurm import slurmtime
from batchd.slurm.digits import isdigits

TYPE_CHECKING = False  # no `typing` import at run time: the commands start faster without it
if TYPE_CHECKING:
    from typing import Any, NoReturn

PROG = "sbatch"


class OptionError(Exception):
    """A command line the parser refuses. `message` is the full text for stderr (one
    or more lines, no trailing newline); `exit_code` the status the command exits with."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


# Linux signal numbers (no `signal` import: it pulls in enum, too slow for sbatch).
SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
           "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
           "STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22,
           "URG": 23, "XCPU": 24, "XFSZ": 25, "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29,
           "PWR": 30, "SYS": 31}

GRES_ERROR = "Invalid generic resource (gres) specification"
NICE_MAX = 2147483645  # Slurm's NICE_OFFSET - 3


#: --mail-type names Slurm 22.05 knows (case-insensitive); batchd accepts them and sends no mail
MAIL_TYPES = frozenset({"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
                        "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"})


def fail(text: str, exit_code: int = 255) -> NoReturn:
    """An `sbatch: error: ...` refusal (exit 255 as Slurm's option-value errors)."""
    raise OptionError(f"{PROG}: error: {text}", exit_code)


def parse_int(name: str, val: Any, positive: bool = True) -> int:
    """Slurm's parse_int: the whole text a base-10 integer, > 0 (or >= 0); exit 1."""
    try:
        v = int(val, 10)
    except (TypeError, ValueError):
        v = None
    if v is None or v < 0 or (positive and v <= 0):
        fail(f'Invalid numeric value "{val}" for {name}.', 1)
    return v


def str_to_mbytes(text: str | None) -> int | None:
    """Slurm's str_to_mbytes: an integer with an optional K|M|G|T|P suffix (default M)
    -> MiB (K rounds up), or None when invalid."""
    if text is None:
        return None
    t = text.strip()
    mult = 1.0
    if t and t[-1].upper() in "KMGTP":
        mult = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}[t[-1].upper()]
        t = t[:-1]
    if not isdigits(t):
        return None
    v = int(t) * mult
    return int(v) if v == int(v) else int(v) + 1


def _count(text: str) -> int | None:
    mult = 1
    if text and text[-1].upper() in "KMGTP":
        mult = 1024 ** ("KMGTP".index(text[-1].upper()) + 1)
        text = text[:-1]
    if not isdigits(text):
        return None
    return int(text) * mult


def parse_gres(text: str | None) -> list[dict[str, Any]]:
    """`--gres` list -> [{"name", "type", "count"}]; `none` -> []; OptionError (exit 1,
    Slurm's client-side message) on bad syntax. Counts are per node."""
    out: list[dict[str, Any]] = []
    if text is None or text.lower() == "none":
        return out
    for item in text.split(","):
        if item.startswith("gres:") or item.startswith("gres/"):
            item = item[5:]
        parts = item.split(":")
        name = parts[0]
        if not name or len(parts) > 3:
            fail(GRES_ERROR, 1)
        gtype, count = None, 1
        if len(parts) == 2:
            c = _count(parts[1])
            if c is None:
                gtype = parts[1]
            else:
                count = c
        elif len(parts) == 3:
            gtype = parts[1]
            c = _count(parts[2])
            if c is None or not gtype:
                fail(GRES_ERROR, 1)
            count = c
        if gtype == "":
            fail(GRES_ERROR, 1)
        out.append({"name": name, "type": gtype, "count": count})
    return out


def parse_gpu_spec(text: str | None) -> dict[str, Any]:
    """`[type:]N` (`--gpus`, `--gpus-per-node`, `--gpus-per-task`) -> {"type", "count"};
    a list of several types is refused as an invalid gres specification."""
    if text is None or "," in text:
        fail(GRES_ERROR, 1)
    if text.startswith("gpu:"):
        text = text[4:]
    parts = text.split(":")
    if len(parts) == 1:
        c = _count(parts[0])
        if c is None:
            return {"type": parts[0], "count": 1} if parts[0] else fail(GRES_ERROR, 1)
        return {"type": None, "count": c}
    if len(parts) == 2 and parts[0]:
        c = _count(parts[1])
        if c is not None:
            return {"type": parts[0], "count": c}
    fail(GRES_ERROR, 1)


def parse_signal(text: str) -> dict[str, Any]:
    """`[{R|B}:]SIG[@SECS]` -> {"signal", "time_s", "batch_only"}; exit 255 if invalid."""
    t = text
    batch_only = False
    if ":" in t:
        flags, _, t = t.partition(":")
        if not flags or any(c not in "RB" for c in flags.upper()):
            fail("Invalid --signal specification")
        batch_only = "B" in flags.upper()
    secs = 60
    if "@" in t:
        t, _, s = t.partition("@")
        if not isdigits(s) or int(s) > 65535:
            fail("Invalid --signal specification")
        secs = int(s)
    if isdigits(t):
        num = int(t)
    else:
        name = t.upper()
        if name.startswith("SIG"):
            name = name[3:]
        num = SIGNALS.get(name, 0)
    if not 1 <= num <= 64:
        fail("Invalid --signal specification")
    return {"signal": num, "time_s": secs, "batch_only": batch_only}


def parse_nodes(text: str) -> tuple[int, int | None]:
    """`N` or `MIN-MAX` -> (min, max|None); exit 255 with Slurm's message if invalid."""
    lo, sep, hi = text.partition("-")
    if not isdigits(lo) or (sep and not isdigits(hi)) or int(lo) <= 0:
        fail(f"invalid node count `{text}'")
    mx = int(hi) if sep else None
    if mx is not None and mx < int(lo):
        fail(f"invalid node count `{text}'")
    return int(lo), mx


def parse_nice(val: str | None) -> int:
    """`--nice[=N]`: default 100; text read like strtol (garbage -> 0), range checked."""
    if val is None:
        return 100
    t = val.strip()
    j = 1 if t[:1] in "+-" else 0
    while j < len(t) and isdigits(t[j]):
        j += 1
    digits = t[:j]
    n = int(digits) if digits not in ("", "+", "-") else 0
    if abs(n) > NICE_MAX:
        fail(f"Invalid nice value, must be between -{NICE_MAX} and {NICE_MAX}")
    return n


def mem_options(cli: dict[str, Any], merged: dict[str, Any]) -> dict[str, Any]:
    """Keep one of --mem/--mem-per-cpu/--mem-per-gpu: more than one on the command line
    is refused as by Slurm; otherwise the one of highest precedence wins."""
    keys = ("mem", "mem_per_cpu", "mem_per_gpu")
    if sum(1 for k in keys if k in cli) > 1:
        raise OptionError(f"{PROG}: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.", 1)
    chosen = next((k for k in keys if k in cli), None)
    if chosen:
        for k in keys:
            if k != chosen:
                merged.pop(k, None)
    return merged


def build_spec(v: dict[str, Any]) -> dict[str, Any]:
    """The resource/time/policy part of a JOB_SPEC from merged option values `v` (keys of
    sbatch's option table). Script, environment, directories, name and identity are filled
    in by the caller."""
    spec: dict[str, Any] = {}
    for k in ("account", "partition", "qos", "comment", "reservation", "constraint", "mail_type",
              "mail_user", "output", "error", "input", "array", "dependency", "nodelist", "exclude"):
        spec[k] = v.get(k)
    if v.get("_licenses"):
        spec["licenses"] = v["_licenses"]  # batchd has none: the daemon refuses as Slurm does
    if "time" in v:
        t = slurmtime.time_limit_s(v["time"])
        if t is None:
            fail("Invalid --time specification")
        spec["time_limit_s"] = t
    else:
        spec["time_limit_s"] = None
    spec["time_min_s"] = None
    if "time_min" in v:
        t = slurmtime.time_limit_s(v["time_min"])
        if t is None:
            fail("Invalid --time-min specification")
        spec["time_min_s"] = t
    spec["nodes_min"], spec["nodes_max"] = parse_nodes(v["nodes"]) if "nodes" in v else (None, None)
    spec["ntasks"] = parse_int("--ntasks", v["ntasks"]) if "ntasks" in v else None
    spec["ntasks_per_node"] = (parse_int("--ntasks-per-node", v["ntasks_per_node"])
                               if "ntasks_per_node" in v else None)
    spec["cpus_per_task"] = parse_int("--cpus-per-task", v["cpus_per_task"]) if "cpus_per_task" in v else None
    spec["cpus_per_gpu"] = parse_int("--cpus-per-gpu", v["cpus_per_gpu"]) if "cpus_per_gpu" in v else None
    if spec["cpus_per_gpu"] is not None and spec["cpus_per_task"] is not None:
        raise OptionError(f"{PROG}: fatal: --cpus-per-task and --cpus-per-gpu are mutually exclusive.", 1)
    for key, name in (("mem", "--mem"), ("mem_per_cpu", "--mem-per-cpu"), ("mem_per_gpu", "--mem-per-gpu")):
        out = "mem_mb" if key == "mem" else key + "_mb"
        if key in v:
            m = str_to_mbytes(v[key])
            if m is None:
                fail(f"Invalid {name} specification")
            spec[out] = m
        else:
            spec[out] = None
    spec["gres"] = parse_gres(v["gres"]) if "gres" in v else []
    spec["gpus"] = parse_gpu_spec(v["gpus"]) if "gpus" in v else None
    spec["gpus_per_node"] = parse_gpu_spec(v["gpus_per_node"]) if "gpus_per_node" in v else None
    spec["gpus_per_task"] = parse_gpu_spec(v["gpus_per_task"]) if "gpus_per_task" in v else None
    om = v.get("open_mode")
    if om is not None:
        if om.lower() in ("a", "append"):
            om = "append"
        elif om.lower() in ("t", "truncate"):
            om = "truncate"
        else:
            fail("Invalid --open-mode specification")
    spec["open_mode"] = om
    mt = v.get("mail_type")
    if mt is not None and not any(t.strip().upper() in MAIL_TYPES for t in mt.split(",")):
        fail("Invalid --mail-type specification")  # Slurm 22.05: one known type suffices
    spec["begin_time"] = None
    if "begin" in v:
        try:
            spec["begin_time"] = float(slurmtime.parse_begin(v["begin"]))
        except ValueError as e:
            raise OptionError(f"Invalid time specification (pos={e.args[0]}): {v['begin']}\n"
                              f"{PROG}: error: Invalid --begin specification", 255) from None
    spec["hold"] = bool(v.get("hold", False))
    spec["nice"] = parse_nice(v["nice"]) if "nice" in v else 0
    spec["requeue"] = v.get("requeue")
    spec["exclusive"] = "exclusive" in v
    spec["signal"] = parse_signal(v["signal"]) if "signal" in v else None
    spec["test_only"] = bool(v.get("test_only", False))
    spec["wait"] = bool(v.get("wait", False))
    spec["lsf"] = False
    return spec
