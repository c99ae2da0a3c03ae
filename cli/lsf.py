"""LSF's submission grammar -> batchd (Slurm) terms, for `bsub`.

Pure functions, builtins only (bsub imports this on every call; startup must stay fast:
`re`, which pulls in enum, is imported only by the parsers of -R, -w and job ids).
Each parser raises `LsfError(text)` with the complete LSF-style message (without the
trailing "Job not submitted."; the command adds its own tail). The mapping is
documented for users in docs/lsf.md:

- queue (`-q`) = batchd account; project (`-P`) = the job's comment;
- `-W [hour:]minute` run limit -> time_limit_s;
- `-gpu "num=N[:gmodel=TYPE][:mig=PROFILE][:j_exclusive=yes]"` -> one `gpu` GRES item
  per host (LSF's num is per host): type = the MIG profile when given, else gmodel;
- `-R "rusage[mem=X] span[hosts=N|ptile=N] affinity[core(N)]"` -> mem per node (MB
  unless a unit is given or LSF_UNIT_FOR_LIMITS says otherwise), nodes, tasks per node,
  cpus per task; `rusage[ngpus_physical=N]` as `-gpu num=N`; other sections are ignored;
- `-w` conditions -> Slurm's --dependency: done=afterok, ended=afterany,
  exit=afternotok, started=after; `&&` -> `,`, `||` -> `?` (one kind per expression);
- `-b [[[year:]month:]day:]hour:minute` -> begin time (the next such moment);
- `%J`/`%I` in -o/-e -> Slurm's `%A`/`%a`, other `%` signs kept literally.
How jobs are shown (STAT, reasons, ids `123[4]`) is in cli/bjobs.py.
"""

from __future__ import annotations

import time

from batchd.slurm.digits import isdigits

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: bsub's startup budget
    from collections.abc import Callable

    # a job name -> the ids of the caller's jobs of that name (bsub asks the daemon)
    Resolver = Callable[[str], list[int]]

__all__ = ["LsfError", "runlimit_s", "parse_gpu", "parse_resreq", "mem_mb", "convert_dependency",
           "begin_time", "output_pattern", "split_array_name"]


