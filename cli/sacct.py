"""`sacct`: accounting records as Slurm 22.05 prints them.

Data: `GET /v1/accounting` (ACCT_ROW rows, one per job run and per step, see
batchd/protocol.py). Layout: fixed-width columns (each cell followed by one space,
header and a dashed line), `-p` (`|` after each field), `-P` (`|` between fields);
values longer than a column are cut and end in `+`. `--format` accepts `Field%N`
(N > 0 right-justified, N < 0 left-justified). Field names are case-insensitive.

Time window (Slurm's rules): without `-S`, a query with `-j` has no lower bound, one
with `-s` starts now, any other starts at midnight today; `-E` defaults to now.
"""

import json
import os
import sys
import time

from batchd.cli import fmt
from batchd.cli.options import Opt, OptionError, parse
from batchd.cli.sacct_fields import (  # noqa: F401  (fmt_size, fmt_cpu_time: sacct's forms)
    CANONICAL,
    EXTRA_WIDTHS,
    FIELD_WIDTHS,
    UNIT_TYPES,
    field_value,
    fmt_cpu_time,
    fmt_size,
)
from batchd.slurm.digits import isdigits

PROG = "sacct"
DEFAULT_FIELDS = "jobid,jobname,partition,account,alloccpus,state,exitcode"
BRIEF_FIELDS = "jobid,state,exitcode"
LONG_FIELDS = ("jobid,jobidraw,jobname,partition,maxvmsize,maxvmsizenode,maxvmsizetask,avevmsize,maxrss,"
               "maxrssnode,maxrsstask,averss,maxpages,maxpagesnode,maxpagestask,avepages,mincpu,mincpunode,"
               "mincputask,avecpu,ntasks,alloccpus,elapsed,state,exitcode,avecpufreq,reqcpufreqmin,"
               "reqcpufreqmax,reqcpufreqgov,reqmem,consumedenergy,maxdiskread,maxdiskreadnode,"
               "maxdiskreadtask,avediskread,maxdiskwrite,maxdiskwritenode,maxdiskwritetask,avediskwrite,"
               "reqtres,alloctres,tresusageinave,tresusageinmax,tresusageinmaxnode,tresusageinmaxtask,"
               "tresusageinmin,tresusageinminnode,tresusageinmintask,tresusageintot,tresusageoutmax,"
               "tresusageoutmaxnode,tresusageoutmaxtask,tresusageoutave,tresusageouttot")

# long state names accepted by -s, with their short forms
STATE_CODES = {"CA": "CANCELLED", "CD": "COMPLETED", "CF": "CONFIGURING", "CG": "COMPLETING",
               "DL": "DEADLINE", "F": "FAILED", "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY",
               "PD": "PENDING", "PR": "PREEMPTED", "R": "RUNNING", "RQ": "REQUEUED", "RS": "RESIZING",
               "RV": "REVOKED", "S": "SUSPENDED", "TO": "TIMEOUT", "BF": "BOOT_FAIL"}

TABLE = [
    Opt("a", "allusers", "none", "allusers"),
    Opt("A", "accounts", "required", "accounts", multi=True),
    Opt("b", "brief", "none", "brief"),
    Opt("D", "duplicates", "none", "duplicates"),
    Opt(None, "delimiter", "required", "delimiter"),
    Opt("e", "helpformat", "none", "helpformat"),
    Opt("E", "endtime", "required", "end"),
    Opt(None, "help", "none", "help"),
    Opt("j", "jobs", "required", "jobs", multi=True),
    Opt(None, "json", "none", "json"),
    Opt("l", "long", "none", "long"),
    Opt(None, "name", "required", "names", multi=True),
    Opt("n", "noheader", "none", "noheader"),
    Opt(None, "noconvert", "none", "noconvert"),
    Opt("o", "format", "required", "format"),
    Opt("p", "parsable", "none", "parsable"),
    Opt("P", "parsable2", "none", "parsable2"),
    Opt("q", "qos", "required", "qos", multi=True),
    Opt("r", "partition", "required", "partitions", multi=True),
    Opt("s", "state", "required", "states", multi=True),
    Opt("S", "starttime", "required", "start"),
    Opt("u", "user", "required", "users", multi=True),
    Opt(None, "units", "required", "units"),
    Opt(None, "usage", "none", "usage"),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt("V", "version", "none", "version"),
    Opt("X", "allocations", "none", "allocations"),
]

