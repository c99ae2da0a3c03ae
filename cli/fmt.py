"""Shared formatting for the Slurm-named query commands (squeue, sacct, sinfo, scontrol).

Everything here reproduces how Slurm 22.05 prints values, so that scripts that parse
Slurm's output keep working:

- durations: `fmt_elapsed` (squeue `%M`/`%l`: `0:06`, `10:00`, `1:00:00`, `2-03:04:05`),
  `fmt_hms` (sacct/scontrol: `00:00:06`, `2-03:04:05`); `-1` means UNLIMITED;
- timestamps: `fmt_ts` (`2026-11-30T15:26:24`, local time as SLURM_TIME_FORMAT's default);
- memory: `fmt_mem` (MiB in, `1G`, `1500M`, `0` out);
- host lists: `compress_hostlist` / `expand_hostlist` (`gpu[01-02],vm`);
- columns: `parse_percent_format` + `render_percent` (squeue/sinfo `%[.][width]X`),
  `cell` (fixed-width cell with Slurm's truncation).

Import cost matters (each command runs on every call): builtins only, plus the socket
client for `daemon_call`.
"""

import os
import re
import sys
import time
from collections.abc import Callable, Iterable

from batchd.slurm import hostlist
from batchd.slurm.digits import isdigits
from batchd.slurm.memunits import format_mem

UNLIMITED = -1

STATE_COMPACT = {
    "PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETING": "CG", "COMPLETED": "CD",
    "CONFIGURING": "CF", "CANCELLED": "CA", "FAILED": "F", "TIMEOUT": "TO", "PREEMPTED": "PR",
    "NODE_FAIL": "NF", "OUT_OF_MEMORY": "OOM", "BOOT_FAIL": "BF", "DEADLINE": "DL",
    "REQUEUED": "RQ", "REQUEUE_HOLD": "RH", "SPECIAL_EXIT": "SE", "RESIZING": "RS",
    "REVOKED": "RV", "REQUEUE_FED": "RF", "RESV_DEL_HOLD": "RD", "SIGNALING": "SI",
    "STAGE_OUT": "SO", "STOPPED": "ST",
}
STATE_LONG = {v: k for k, v in STATE_COMPACT.items()}


def state_name(text: str) -> str | None:
    """A job state given short (`pd`, `CA`) or long (`pending`) -> the long upper-case name,
    or None when it is not a job state."""
    t = text.strip().upper()
    if t in STATE_COMPACT:
        return t
    return STATE_LONG.get(t)


# ----------------------------------------------------------------------------- durations
def fmt_elapsed(seconds: float | None) -> str:
    """squeue's `%M`/`%l`/`%L` and sinfo's time limit: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`.
    None or -1 -> `UNLIMITED`. Negative remainders print as `0:00`."""
    if seconds is None or seconds == UNLIMITED:
        return "UNLIMITED"
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


def fmt_hms(seconds: float | None, unlimited: str = "UNLIMITED") -> str:
    """sacct Elapsed/Timelimit and scontrol RunTime/TimeLimit: `HH:MM:SS` or `D-HH:MM:SS`.
    -1 -> `unlimited`; None -> `""`."""
    if seconds is None:
        return ""
    if seconds == UNLIMITED:
        return unlimited
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    return f"{hours:02d}:{minutes:02d}:{s:02d}"


_TL_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time_limit(text: str) -> int:
    """Slurm's time formats -> seconds: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`;
    `UNLIMITED`/`INFINITE`/`-1` -> -1. Raises ValueError for anything else."""
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return UNLIMITED
    m = _TL_RE.match(t)
    if not m:
        raise ValueError(text)
    d, a, b, c = m.groups()
    if d is not None:  # D-H[:M[:S]]
        return int(d) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    if c is not None:  # H:M:S
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:  # M:S
        return int(a) * 60 + int(b)
    return int(a) * 60  # M


