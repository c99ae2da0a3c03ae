"""`squeue`: the job queue as Slurm 22.05 prints it.

Data: `GET /v1/jobs` (JOB_VIEW rows, see batchd/protocol.py). Layouts: the default
`%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R`, `-l`, `--start`, `-o` with Slurm's `%`
codes, `-O` long field names (20 wide by default, no separator), `--json`.
Rows are sorted by `-S` (default `P,t,-p`: partition, state name, priority descending),
ties keep the daemon's order. Pending array masters print as `123_[4-7%2]`, `-r` prints
one row per task.
"""

import json
import os
import re
import sys
import time

from batchd.cli import fmt, squeue_fields
from batchd.cli.options import Opt, OptionError, parse
from batchd.cli.squeue_fields import CODES, FIELDS, job_value

PROG = "squeue"
DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
STEPS_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"
DEFAULT_SORT = "P,t,-p"
JOB_ID_RE = re.compile(r"^\d+(?:_(?:\d+|\[[\d,\-:%]+\]))?(?:\.\w+)?$")
ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED",
          "RESIZING", "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED")

TABLE = [
    Opt("A", "account", "required", "accounts", multi=True),
    Opt("a", "all", "none", "all"),
    Opt("h", "noheader", "none", "noheader"),
    Opt(None, "help", "none", "help"),
    Opt("i", "iterate", "required", "iterate"),
    Opt("j", "jobs", "optional", "jobs", multi=True),
    Opt(None, "json", "none", "json"),
    Opt("l", "long", "none", "long"),
    Opt(None, "me", "none", "me"),
    Opt("n", "name", "required", "names", multi=True),
    Opt(None, "noconvert", "none", "noconvert"),
    Opt("o", "format", "required", "format"),
    Opt("O", "Format", "required", "Format"),
    Opt("p", "partition", "required", "partitions", multi=True),
    Opt("q", "qos", "required", "qos", multi=True),
    Opt("r", "array", "none", "array"),
    Opt("S", "sort", "required", "sort"),
    Opt("s", "steps", "optional", "steps"),
    Opt(None, "start", "none", "start"),
    Opt("t", "states", "required", "states", multi=True),
    Opt("u", "user", "required", "users", multi=True),
    Opt(None, "usage", "none", "usage"),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt("V", "version", "none", "version"),
    Opt("w", "nodelist", "required", "nodelist", multi=True),
]

USAGE = """Usage: squeue [OPTIONS]
  -A, --account=account(s)        comma separated list of accounts
                                  to view, default is all accounts
  -a, --all                       display jobs in hidden partitions
  -h, --noheader                  no headers on output
  -i, --iterate=seconds           specify an interation period
  -j, --job=job(s)                comma separated list of jobs IDs
                                  to view, default is all
      --json                      Produce JSON output
  -l, --long                      long report
      --me                        equivalent to --user=<my username>
  -n, --name=job_name(s)          comma separated list of job names to view
      --noconvert                 don't convert units from their original type
                                  (e.g. 2048M won't be converted to 2G).
  -o, --format=format             format specification
  -O, --Format=format             format specification
  -p, --partition=partition(s)    comma separated list of partitions
                                  to view, default is all partitions
  -q, --qos=qos(s)                comma separated list of qos's
                                  to view, default is all qos's
  -r, --array                     display one job array element per line
  -S, --sort=fields               comma separated list of fields to sort on
  -s, --steps[=steps]             comma separated list of job steps to view,
                                  default is all
      --start                     print expected start times of pending jobs
  -t, --states=states             comma separated list of states to view,
                                  default is pending and running,
                                  'all' reports all states
  -u, --user=user_name(s)         comma separated list of users to view
  -v, --verbose                   verbosity level
  -V, --version                   output version information and exit
  -w, --nodelist=hostlist         list of nodes to view, default is
                                  all nodes

Help options:
  --help                          show this help message
  --usage                         display a brief summary of squeue options
"""