USAGE = """Usage: sacct [options]
  -a, --allusers:     Display jobs for all users.
  -A, --accounts:     Use this comma separated list of accounts to select jobs.
  -b, --brief:        Equivalent to '--format=jobstep,state,error'.
  -D, --duplicates:   Show every record of a job that was requeued.
      --delimiter:    ASCII characters used to separate the fields when
                      specifying the -p or -P options (default '|').
  -e, --helpformat:   Print a list of fields that can be specified with the
                      '--format' option.
  -E, --endtime:      Select jobs eligible before this time.
  -j, --jobs:         Format is <job(.step)>. Display information about this
                      job or comma-separated list of jobs.
      --json:         Produce JSON output.
  -l, --long:         Equivalent to specifying a long list of fields.
      --name:         Display jobs that have any of these name(s).
  -n, --noheader:     No header will be added to the beginning of output.
  -o, --format:       Comma separated list of fields (use "--helpformat"
                      for a list of available fields).
  -p, --parsable:     Output will be '|' delimited with a '|' at the end.
  -P, --parsable2:    Output will be '|' delimited without a '|' at the end.
  -q, --qos:          Only send data about jobs using these qos.
  -r, --partition:    Comma separated list of partitions to select jobs.
  -s, --state:        Select jobs based on their state during the time period.
  -S, --starttime:    Select jobs eligible after this time.
  -u, --user:         Use this comma separated list of users to select jobs.
  -X, --allocations:  Only show statistics relevant to the job allocation
                      itself, not taking steps into consideration.
      --noconvert:    Don't convert units from their original type
                      (e.g. 2048M won't be converted to 2G).
      --units:        Display values in specified unit type. [KMGTP]
  -v, --verbose:      Primarily for debugging purposes (accepted).
  -V, --version:      Print version.
      --help:         Print this description of use.
      --usage:        Print a brief description of the sacct options.

  Note, valid start/end time formats are...
       HH:MM[:SS] [AM|PM]
       MMDD[YY] or MM/DD[/YY] or MM.DD[.YY]
       MM/DD[/YY]-HH:MM[:SS]
       YYYY-MM-DD[THH:MM[:SS]]
       today, midnight, noon, now[{+|-}<num>[{seconds|minutes|hours|days|weeks}]]
"""


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def parse_fields(text: str) -> list[tuple[str, int]]:
    """`"JobID%20,jobname,State%-12"` -> [(canonical name, width)]; raises OptionError
    `Invalid field requested: "X"` for a name sacct does not know."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, w = part.partition("%")
        canon = CANONICAL.get(name.lower())
        if canon is None:
            raise OptionError(f'{PROG}: error: Invalid field requested: "{name}"', 1)
        width = FIELD_WIDTHS.get(canon) or EXTRA_WIDTHS[canon]
        if w:
            try:
                width = int(w)
            except ValueError:
                raise OptionError(f'{PROG}: error: Invalid field requested: "{part}"', 1) from None
        out.append((canon, width))
    return out


def render_table(rows: list[dict], fields: list[tuple[str, int]], header: bool = True,
                 parsable: str | None = None, delimiter: str = "|", units: str | None = None,
                 noconvert: bool = False) -> list[str]:
    """Lines of sacct output. `parsable`: None (columns), "p" (trailing delimiter), "P"."""
    lines = []
    if parsable:
        end = delimiter if parsable == "p" else ""
        if header:
            lines.append(delimiter.join(n for n, _ in fields) + end)
        for r in rows:
            lines.append(delimiter.join(field_value(r, n, units, noconvert) for n, _ in fields) + end)
        return lines

    def line(values: list[str], cut: bool = False) -> str:
        cells = []
        for (_, w), v in zip(fields, values, strict=True):
            v = v[:abs(w)] if cut else fmt.truncate_plus(v, w)
            cells.append(v.rjust(w) if w > 0 else v.ljust(-w))
        return " ".join(cells) + " "
    if header:  # Slurm cuts a long header to the width ("TimelimitR"); only values get a "+"
        lines.append(line([n for n, _ in fields], cut=True))
        lines.append(" ".join("-" * abs(w) for _, w in fields) + " ")
    for r in rows:
        lines.append(line([field_value(r, n, units, noconvert) for n, _ in fields]))
    return lines


def helpformat() -> str:
    """`sacct -e`: every field name, four per line, 19 wide."""
    names = list(FIELD_WIDTHS)
    lines = []
    for i in range(0, len(names), 4):
        lines.append(" ".join(f"{n:<19}" for n in names[i:i + 4]))
    return "".join(x + "\n" for x in lines)


def build_query(opts: dict, now: float | None = None) -> dict:
    """The GET /v1/accounting query for the parsed options."""
    now = time.time() if now is None else now
    q = {}
    jobs = _split(opts.get("jobs"))
    states = []
    for s in _split(opts.get("states")):
        name = STATE_CODES.get(s.upper()) or (s.upper() if s.upper() in STATE_CODES.values() else None)
        if name is None:
            raise OptionError(f"{PROG}: error: Invalid state: {s}", 1)
        states.append(name)
    users = _split(opts.get("users"))
    q["fold"] = "1"  # pending array tasks come folded (fold_pending_tasks)
    for key, val in (("ids", jobs), ("users", users), ("accounts", _split(opts.get("accounts"))),
                     ("states", states), ("partitions", _split(opts.get("partitions"))),
                     ("qos", _split(opts.get("qos"))), ("names", _split(opts.get("names")))):
        if val:
            q[key] = ",".join(val)
    try:
        if opts.get("start"):
            q["start"] = str(int(fmt.parse_when(opts["start"], now)))
        elif states:
            q["start"] = str(int(now))
        elif not jobs:
            q["start"] = str(int(fmt.parse_when("midnight", now)))
        if opts.get("end"):
            q["end"] = str(int(fmt.parse_when(opts["end"], now)))
    except ValueError as e:
        raise OptionError(f"{PROG}: error: Invalid time specification: {e}", 1) from None
    if opts.get("allusers") or (users and users != [fmt.current_user()]):
        q["all_users"] = "1"
    if os.getuid() == 0 and not users:
        q["all_users"] = "1"  # root sees every user's jobs, as in Slurm
    if opts.get("duplicates"):
        q["duplicates"] = "1"
    return q


def _exit_json(code: str | None) -> dict:
    """`"0:15"` -> Slurm's JSON exit code object."""
    status, _, sig_text = (code or "0:0").partition(":")
    rc, sig = int(status or 0), int(sig_text or 0)
    if sig:
        return {"status": "SIGNALED", "return_code": rc, "signal": {"signal_id": sig}}
    return {"status": "SUCCESS" if rc == 0 else "FAILED", "return_code": rc}