# ----------------------------------------------------------------------------- timestamps
def fmt_ts(epoch: float | None, none: str = "N/A") -> str:
    """Unix seconds -> `YYYY-MM-DDTHH:MM:SS` in local time; None/0 -> `none`."""
    if not epoch:
        return none
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def banner_time(now: float | None = None) -> str:
    """The date line that `squeue -l`/`sinfo -l` print first: `Mon Nov 30 14:43:48 2026`."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now if now is not None else time.time()))


_UNITS_S = {"": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
            "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600,
            "d": 86400, "day": 86400, "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}


def parse_when(text: str, now: float | None = None) -> float:
    """sacct -S/-E and scontrol StartTime values -> unix seconds (local time).
    Accepts `YYYY-MM-DD[THH:MM[:SS]]`, `MM/DD[/YY]`, `HH:MM[:SS]` (today), `now[+-N[units]]`,
    `today`, `midnight`, `noon`, `tomorrow`, and plain unix seconds. Raises ValueError."""
    now = time.time() if now is None else now
    t = text.strip()
    low = t.lower()
    lt = time.localtime(now)
    midnight = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))
    if low in ("today", "midnight"):
        return midnight
    if low == "noon":
        return midnight + 12 * 3600
    if low == "tomorrow":
        return time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday + 1, 0, 0, 0, 0, 0, -1))
    m = re.match(r"^now(?:([+-])(\d+)([a-z]*))?$", low)
    if m:
        if not m.group(1):
            return now
        unit = _UNITS_S.get(m.group(3))
        if unit is None:
            raise ValueError(text)
        return now + (1 if m.group(1) == "+" else -1) * int(m.group(2)) * unit
    if re.match(r"^\d{9,}$", t):
        return float(t)
    m = re.match(r"^(\d{4})-(\d{1,2})-(\d{1,2})(?:T(\d{1,2}):(\d{2})(?::(\d{2}))?)?$", t)
    if m:
        y, mo, d, hh, mm, ss = (int(x) if x else 0 for x in m.groups())
        return time.mktime((y, mo, d, hh, mm, ss, 0, 0, -1))
    m = re.match(r"^(\d{1,2})[/.](\d{1,2})(?:[/.](\d{2,4}))?(?:-(\d{1,2}):(\d{2})(?::(\d{2}))?)?$", t) or \
        re.match(r"^(\d{2})(\d{2})(\d{2})?()()()$", t)
    if m:  # MM/DD[/YY][-HH:MM[:SS]], MM.DD[.YY], MMDD[YY]
        y = int(m.group(3)) if m.group(3) else lt.tm_year
        if y < 100:
            y += 2000
        hh, mm, ss = (int(x) if x else 0 for x in m.groups()[3:])
        return time.mktime((y, int(m.group(1)), int(m.group(2)), hh, mm, ss, 0, 0, -1))
    m = re.match(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$", t)
    if m:
        return midnight + int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3) or 0)
    raise ValueError(text)


# ----------------------------------------------------------------------------- memory
def fmt_mem(mb: int | str | None) -> str:
    """MiB -> Slurm's compact size (its `convert_num_unit` in EXACT mode): divide by 1024
    while the value is at least 1024 and a multiple of 512, so 0 -> `0`, 1024 -> `1G`,
    1536 -> `1.50G`, 2560 -> `2.50G`, 1500 -> `1500M`, 1025 -> `1025M`, 1048576 -> `1T`
    (recorded from the peer: squeue `%m`, scontrol `MinMemoryNode`); a string is returned
    as it is; None -> `""`."""
    if mb is None:
        return ""
    if isinstance(mb, str):
        return mb
    if int(mb) == 0:
        return "0"
    return format_mem(int(mb))  # the one conversion, batchd.slurm.tres's (TRES strings use it too)


INT32_MAX = 2**31 - 1

# ----------------------------------------------------------------------------- host lists


# host lists: one implementation for the daemon and the commands
compress_hostlist = hostlist.compress
expand_hostlist = hostlist.expand


def expand_hostlist_arg(prog: str, text: str) -> list[str]:
    """A host list given on the command line (`-w`, `-n`, `show node`): a malformed one
    ends the command with Slurm's message and exit 1 instead of a traceback."""
    try:
        return hostlist.expand(text)
    except ValueError:
        sys.stderr.write(f"{prog}: error: '{text}' is not a valid node name\n")
        sys.exit(1)


def expand_ranges(text: str) -> list[int]:
    """`0-9:2,12` -> [0, 2, 4, 6, 8, 12]; a `%N` throttle suffix is ignored."""
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        part = part.strip()
        if not part:
            continue
        step = 1
        if ":" in part:
            part, s = part.split(":", 1)
            step = int(s)
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1, step))
        else:
            out.append(int(part))
    return out