def expand_arrays(jobs: list[dict]) -> list[dict]:
    """`-r`: a pending array master (`array_task_str` set) becomes one row per task, each
    with `array_task_id` and `display_id` `<array_job_id>_<task>`; other rows unchanged."""
    out = []
    for j in jobs:
        ts = j.get("array_task_str")
        if not ts or j.get("array_task_id") is not None:
            out.append(j)
            continue
        base = j.get("array_job_id") or j.get("id")
        for t in fmt.expand_ranges(ts.strip("[]")):
            c = dict(j)
            c["array_task_id"] = t
            c["array_task_str"] = None
            c["display_id"] = f"{base}_{t}"
            out.append(c)
    return out


def _sort_value(job: dict, code: str) -> object:
    g = job.get
    if code in ("p", "Q"):
        return g("priority") or 0
    if code in ("i", "A", "F"):
        return (g("array_job_id") or g("id") or 0, g("array_task_id") if g("array_task_id") is not None else -1,
                g("id") or 0)
    if code in ("M",):
        return g("run_time_s") or 0
    if code in ("l", "L"):
        tl = g("time_limit_s")
        return float("inf") if tl in (None, fmt.UNLIMITED) else tl
    if code in ("S", "V", "e"):
        key = {"S": "start_time", "V": "submit_time", "e": "end_time"}[code]
        v = g(key) if code != "S" or g("state") != "PENDING" else (g("start_estimate") or g("start_time") or g("begin_time"))
        return float("inf") if v is None else v
    if code in ("D", "C", "y", "U"):
        return g({"D": "nodes", "C": "cpus", "y": "nice", "U": "uid"}[code]) or 0
    if code in ("t", "T"):
        return g("state") or ""
    header_key = CODES.get(code)
    return job_value(job, header_key[1]) if header_key else ""


def sort_jobs(jobs: list[dict], spec: str) -> list[dict]:
    """Sort by a squeue `-S` spec (`"P,t,-p"`): comma separated `%` codes, `-` for
    descending, `+` ascending. Stable: ties keep the input order."""
    out = list(jobs)
    # the tasks of an array come in task order whatever order the daemon used
    slots = [i for i, j in enumerate(out) if j.get("array_job_id") is not None]
    ordered = sorted((out[i] for i in slots), key=lambda j: (j["array_job_id"], j.get("array_task_id") or -1))
    for i, j in zip(slots, ordered, strict=True):
        out[i] = j
    for part in reversed([p.strip() for p in spec.split(",") if p.strip()]):
        desc = part.startswith("-")
        code = part.lstrip("+-")[:1]
        if code:
            out.sort(key=lambda j, c=code: _sort_value(j, c), reverse=desc)  # type: ignore[misc, arg-type]
    return out


# ----------------------------------------------------------------------------- layouts
def format_percent(jobs: list[dict], fmtstr: str, header: bool = True, now: float | None = None) -> list[str]:
    """Lines of a `-o` layout (header first unless `header` is False)."""
    items = fmt.parse_percent_format(fmtstr)
    lines = []
    if header:
        lines.append(fmt.render_percent(items, lambda c: CODES.get(c, (c.upper(), ""))[0]))
    value = _RunCells(now).value
    keys = {it[0]: CODES[it[0]][1] for it in items if not isinstance(it, str) and it[0] in CODES}
    for j in jobs:
        lines.append(fmt.render_percent(items, lambda c, j=j: value(j, keys[c]) if c in keys else ""))
    return lines


#: value keys whose text reads a key that differs between the tasks of a run (fmt.TASK_KEYS)
_TASK_VALUE_KEYS = frozenset({"display_id", "job_id", "array_job_id", "array_task_id"})


class _RunCells:
    """job_value, computed once per run of `squeue -r` (fmt.TaskView) for every value key
    that does not read a task's own ids: the 10,000 tasks of an array differ in those alone."""

    def __init__(self, now: float | None):
        self.now = now
        self.kept: dict[tuple[int, str], str] = {}

    def value(self, j: dict, key: str) -> str:
        run = getattr(j, "run", None)
        if run is None or key in _TASK_VALUE_KEYS:
            return job_value(j, key, self.now)
        k = (id(run), key)
        text = self.kept.get(k)
        if text is None:
            text = self.kept[k] = job_value(j, key, self.now)
        return text


def field_key(name: str) -> tuple[str, str] | None:
    """A `-O` name -> (header, value key), or None when squeue does not know it."""
    return FIELDS.get(name.lower().replace("-", "").replace("_", ""))