class LsfError(Exception):
    """An LSF option value batchd refuses; `message` is the text to print."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ---------------------------------------------------------------------------- bsub values
def runlimit_s(text: str) -> int:
    """`-W [hour:]minute[/host_spec]` -> seconds. Minutes may exceed 59 (`-W 90`)."""
    t = text.strip().split("/", 1)[0]
    parts = t.split(":")
    if len(parts) > 2 or not all(isdigits(p) for p in parts):
        raise LsfError(f"{text}: Bad RUNLIMIT specification")
    minutes = int(parts[-1]) + (int(parts[0]) * 60 if len(parts) == 2 else 0)
    if minutes <= 0:
        raise LsfError(f"{text}: Bad RUNLIMIT specification")
    return minutes * 60


_UNITS = {"K": 1 / 1024, "KB": 1 / 1024, "M": 1, "MB": 1, "G": 1024, "GB": 1024,
          "T": 1024 ** 2, "TB": 1024 ** 2, "P": 1024 ** 3, "PB": 1024 ** 3}


def _number_unit(text: str) -> tuple[str | None, str | None]:
    """`1.5 GB` -> ("1.5", "GB"); (None, None) unless digits[.digits] then letters."""
    t = (text or "").strip()
    i = 0
    while i < len(t) and (isdigits(t[i]) or t[i] == "."):
        i += 1
    num, unit = t[:i], t[i:].strip()
    if not num or num.count(".") > 1 or num[0] == "." or num[-1] == "." or not (unit == "" or unit.isalpha()):
        return None, None
    return num, unit


def mem_mb(text: str, default_unit: str = "MB") -> int:
    """An LSF memory amount (`4096`, `4G`, `512MB`, `1.5GB`) -> MiB, rounded up; a bare
    number is in `default_unit` (LSF_UNIT_FOR_LIMITS: KB, MB, GB, ...)."""
    num, unit = _number_unit(text)
    if num is None or (unit and unit.upper() not in _UNITS):
        raise LsfError(f"{text}: Bad memory specification")
    unit = (unit or default_unit or "MB").upper()
    mult = _UNITS.get(unit)
    if mult is None:
        raise LsfError(f"LSF_UNIT_FOR_LIMITS={default_unit}: unknown unit")
    v = float(num) * mult
    out = int(v) if v == int(v) else int(v) + 1
    if out <= 0:
        raise LsfError(f"{text}: Bad memory specification")
    return out


# -gpu keywords batchd accepts without acting on them (a job's GPUs are always its own)
_GPU_IGNORED = ("mode", "j_exclusive", "mps", "aff", "block", "gpack", "gvendor", "gtile", "nvlink",
                "glink", "gmem")


def parse_gpu(text: str) -> dict:
    """`-gpu` value -> {"name": "gpu", "type": str | None, "count": int} per host.
    `-` means LSF's default requirement, one GPU."""
    t = (text or "").strip()
    if t == "-":
        return {"name": "gpu", "type": None, "count": 1}
    count, model, mig = 1, None, None
    for item in t.split(":"):
        key, eq, val = item.strip().partition("=")
        key = key.strip().lower()
        val = val.strip()
        if not eq or not val:
            raise LsfError(f"{text}: Bad GPU requirement specification")
        if key == "num":
            if not isdigits(val) or int(val) <= 0:
                raise LsfError(f"{text}: Bad GPU requirement specification: num must be a positive integer")
            count = int(val)
        elif key == "gmodel":
            model = val
        elif key == "mig":
            if isdigits(val.replace("/", "", 1)):
                raise LsfError(f"{text}: MIG sizes (mig=GI[/CI]) are not supported by batchd: "
                               "give the MIG profile name, e.g. mig=1g.24gb")
            mig = val
        elif key in _GPU_IGNORED:
            continue
        else:
            raise LsfError(f"{text}: Bad GPU requirement specification: unknown keyword {key}")
    return {"name": "gpu", "type": mig or model, "count": count}




def _first_alternative(text: str) -> str:
    """`{A} || {B}` (LSF's alternative requirements) -> `A`: batchd takes the first."""
    depth = 0
    for i, c in enumerate(text):
        depth += c == "["
        depth -= c == "]"
        if depth == 0 and text.startswith("||", i):
            text = text[:i]
            break
    return text.replace("{", " ").replace("}", " ")


def parse_resreq(texts: list[str], default_unit: str = "MB") -> dict:
    """Every `-R` string (a list, in order) -> a dict with some of mem_mb, gpus (count per
    host), nodes, ntasks_per_node, cpus_per_task. Later strings win; of alternatives
(`{...} || {...}`, `rusage[mem=2G || mem=1G]`) the first is taken. `select`, `order`,
    `same`, `cu` and bare selection strings are accepted and ignored."""
    import re

    out = {}
    for text in texts:
        for name, body in re.findall(r"(\w+)\s*\[([^\]]*)\]", _first_alternative(text)):
            name = name.lower()
            if name == "rusage":
                body = body.split("||")[0]
                for item in re.split(r"[,:]", body):
                    key, eq, val = item.strip().partition("=")
                    key = key.strip().lower()
                    if not eq:
                        continue
                    if key == "mem":
                        out["mem_mb"] = mem_mb(val.strip(), default_unit)
                    elif key in ("ngpus_physical", "ngpus"):
                        if not isdigits(val.strip()):
                            raise LsfError(f"{text}: Bad resource requirement syntax")
                        out["gpus"] = int(val)
            elif name == "span":
                for item in body.split(":"):
                    key, eq, val = item.strip().partition("=")
                    val = val.strip()
                    if key.strip() == "hosts" and isdigits(val):
                        out["nodes"] = int(val)
                    elif key.strip() == "ptile" and isdigits(val):
                        out["ntasks_per_node"] = int(val)
                    elif key.strip() in ("hosts", "ptile") and val != "-1":
                        raise LsfError(f"{text}: Bad resource requirement syntax")
            elif name == "affinity":
                m = re.search(r"(?:core|thread|socket|numa)\s*\(\s*(\d+)", body)
                if m:
                    out["cpus_per_task"] = int(m.group(1))
    return out