def _json_time(r: dict) -> dict:
    return {"elapsed": r.get("elapsed_s") or 0, "eligible": int(r.get("eligible") or 0),
            "end": int(r.get("end") or 0), "start": int(r.get("start") or 0),
            "submission": int(r.get("submit") or 0), "suspended": 0}


def to_json(rows: list[dict]) -> str:
    """`--json`: Slurm's dbv0.0.38 shape: one object per job run with its steps nested;
    `state.current` is the state as sacct prints it, TRES are lists of
    `{"type", "name", "id", "count"}`, times are unix seconds."""
    out: list[dict] = []
    for r in rows:
        jid = str(r.get("job_id") or "")
        base, _, step = jid.partition(".")
        if step:
            if out and out[-1]["_id"] == base:
                out[-1]["steps"].append({
                    "step": {"id": jid, "name": r.get("name") or step}, "state": r.get("state"),
                    "exit_code": _exit_json(r.get("exit_code")), "nodes": {"range": r.get("node_list") or ""},
                    "time": _json_time(r), "tres": {"allocated": fmt.tres_list(r.get("alloc_tres"))}})
            continue
        aj, _, task = base.partition("_")
        tl = r.get("time_limit_s")
        out.append({
            "_id": base, "account": r.get("account"), "comment": {"job": r.get("comment") or ""},
            "array": {"job_id": int(aj) if task and isdigits(aj) else 0,
                      "task_id": int(task) if isdigits(task) else None},
            "derived_exit_code": _exit_json(r.get("derived_exit_code")),
            "exit_code": _exit_json(r.get("exit_code")), "group": r.get("group"),
            "job_id": int(r.get("job_id_raw") or 0) if isdigits(str(r.get("job_id_raw") or "")) else base,
            "name": r.get("name"), "nodes": r.get("node_list") or "None assigned",
            "partition": r.get("partition"), "priority": r.get("priority"), "qos": r.get("qos"),
            "required": {"CPUs": r.get("ncpus") or 0, "memory": r.get("req_mem") or 0},
            "restarts": r.get("restarts") or 0,
            "state": {"current": field_value(r, "State").split(" ")[0], "reason": r.get("reason") or "None"},
            "steps": [], "time": dict(_json_time(r), limit=None if tl in (None, -1) else (tl + 59) // 60),
            "tres": {"allocated": fmt.tres_list(r.get("alloc_tres")),
                     "requested": fmt.tres_list(r.get("req_tres"))},
            "user": r.get("user"), "working_directory": r.get("workdir") or ""})
    for j in out:
        del j["_id"]
    return json.dumps({"meta": fmt.json_meta("openapi/dbv0.0.38"), "errors": [], "jobs": out}, indent=2) + "\n"


def fold_pending_tasks(rows: list[dict], more: dict | None = None) -> list[dict]:
    """Pending array tasks (`123_4` rows in state PENDING, never run) print as one
    `123_[4-7]` row, as Slurm keeps them in one master record; other rows unchanged.
    `more`: per array job id (text) task ids of pending tasks that have no row of their
    own (the daemon's `pending_tasks`), folded into that array's row."""
    tasks: dict[str, list[int]] = {str(k): list(v) for k, v in (more or {}).items()}
    for r in rows:
        base, sep, task = str(r.get("job_id") or "").partition("_")
        if sep and isdigits(task) and r.get("state") == "PENDING":
            tasks.setdefault(base, []).append(int(task))
    if not tasks:
        return rows
    out, done = [], set()
    for r in rows:
        base, sep, task = str(r.get("job_id") or "").partition("_")
        if not (sep and isdigits(task) and r.get("state") == "PENDING"):
            out.append(r)
        elif base not in done:
            done.add(base)
            jid = f"{base}_[{fmt.compress_ranges(tasks[base])}]"
            out.append(dict(r, job_id=jid, job_id_raw=base))
    return out


def render(rows: list[dict], opts: dict, more: dict | None = None) -> str:
    """Output text for fetched rows and parsed options (`more`: fold_pending_tasks')."""
    rows = fold_pending_tasks(rows, more)
    if opts.get("allocations"):
        rows = [r for r in rows if "." not in str(r.get("job_id") or "")]
    if opts.get("json"):
        return to_json(rows)
    spec = opts.get("format") or (BRIEF_FIELDS if opts.get("brief") else None) or \
        (LONG_FIELDS if opts.get("long") else None) or os.environ.get("SACCT_FORMAT") or DEFAULT_FIELDS
    fields = parse_fields(spec)
    parsable = "P" if opts.get("parsable2") else ("p" if opts.get("parsable") else None)
    lines = render_table(rows, fields, not opts.get("noheader"), parsable, opts.get("delimiter") or "|",
                         units=opts.get("units"), noconvert=bool(opts.get("noconvert")))
    return "".join(x + "\n" for x in lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, rest = parse(PROG, argv, TABLE)
        if fmt.answered_info(opts, USAGE):
            return 0
        if opts.get("helpformat"):
            fmt.write(helpformat())
            return 0
        if rest:
            raise OptionError(f"{PROG}: error: Unknown arguments: {' '.join(rest)}", 1)
        if opts.get("format"):
            parse_fields(opts["format"])
        if opts.get("units") is not None:
            u = str(opts["units"])[:1].upper()
            if not u or u not in UNIT_TYPES:
                raise OptionError(f"{PROG}: error: Invalid unit type '{str(opts['units'])[:1]}'. "
                                  f"Possible options are {UNIT_TYPES}", 1)
            opts["units"] = u
        q = build_query(opts)
    except OptionError as e:
        sys.stderr.write(e.message + "\n")
        return e.exit_code
    reply = fmt.daemon_call(PROG, "GET", "/v1/accounting", query=q)
    try:
        fmt.write(render(reply.get("records", []), opts, reply.get("pending_tasks")))
    except OptionError as e:
        sys.stderr.write(e.message + "\n")
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