def format_fields(jobs: list[dict], fields: list[tuple[str, int, bool]], header: bool = True,
                  now: float | None = None) -> list[str]:
    """Lines of a `-O` layout: each field cut/padded to its width, no separator."""
    specs = []
    for name, width, right in fields:
        hk = field_key(name) or (name.upper(), "empty")
        specs.append((hk, width, right))
    lines = []
    if header:
        lines.append("".join(fmt.cell(hk[0], w, r) for hk, w, r in specs))
    cells = _RunCells(now)
    for j in jobs:
        lines.append("".join(fmt.cell(cells.value(j, hk[1]), w, r) for hk, w, r in specs))
    return lines


def to_json(jobs: list[dict], meta: dict | None = None) -> str:
    """`--json`: Slurm's OpenAPI v0.0.38-like document with the fields batchd knows."""
    out = []
    for j in jobs:
        g = j.get
        tl = g("time_limit_s")
        out.append({
            "account": g("account"), "array_job_id": g("array_job_id") or 0,
            "array_task_id": g("array_task_id"), "array_task_string": (g("array_task_str") or "").strip("[]"),
            "batch_host": g("batch_host") or "", "command": g("command") or "", "comment": g("comment") or "",
            "cpus": g("cpus"), "current_working_directory": g("workdir") or "",
            "dependency": g("dependency") or "", "derived_exit_code": g("derived_exit_code"),
            "eligible_time": int(g("eligible_time") or 0), "end_time": int(g("end_time") or 0),
            "exit_code": g("exit_code"), "group_id": g("gid"), "group_name": g("group"),
            "job_id": g("id"), "job_state": g("state"), "name": g("name"), "nice": g("nice"),
            "node_count": g("nodes"), "nodes": g("node_list") or "", "partition": g("partition"),
            "priority": g("priority"), "qos": g("qos"), "requeue": bool(g("requeue")),
            "restart_cnt": g("restarts") or 0, "standard_error": g("stderr") or "",
            "standard_input": "/dev/null", "standard_output": g("stdout") or "",
            "start_time": int(g("start_time") or 0), "state_reason": g("reason") or "None",
            "submit_time": int(g("submit_time") or 0), "tasks": g("ntasks"),
            "time_limit": None if tl in (None, -1) else (tl + 59) // 60,
            "tres_alloc_str": g("tres_alloc") or "", "tres_req_str": g("tres_req") or "",
            "tres_per_node": g("tres_per_node") or "", "tres_per_job": g("tres_per_job") or "",
            "user_id": g("uid"), "user_name": g("user"),
        })
    return json.dumps({"meta": meta or fmt.json_meta(), "errors": [], "jobs": out}, indent=2) + "\n"


# ----------------------------------------------------------------------------- main
def _split(values: list[str | None] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in (v or "").split(",") if x.strip())
    return out


def build_query(opts: dict) -> tuple[dict, list[str] | None, list[str]]:
    """The GET /v1/jobs query for the parsed options, and the client-side state filter
    (None = the daemon's default, active jobs only)."""
    q = {}
    jobs = _split(opts.get("jobs"))
    for j in jobs:
        if not JOB_ID_RE.match(j):
            raise OptionError(f"{PROG}: error: Invalid job id: {j}", 1)
    users = _split(opts.get("users"))
    if opts.get("me"):
        users.append(fmt.current_user())
    for key, val in (("ids", jobs), ("users", users), ("accounts", _split(opts.get("accounts"))),
                     ("partitions", _split(opts.get("partitions"))), ("names", _split(opts.get("names"))),
                     ("qos", _split(opts.get("qos")))):
        if val:
            q[key] = ",".join(val)
    states = None
    raw_states = _split(opts.get("states"))
    if raw_states:
        if any(s.lower() == "all" for s in raw_states):
            q["all"] = "1"
        else:
            states = []
            for s in raw_states:
                name = fmt.state_name(s)
                if name is None:
                    raise OptionError(f"{PROG}: error: Invalid job state specified: {s}\n"
                                      f"{PROG}: error: Valid job states include: {VALID_STATES}\n", 1)
                states.append(name)
            q["states"] = ",".join(states)
            if any(s not in ACTIVE for s in states):
                q["all"] = "1"
    elif jobs:
        q["all"] = "1"  # an explicit job list shows jobs in any state
    if len(jobs) == 1 and "states" in q:
        # one job: load it whatever its state (as slurm_load_job does), filter here
        del q["states"]
        q["all"] = "1"
    nodes = _split(opts.get("nodelist"))
    if nodes:
        q["nodes"] = ",".join(nodes)  # the daemon narrows; fetch() checks names as given
    keys = view_keys_needed(opts)
    if keys is not None and "steps" not in opts:
        q["keys"] = ",".join(keys)  # the daemon sends only what the table reads (-s reads more)
    if "steps" not in opts:
        # the daemon folds pending array tasks (fold_array_tasks is then a no-op); with -r it
        # sends runs of alike tasks, which fetch() expands
        q["fold"] = "runs" if opts.get("array") else "1"
    return q, states, jobs