# ------------------------------------------------------------------------------ -w
_DEP_TYPES = {"done": "afterok", "ended": "afterany", "exit": "afternotok", "started": "after"}
_TOKEN = (r"\s*(&&|\|\||!|\(|\)|,|\"[^\"]*\"|'[^']*'|[^\s()&|!,\"'\[]+\[[^\]]*\]|[^\s()&|!,\"']+)")


def _tokens(text: str) -> list[str]:
    import re

    token_re = re.compile(_TOKEN)
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = token_re.match(text, pos)
        if not m or not m.group(1):
            raise LsfError(f"{text}: Dependency condition syntax error")
        out.append(m.group(1))
        pos = m.end()
    return out


def _job_refs(arg: str, resolve_name: Resolver | None) -> list[str]:
    """A job argument of a condition -> Slurm job references (`123`, `123_4`)."""
    import re

    a = arg.strip().strip("\"'")
    m = re.match(r"^(\d+)(?:\[([\d,\-*]+)\])?$", a)
    if m:
        jid, idx = m.group(1), m.group(2)
        if not idx or idx == "*":
            return [jid]
        return [f"{jid}_{i}" for i in _expand(idx, arg)]
    if not a:
        raise LsfError("Dependency condition syntax error: empty job")
    if resolve_name is None:
        raise LsfError(f"{a}: job names in dependencies need the daemon")
    ids = resolve_name(a)
    if not ids:
        raise LsfError(f"{a}: No matching job found")
    return [str(i) for i in ids]


def _expand(idx: str, shown: str) -> list[int]:
    out: list[int] = []
    for part in idx.split(","):
        lo, dash, hi = part.partition("-")
        if not isdigits(lo) or (dash and not isdigits(hi)):
            raise LsfError(f"{shown}: Bad job array index")
        out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    return out


def convert_dependency(text: str, resolve_name: Resolver | None = None) -> str:
    """An LSF `-w` expression -> a Slurm --dependency string.

    `done(ID)`, `ended(ID)`, `exit(ID)`, `started(ID)` and a bare ID (= done) map to
    afterok/afterany/afternotok/after; ID is a job id, `ID[N]`/`ID[1-3,5]` array
    elements, `ID[*]`, or a job name (quoted or not), which `resolve_name(name) -> [ids]`
    turns into the caller's jobs of that name. Conditions joined by `&&` become `,`
    items, by `||` `?` items; parentheses may group them but Slurm cannot nest, so one
    expression uses one operator kind. `!`, exit codes (`exit(ID, op N)`), `post_*`
    and `num*` conditions are refused."""
    toks = _tokens(text)
    pos = [0]
    ops = set()

    def peek() -> str | None:
        return toks[pos[0]] if pos[0] < len(toks) else None

    def take() -> str | None:
        t = peek()
        pos[0] += 1
        return t

    def atom() -> list[str]:
        t = take()
        if t is None:
            raise LsfError(f"{text}: Dependency condition syntax error")
        if t == "(":
            items = expr()
            if take() != ")":
                raise LsfError(f"{text}: Dependency condition syntax error")
            return items
        if t == "!":
            raise LsfError(f"{text}: batchd cannot express negated dependency conditions (!)")
        if t in ("&&", "||", ")", ","):
            raise LsfError(f"{text}: Dependency condition syntax error")
        if peek() == "(":
            take()
            cond = t.lower()
            arg = take()
            if arg is None or arg in ("(", ")", "&&", "||", ","):
                raise LsfError(f"{text}: Dependency condition syntax error")
            if peek() == ",":
                raise LsfError(f"{text}: exit code conditions are not supported by batchd; "
                               "use exit(ID) for any non-zero exit")
            if take() != ")":
                raise LsfError(f"{text}: Dependency condition syntax error")
            kind = _DEP_TYPES.get(cond)
            if kind is None:
                raise LsfError(f"{text}: the dependency condition {cond}() is not supported by batchd "
                               "(done, ended, exit, started are)")
            return [f"{kind}:" + ":".join(_job_refs(arg, resolve_name))]
        return ["afterok:" + ":".join(_job_refs(t, resolve_name))]

    def expr() -> list[str]:
        items = atom()
        while peek() in ("&&", "||"):
            ops.add(take())
            items = items + atom()
        return items

    items = expr()
    if peek() is not None:
        raise LsfError(f"{text}: Dependency condition syntax error")
    if len(ops) > 1:
        raise LsfError(f"{text}: batchd cannot mix && and || in one dependency expression")
    return ("?" if ops == {"||"} else ",").join(items)