def compress_ranges(nums: Iterable[int]) -> str:
    """[0, 1, 2, 4, 8, 9] -> `0-2,4,8-9`."""
    nums = sorted(set(nums))
    if not nums:
        return ""
    ranges = []
    start = prev = nums[0]
    for x in nums[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(ranges)


def job_reason(job: dict) -> str:
    """A JOB_VIEW's reason, with Slurm's terminal reasons filled in where the daemon gave
    none: FAILED with a non-zero exit status -> NonZeroExitCode, TIMEOUT -> TimeLimit,
    OUT_OF_MEMORY -> OutOfMemory, NODE_FAIL -> NodeDown; otherwise the reason or `None`."""
    reason = job.get("reason")
    if reason not in (None, "", "None"):
        return reason
    state = job.get("state")
    if state == "FAILED":
        status, _, sig = (job.get("exit_code") or "0:0").partition(":")
        if status not in ("", "0") and sig in ("", "0"):
            return "NonZeroExitCode"
    fixed = {"TIMEOUT": "TimeLimit", "OUT_OF_MEMORY": "OutOfMemory", "NODE_FAIL": "NodeDown"}
    return fixed.get(state or "", "None")


class TaskView(dict):  # type: ignore[type-arg]
    """The JOB_VIEW of one task of a `fold=runs` run: a copy of the run's view with the
    task's own ids; `run` is the run's view, which every other key equals (what the table
    layouts use to format those keys once per run)."""
    run: dict

    def __init__(self, run: dict, jid: int, task: int, display_id: str):
        super().__init__(run)
        self["id"], self["array_task_id"], self["display_id"] = jid, task, display_id
        self.run = run


#: JOB_VIEW keys that differ between the tasks of one run
TASK_KEYS = ("id", "array_task_id", "display_id")


def expand_task_runs(jobs: list[dict], runs: list[dict] | None) -> list[dict]:
    """The JOB_VIEWs of a `fold=runs` reply (batchd/protocol.py, TaskRunView), one per task
    (a TaskView), merged with `jobs` by id (both come ordered by id)."""
    if not runs:
        return jobs
    tasks = []
    for run in runs:
        view = run["view"]
        aj = view.get("array_job_id")
        for jid, task, count in run["tasks"]:
            for k in range(count):
                tasks.append(TaskView(view, jid + k, task + k, f"{aj}_{task + k}"))
    tasks.sort(key=lambda j: j["id"])
    if not jobs:
        return tasks
    out, i = [], 0
    for j in jobs:
        while i < len(tasks) and tasks[i]["id"] < j["id"]:
            out.append(tasks[i])
            i += 1
        out.append(j)
    out.extend(tasks[i:])
    return out


def fold_array_tasks(jobs: list[dict]) -> list[dict]:
    """Slurm shows the still-pending tasks of a job array as one row: fold JOB_VIEWs with
    the same `array_job_id` that are PENDING into one row at the place of the first (whose
    reason it shows, as Slurm's one master record has one reason),
    with `display_id` `123_[0-3,7%2]` (`%N` from `array_max_running`), `array_task_str`
    `[0-3,7%2]`, `array_task_id` None and `id` = the array job id. One lone pending task
    prints as `123_[4]`, as Slurm does. Other rows are returned unchanged, in order."""
    def key(j: dict) -> object:
        return j.get("array_job_id")
    tasks: dict[object, list[dict]] = {}
    for j in jobs:
        if j.get("state") == "PENDING" and j.get("array_job_id") is not None and j.get("array_task_id") is not None:
            tasks.setdefault(key(j), []).append(j)
    if not tasks:
        return list(jobs)
    out = []
    done = set()
    for j in jobs:
        aj = j.get("array_job_id")
        if key(j) not in tasks or j.get("state") != "PENDING" or j.get("array_task_id") is None:
            out.append(j)
            continue
        if key(j) in done:
            continue
        done.add(key(j))
        group = tasks[key(j)]
        ids = [t["array_task_id"] for t in group]
        throttle = next((t.get("array_max_running") for t in group if t.get("array_max_running")), None)
        text = compress_ranges(ids) + (f"%{throttle}" if throttle else "")
        first = min(group, key=lambda t: t["array_task_id"])
        row = dict(first, id=aj, array_task_id=None, array_task_str=f"[{text}]", display_id=f"{aj}_[{text}]")
        out.append(row)
    return out


# ----------------------------------------------------------------------------- columns
def cell(value: object, width: int | None, right: bool) -> str:
    """One fixed-width cell as squeue/sinfo print it: cut to `width`, padded on the left
    (`right=True`) or the right. width None -> the value as it is."""
    s = "" if value is None else str(value)
    if width is None:
        return s
    s = s[:width]
    return s.rjust(width) if right else s.ljust(width)


_PCT = re.compile(r"%(\.)?(\d+)?([A-Za-z])")


def parse_percent_format(fmt: str) -> list[str | tuple[str, int | None, bool]]:
    """`"%.18i %.9P %8j|%R"` -> list of items, each either a literal string or a tuple
    `(code, width_or_None, right_justified)`. `%%` is a literal percent sign."""
    items: list[str | tuple[str, int | None, bool]] = []
    pos = 0
    while pos < len(fmt):
        j = fmt.find("%", pos)
        if j < 0:
            items.append(fmt[pos:])
            break
        if j > pos:
            items.append(fmt[pos:j])
        if fmt.startswith("%%", j):
            items.append("%")
            pos = j + 2
            continue
        m = _PCT.match(fmt, j)
        if not m:
            items.append("%")
            pos = j + 1
            continue
        width = int(m.group(2)) if m.group(2) else None
        items.append((m.group(3), width, bool(m.group(1))))
        pos = m.end()
    return items


def render_percent(items: list[str | tuple[str, int | None, bool]], values: Callable[[str], str]) -> str:
    """Join parsed format `items` into a line; `values(code)` returns the text of a code."""
    out = []
    for it in items:
        if isinstance(it, str):
            out.append(it)
        else:
            code, width, right = it
            out.append(cell(values(code), width, right))
    return "".join(out)


def parse_field_list(text: str, default_width: int = 20) -> list[tuple[str, int, bool]]:
    """`-O`/`--Format` lists: `"JobID:10,Name,State:.8"` -> [(name, width, right)].
    A width may be prefixed with `.` for right justification (Slurm's convention)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, w = part.partition(":")
        right = w.startswith(".")
        w = w.lstrip(".")
        out.append((name, int(w) if isdigits(w) else default_width, right))
    return out


def truncate_plus(value: object, width: int) -> str:
    """sacct's cut: a value longer than |width| keeps width-1 characters and ends in `+`."""
    s = "" if value is None else str(value)
    w = abs(width)
    if len(s) > w:
        s = s[:w - 1] + "+" if w > 0 else ""
    return s


# ----------------------------------------------------------------------------- json
def json_meta(plugin: str = "openapi/v0.0.38") -> dict:
    """The `meta` object Slurm 22.05 puts at the top of every `--json` document."""
    return {"plugin": {"type": plugin, "name": "Slurm OpenAPI " + plugin.split("/")[1]},
            "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}


def tres_list(text: str | None) -> list[dict]:
    """`billing=9,cpu=4,gres/gpu:h200=2,mem=4G` -> Slurm's JSON TRES list
    `[{"type": "gres", "name": "gpu:h200", "id": None, "count": 2}, ...]` (mem in MiB)."""
    out = []
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
    for item in (text or "").split(","):
        key, eq, val = item.partition("=")
        if not eq:
            continue
        kind, _, name = key.partition("/")
        if val and val[-1] in units:
            count = int(float(val[:-1]) * units[val[-1]])
        else:
            try:
                count = int(val)
            except ValueError:
                continue
        out.append({"type": kind, "name": name, "id": None, "count": count})
    return out


# ----------------------------------------------------------------------------- daemon
def daemon_call(prog: str, method: str, path: str, body: dict | None = None, query: dict | None = None,
                error_prefix: str | None = None) -> dict:
    """`client.request`, exiting on failure: an unreachable daemon prints
    `<prog>: error: ...` and exits 1; an error reply prints `<error_prefix> error: <message>`
    (Slurm's API error wording, e.g. `slurm_load_jobs error: Invalid job id specified`) or
    `<prog>: error: <message>` and exits with the reply's exit code."""
    from batchd.cli import client  # local import: tests may monkeypatch client.request
    try:
        return client.request(method, path, body, query)
    except client.Unreachable as e:
        sys.stderr.write(f"{prog}: error: {e}\n")
        sys.exit(1)
    except client.DaemonError as e:
        if error_prefix:
            sys.stderr.write(f"{error_prefix} error: {e.message}\n")
        else:
            sys.stderr.write(f"{prog}: error: {e.message}\n")
        sys.exit(e.exit_code or 1)


def current_user() -> str:
    """The invoking user's name (for `--me`)."""
    import pwd
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def write(text: str) -> None:
    """Write `text` to stdout, quietly stopping when the reader went away (`| head`)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass


def bad_iterate(iterate: str | None) -> bool:
    """Whether an `-i/--iterate` value is refused: not a positive integer of C's int
    range (Slurm reads it with atoi; larger values would overflow the sleep)."""
    return iterate is not None and (not isdigits(iterate) or not 0 < int(iterate) <= INT32_MAX)


def refresh(show: Callable[[], int], iterate: str | None) -> int:
    """`show()` once, or (`-i SECONDS`) again every SECONDS with a blank line between,
    until it fails or Ctrl-C, as squeue/sinfo `--iterate` do; returns the exit code."""
    while True:
        rc = show()
        if rc or not iterate:
            return rc
        try:
            time.sleep(int(iterate))
        except KeyboardInterrupt:
            return 0
        write("\n")


VERSION = "slurm 22.05.8 (batchd)"


def answered_info(opts: dict, usage: str, help_text: str | None = None) -> bool:
    """`--help`/`--usage`/`--version` of a query command: print the text and return True
    (the command then exits 0); False when none was asked for."""
    if opts.get("help") and help_text is not None:
        write(help_text)
    elif opts.get("help") or opts.get("usage"):
        write(usage)
    elif opts.get("version"):
        write(VERSION + "\n")
    else:
        return False
    return True