def _layout(opts: dict) -> tuple[str, str]:
    """("fields", an -O list) or ("percent", an -o format): what the table prints."""
    fields = opts.get("Format") or (None if opts.get("format") else os.environ.get("SQUEUE_FORMAT2"))
    if fields:
        return "fields", fields
    f = opts.get("format") or os.environ.get("SQUEUE_FORMAT")
    if not f:
        f = START_FORMAT if opts.get("start") else (LONG_FORMAT if opts.get("long") else DEFAULT_FORMAT)
    return "percent", f


#: what every listing reads besides its columns: folding and expanding array tasks,
#: the state and node filters, the sort's tie-breaks
_BASE_KEYS = ("id", "display_id", "array_job_id", "array_task_id", "array_task_str", "array_max_running",
              "state", "node_list")


def view_keys_needed(opts: dict) -> list[str] | None:
    """The JOB_VIEW keys the output reads (the daemon sends only these), None for all
    (--json)."""
    if opts.get("json"):
        return None
    kind, layout = _layout(opts)
    if kind == "fields":
        values = [(field_key(name) or ("", "empty"))[1] for name, _w, _r in fmt.parse_field_list(layout)]
    else:
        values = [CODES[it[0]][1] for it in fmt.parse_percent_format(layout)
                  if not isinstance(it, str) and it[0] in CODES]
    sort = opts.get("sort") or os.environ.get("SQUEUE_SORT") or ("S" if opts.get("start") else DEFAULT_SORT)
    codes = {p.strip().lstrip("+-")[:1] for p in sort.split(",") if p.strip()} | {"i", "S"}
    keys = squeue_fields.view_keys(values) | set(_BASE_KEYS)
    for code in codes:
        keys.update(_SORT_KEYS.get(code, ()))
        if code in CODES:
            keys.update(squeue_fields.view_keys([CODES[code][1]]))
    return sorted(keys)


#: the keys `_sort_value` reads for a sort code (beside job_value's for the others)
_SORT_KEYS = {"p": ("priority",), "Q": ("priority",), "i": ("array_job_id", "id", "array_task_id"),
              "A": ("array_job_id", "id", "array_task_id"), "F": ("array_job_id", "id", "array_task_id"),
              "M": ("run_time_s",), "l": ("time_limit_s",), "L": ("time_limit_s",),
              "S": ("start_time", "state", "start_estimate", "begin_time"), "V": ("submit_time",),
              "e": ("end_time",), "D": ("nodes",), "C": ("cpus",), "y": ("nice",), "U": ("uid",),
              "t": ("state",), "T": ("state",)}


def render(jobs: list[dict], opts: dict, now: float | None = None) -> str:
    """The full output text for already-fetched jobs and parsed options."""
    if opts.get("array"):
        jobs = expand_arrays(jobs)
    else:
        jobs = fmt.fold_array_tasks(jobs)
    start = opts.get("start")
    if start:
        jobs = [j for j in jobs if j.get("state") == "PENDING"]
    sort = opts.get("sort") or os.environ.get("SQUEUE_SORT") or ("S" if start else DEFAULT_SORT)
    if start and not opts.get("sort"):
        jobs = sort_jobs(sort_jobs(jobs, "i"), "S")
    else:
        jobs = sort_jobs(jobs, sort)
    if opts.get("json"):
        return to_json(jobs)
    header = not opts.get("noheader")
    kind, layout = _layout(opts)
    if kind == "fields":
        lines = format_fields(jobs, fmt.parse_field_list(layout), header, now)
    else:
        lines = format_percent(jobs, layout, header, now)
    text = "".join(line + "\n" for line in lines)
    if header and (opts.get("long") or opts.get("iterate") or opts.get("verbose")):
        text = fmt.banner_time(now) + "\n" + text
    return text