# ------------------------------------------------------------------------------ -b
def begin_time(text: str, now: float | None = None) -> float:
    """`-b [[[year:]month:]day:]hour:minute` -> unix seconds (local time). Fields left out
    are taken from now; a moment already past moves to the next day (month, year) when
    the day (month, year) was left out, as LSF does."""
    parts = text.strip().split(":")
    if not 2 <= len(parts) <= 5 or not all(isdigits(p) for p in parts):
        raise LsfError(f"{text}: Bad begin time specification")
    nums = [int(p) for p in parts]
    now = time.time() if now is None else now
    lt = time.localtime(now)
    year, month, day = lt.tm_year, lt.tm_mon, lt.tm_mday
    hour, minute = nums[-2], nums[-1]
    given = len(nums)
    if given >= 3:
        day = nums[-3]
    if given >= 4:
        month = nums[-4]
    if given == 5:
        year = nums[0] + (2000 if nums[0] < 100 else 0)
    if not (0 <= hour <= 23 and 0 <= minute <= 59 and 1 <= day <= 31 and 1 <= month <= 12):
        raise LsfError(f"{text}: Bad begin time specification")

    def at(y: int, mo: int, d: int) -> float:
        return time.mktime((y, mo, d, hour, minute, 0, 0, 0, -1))

    t = at(year, month, day)
    if t < now:
        if given == 2:
            t = at(year, month, day + 1)
        elif given == 3:
            t = at(year, month + 1, day)
        elif given == 4:
            t = at(year + 1, month, day)
    return float(t)


def output_pattern(text: str, array: bool = True) -> str:
    """LSF's `%J` (job id; an array's own id for its elements) and `%I` (array index) ->
    Slurm's `%A`/`%a` (`%A` is the job id of a job that is not an array; `%I` is `0`
    for it, as in LSF); every other `%` is doubled so that Slurm's expansion leaves it
    as written."""
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "%" and i + 1 < len(text) and text[i + 1] in "JI":
            out.append("%A" if text[i + 1] == "J" else "%a" if array else "0")
            i += 2
            continue
        out.append("%%" if c == "%" else c)
        i += 1
    return "".join(out)


def split_array_name(text: str) -> tuple[str, str | None]:
    """`-J "name[1-10:2]%3"` -> ("name", "1-10:2%3"); a plain name -> (name, None)."""
    t = text.strip()
    head, pct, throttle = t.rpartition("%")
    if not pct or not isdigits(throttle):
        head, throttle = t, ""
    name, br, rest = head.partition("[")
    if not br or not rest.endswith("]") or not rest[:-1] or any(c not in "0123456789,-:" for c in rest[:-1]):
        return text, None
    return name, rest[:-1] + (f"%{throttle}" if throttle else "")