def step_rows(jobs: list[dict], steps: list[dict], now: float) -> list[dict]:
    """squeue -s rows: each running job's batch step (on its batch host, timed from the
    job's start) and each of its srun steps, by job id, then step (batch first)."""
    running = {int(j["id"]): j for j in jobs if j.get("state") == "RUNNING"}
    rows = []
    for jid, j in running.items():
        rows.append({"step": f"{j.get('display_id') or jid}.batch", "key": (jid, -1), "name": "batch",
                     "partition": j.get("partition") or "", "user": j.get("user") or "",
                     "time_s": int(j.get("run_time_s") or 0),
                     "node_list": j.get("batch_host") or (j.get("node_list") or "").split(",")[0]})
    for st in steps:
        j = running.get(int(st["job_id"]))
        if j is None:
            continue
        rows.append({"step": f"{j.get('display_id') or st['job_id']}.{st['step_id']}",
                     "key": (int(st["job_id"]), int(st["step_id"])), "name": st.get("name") or "",
                     "partition": j.get("partition") or "", "user": j.get("user") or "",
                     "time_s": int(now - st["start_time"]) if st.get("start_time") else 0,
                     "node_list": st.get("node_list") or ""})
    return sorted(rows, key=lambda r: r["key"])


def show_steps(opts: dict) -> int:
    """`squeue -s [STEPS]`: the job steps of running jobs (filters -j, -u, -p, -s list)."""
    from batchd.cli import client
    jobs, err = fetch(opts)
    if err or jobs is None:
        sys.stderr.write(f"{err}\n")
        return 1
    try:
        steps = client.request("GET", "/v1/steps").get("steps", [])
    except (client.Unreachable, client.DaemonError) as e:
        sys.stderr.write(f"{PROG}: error: {getattr(e, 'message', e)}\n")
        return 1
    rows = step_rows(jobs, steps, time.time())
    wanted = _split([opts["steps"]] if opts.get("steps") else None)
    if wanted:
        rows = [r for r in rows if r["step"] in wanted]
    items = fmt.parse_percent_format(STEPS_FORMAT)
    lines = []
    if not opts.get("noheader"):
        lines.append(fmt.render_percent(items, lambda c: {"i": "STEPID", "j": "NAME", "P": "PARTITION",
                                                           "u": "USER", "M": "TIME", "N": "NODELIST"}[c]))
    for r in rows:
        vals = {"i": r["step"], "j": r["name"], "P": r["partition"], "u": r["user"],
                "M": fmt.fmt_elapsed(r["time_s"]),
                "N": r["node_list"]}
        lines.append(fmt.render_percent(items, lambda c, v=vals: v[c]))
    fmt.write("".join(x + "\n" for x in lines))
    return 0


def _known_user(name: str) -> bool:
    import pwd

    try:
        if name.isascii() and name.isdigit():
            pwd.getpwuid(int(name))
        else:
            pwd.getpwnam(name)
        return True
    except (KeyError, OverflowError):
        return False


def _drop_unknown_users(opts: dict) -> None:
    """`-u` names the system does not know: Slurm 22.05's `squeue: error: Invalid user: X` and a
    blank line on stderr, each dropped (exit 0); none left: no job matches (recorded from the peer)."""
    users = _split(opts.get("users"))
    if not users:
        return
    valid = []
    for u in users:
        if _known_user(u):
            valid.append(u)
        else:
            sys.stderr.write(f"{PROG}: error: Invalid user: {u}\n\n")
    opts["users"] = [",".join(valid)] if valid else None
    if not valid:
        opts["no_user"] = True


#: what Slurm 22.05's squeue lists after an invalid `-t` state (recorded from the peer)
VALID_STATES = ("PENDING,RUNNING,SUSPENDED,COMPLETED,CANCELLED,FAILED,TIMEOUT,NODE_FAIL,PREEMPTED,BOOT_FAIL,"
                "DEADLINE,OUT_OF_MEMORY,COMPLETING,CONFIGURING,RESIZING,RESV_DEL_HOLD,REQUEUED,REQUEUE_FED,"
                "REQUEUE_HOLD,REVOKED,SIGNALING,SPECIAL_EXIT,STAGE_OUT,STOPPED")


def _check_node_names(opts: dict) -> None:
    """`-w` naming a node the cluster does not have: Slurm 22.05's `squeue: error: Invalid
    node name X` for the first such name, exit 1, nothing listed (recorded from the peer).
    A daemon that cannot be asked leaves the check to the listing's own error."""
    from batchd.cli import client

    names = [x for n in _split(opts.get("nodelist")) or [] for x in fmt.expand_hostlist_arg(PROG, n)]
    if not names:
        return
    try:
        known = {n["name"] for n in client.request("GET", "/v1/nodes").get("nodes", [])}
    except (client.Unreachable, client.DaemonError, OSError, ValueError):
        return
    for name in names:
        if name not in known:
            raise OptionError(f"Invalid node name {name}", 1)


def fetch(opts: dict) -> tuple[list[dict] | None, str | None]:
    """Query the daemon; return (jobs, error) after client-side filters."""
    from batchd.cli import client
    if opts.get("no_user"):
        return [], None
    q, states, jobs_list = build_query(opts)
    try:
        reply = client.request("GET", "/v1/jobs", query=q)
    except client.Unreachable as e:
        return None, f"{PROG}: error: {e}"
    except client.DaemonError as e:
        return None, f"slurm_load_jobs error: {e.message}"
    jobs = fmt.expand_task_runs(reply.get("jobs", []), reply.get("task_runs"))
    if states is not None:
        jobs = [j for j in jobs if j.get("state") in states]
    elif q.get("all") != "1":
        jobs = [j for j in jobs if j.get("state") in ACTIVE]
    nodes = _split(opts.get("nodelist"))
    if nodes:
        wanted = set()
        for n in nodes:
            wanted.update(fmt.expand_hostlist_arg(PROG, n))
        jobs = [j for j in jobs if wanted & set(fmt.expand_hostlist(j.get("node_list") or ""))]
    if len(jobs_list) == 1 and "[" not in jobs_list[0] and not reply.get("jobs") and not reply.get("task_runs"):
        return None, "slurm_load_jobs error: Invalid job id specified"
    return jobs, None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, rest = parse(PROG, argv, TABLE)
        if fmt.answered_info(opts, USAGE):
            return 0
        if opts.get("jobs") and None in opts["jobs"] and rest:
            # `-j 123`: -j takes an optional argument, so the list follows as a word
            opts["jobs"] = [x for x in opts["jobs"] if x] + [rest.pop(0)]
        if rest:  # squeue takes no other positional arguments
            raise OptionError(f"{PROG}: error: Unrecognized option: {rest[0]}\n"
                              f'Try "{PROG} --help" for more information', 1)
        for name, _w, _r in fmt.parse_field_list(opts.get("Format") or ""):
            if field_key(name) is None:
                raise OptionError(f"Invalid job format specification: {name}", 1)
        _drop_unknown_users(opts)
        if opts.get("noconvert"):
            squeue_fields.NOCONVERT = True
        build_query(opts)  # validates -t before any request
        _check_node_names(opts)
        iterate = opts.get("iterate")
        if fmt.bad_iterate(iterate):
            raise OptionError(f"{PROG}: error: --iterate={iterate} must be a positive integer", 1)
        if "steps" in opts:  # -s alone (no list) or --steps=LIST
            return fmt.refresh(lambda: show_steps(opts), iterate)
    except OptionError as e:
        msg = e.message if e.message.startswith(PROG) or "\n" in e.message else f"{PROG}: error: {e.message}"
        sys.stderr.write(msg + "\n")
        return e.exit_code

    def show() -> int:
        jobs, err = fetch(opts)
        if err or jobs is None:
            sys.stderr.write(f"{err}\n")
            return 1
        fmt.write(render(jobs, opts))
        return 0

    return fmt.refresh(show, iterate)


if __name__ == "__main__":
    sys.exit(main())
