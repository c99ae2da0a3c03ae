"""`bjobs`: batchd's jobs in LSF's layout.

Data: `GET /v1/jobs` (JOB_VIEW rows, batchd/protocol.py); queue = account. By default
the caller's unfinished jobs; `-u USER|all` other users, `-a` also recently finished
ones, `-d` only those, `-p` pending ones with their reasons, `-r` running ones, `-s`
suspended ones, `-J NAME`, `-q QUEUE`, job ids (`123`, `123[4]`, finished ones too).
Layout: LSF's default columns (`JOBID USER STAT QUEUE FROM_HOST EXEC_HOST JOB_NAME
SUBMIT_TIME`, long values cut to `*` + their end unless `-w`), `-p` without EXEC_HOST
and with one ` reason;` line per job, `-l` the long form.

Rows: running and suspended jobs first, then pending, then finished, each by job id.
Array elements show the array's job id and `name[index]`, as LSF does.
Exit: 0; 255 when a job given by id is not found or the options are wrong.

The helpers at the top (LSF's STAT of a job, its pending reason in LSF's words, LSF job
ids `123[4]`, the LSF command-line parser) are bkill's too.
"""

import sys
import time

from batchd.cli import fmt
from batchd.cli.lsf import LsfError
from batchd.slurm.digits import isdigits


# ------------------------------------------------------- LSF's view of a job (also bkill's)
def job_id_arg(text: str) -> str | None:
    """A bjobs/bkill job argument (`123`, `123[4]`, `"123[4]"`) -> batchd's id text
    (`123`, `123_4`), or None when it is not a job id."""
    import re

    m = re.match(r"^(\d+)(?:\[(\d+)\])?$", text.strip().strip("\"'"))
    if not m:
        return None
    return m.group(1) + (f"_{m.group(2)}" if m.group(2) else "")


_HELD = ("JobHeldUser", "JobHeldAdmin", "job requeued in held state")
_EXIT_STATES = ("FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE")


def stat(job: dict) -> str:
    """A JOB_VIEW's LSF status: PEND, PSUSP (held while pending), RUN, USUSP, DONE, EXIT."""
    state = job.get("state") or ""
    if state in ("PENDING", "REQUEUED", "REQUEUE_HOLD"):
        if state == "REQUEUE_HOLD" or (job.get("reason") or "") in _HELD:
            return "PSUSP"
        return "PEND"
    if state in ("RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT"):
        return "RUN"
    if state in ("SUSPENDED", "STOPPED"):
        return "USUSP"
    if state == "COMPLETED":
        return "DONE"
    if state in _EXIT_STATES:
        return "EXIT"
    return state[:5] or "UNKWN"


# Slurm reason codes -> LSF's wording of bjobs -p
_REASONS = {
    "None": "New job is waiting for scheduling",
    "Priority": "Job is waiting for higher-priority jobs in the queue to start",
    "Resources": "Not enough GPUs, job slots or memory available on the hosts",
    "Dependency": "Job dependency condition not satisfied",
    "DependencyNeverSatisfied": "Dependency condition invalid or never satisfied",
    "BeginTime": "The job has not yet reached its specified begin time",
    "JobHeldUser": "The job was suspended by the user while pending",
    "JobHeldAdmin": "The job was suspended by LSF admin or root while pending",
    "ReqNodeNotAvail": "The specified hosts are not available",
    "PartitionTimeLimit": "The run limit is larger than the queue's limit",
    "QOSMaxGRESPerUser": "The user has reached the GPU limit of the job's QOS",
    "JobArrayTaskLimit": "The job array has reached its job slot limit",
}


def pending_reason(job: dict) -> str:
    """The `bjobs -p` line for a pending job (without the leading space and trailing `;`):
    LSF's wording where there is one, else the Slurm reason code. Account (queue) limits
    read as the queue's limit."""
    reason = job.get("reason") or "None"
    text = _REASONS.get(reason)
    if text:
        return text
    if reason.startswith("AssocGrp"):
        return f"The queue has reached its {reason[8:]} limit ({reason})"
    if reason.startswith("AssocMax") or reason.startswith("QOS"):
        return f"A limit of the queue or QOS is reached ({reason})"
    return reason


def submit_time(epoch: float | None) -> str:
    """LSF's short SUBMIT_TIME (`Nov 30 15:54`, local time); empty for None."""
    if not epoch:
        return ""
    return time.strftime("%b %d %H:%M", time.localtime(epoch))


def truncate(text: object, width: int) -> str:
    """LSF's truncation of a long column value: `*` then its last width-1 characters."""
    s = "" if text is None else str(text)
    if len(s) <= width:
        return s
    return "*" + s[len(s) - width + 1:]


def parse_args(prog: str, argv: list[str], table: dict[str, tuple[str, bool]]) -> tuple[dict, list[str]]:
    """LSF's command line for bjobs/bkill: single-dash options of one or more letters,
    `table` mapping `-opt` -> (key, takes a value); every other argument is positional
    (anywhere on the line; all after `--`). Returns (values, positionals); a value given
    twice keeps the last. Raises LsfError for an unknown option or a missing value."""
    values, rest, i = {}, [], 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            rest.extend(argv[i:])
            break
        if not a.startswith("-") or a == "-" or isdigits(a.lstrip("-")):
            rest.append(a)
            continue
        spec = table.get(a)
        value = None
        if spec is None and len(a) > 2 and table.get(a[:2], (None, False))[1]:
            spec, value = table[a[:2]], a[2:]
        if spec is None:
            raise LsfError(f"{prog}: illegal option -- {a.lstrip('-')}\n"
                           f"Usage: {prog} -h for help")
        key, takes = spec
        if takes and value is None:
            if i >= len(argv):
                raise LsfError(f"{prog}: option requires an argument -- {a.lstrip('-')}")
            value = argv[i]
            i += 1
        values[key] = value if takes else True
    return values, rest


def lsf_id(display_id: object) -> str:
    """batchd's `123_4` -> LSF's `123[4]`; other ids unchanged."""
    s = str(display_id)
    jid, sep, task = s.partition("_")
    return f"{jid}[{task}]" if sep and isdigits(task) else s


PROG = "bjobs"
OPTIONS = {
    "-u": ("user", True), "-a": ("all", False), "-d": ("done", False), "-l": ("long", False),
    "-p": ("pending", False), "-r": ("running", False), "-s": ("suspended", False),
    "-w": ("wide", False), "-W": ("wide", False), "-J": ("name", True), "-q": ("queue", True),
    "-m": ("host", True), "-noheader": ("noheader", False), "-h": ("help", False),
    "--help": ("help", False), "-V": ("version", False), "--version": ("version", False),
}
HEADER = ("JOBID", "USER", "STAT", "QUEUE", "FROM_HOST", "EXEC_HOST", "JOB_NAME", "SUBMIT_TIME")
WIDTHS = (7, 7, 5, 10, 11, 11, 10)
DASHES = "-" * 78

HELP = """Usage: bjobs [-a] [-d] [-l] [-p] [-r] [-s] [-w] [-noheader] [-u user_name | -u all]
             [-J job_name] [-q queue_name] [-m host_name] [job_ID | "job_ID[index]" ...]

Show batchd jobs in LSF's layout (queue = batchd account).

  -a               also jobs that finished recently (DONE, EXIT)
  -d               only jobs that finished recently
  -l               long format: every detail of each job
  -p               pending jobs only, with the reason each is pending
  -r               running jobs only
  -s               suspended jobs only (PSUSP held, USUSP suspended)
  -w, -W           wide format: values are not truncated
  -noheader        no header line
  -u user | all    jobs of this user, or of every user (default: your own)
  -J job_name      jobs with this name
  -q queue         jobs in this queue (batchd account)
  -m host          jobs running on this host
  job_ID ...       these jobs (also finished ones), 123 or "123[4]" for an array element
  -h, --help       this help
  -V, --version    the version

STAT: PEND pending, PSUSP held while pending, RUN running, USUSP suspended,
DONE completed with exit code 0, EXIT failed, cancelled, timed out or preempted.
"""

_ORDER = {"RUN": 0, "USUSP": 0, "SSUSP": 0, "PEND": 1, "PSUSP": 1, "DONE": 2, "EXIT": 2}


def query(opts: dict, ids: list[str]) -> dict[str, str]:
    """The GET /v1/jobs query for the options and job ids (already in batchd's form)."""
    q = {}
    user = opts.get("user")
    if ids:
        q["ids"] = ",".join(ids)
        q["all"] = "1"
        if user and user != "all":
            q["users"] = user
    else:
        if user != "all":
            q["users"] = user or fmt.current_user()
        if opts.get("all") or opts.get("done"):
            q["all"] = "1"
    if opts.get("queue"):
        q["accounts"] = opts["queue"]
    if opts.get("name"):
        q["names"] = opts["name"]
    return q


def select(jobs: list[dict], opts: dict) -> list[dict]:
    """Keep the jobs the state options ask for, in bjobs' order: without -a, -d or job
    ids (`opts["ids"]`) only unfinished ones."""
    want: tuple[str, ...] | None = None
    if opts.get("pending"):
        want = ("PEND", "PSUSP")
    elif opts.get("running"):
        want = ("RUN",)
    elif opts.get("suspended"):
        want = ("PSUSP", "USUSP", "SSUSP")
    elif opts.get("done"):
        want = ("DONE", "EXIT")
    elif not opts.get("all") and not opts.get("ids"):
        # the daemon also returns jobs that have just ended; bjobs shows unfinished ones
        want = ("PEND", "PSUSP", "RUN", "USUSP", "SSUSP")
    out = [j for j in jobs if want is None or stat(j) in want]
    host = opts.get("host")
    if host:
        out = [j for j in out if host in fmt.expand_hostlist(j.get("node_list") or "")]
    return sorted(out, key=lambda j: (_ORDER.get(stat(j), 3), j.get("array_job_id") or j["id"],
                                      j.get("array_task_id") or 0))


def job_id(job: dict) -> str:
    """The JOBID column: the array's id for an array element, as LSF."""
    return str(job.get("array_job_id") or job["id"])


def job_name(job: dict) -> str:
    """The JOB_NAME column: `name[index]` for an array element."""
    name = job.get("name") or ""
    if job.get("array_task_id") is not None and job.get("array_job_id") is not None:
        return f"{name}[{job['array_task_id']}]"
    return name


def exec_hosts(job: dict) -> list[str]:
    """EXEC_HOST values, one per host: `host` or `N*host` for N tasks on it; [] while pending."""
    if stat(job) in ("PEND", "PSUSP"):
        return []
    hosts = fmt.expand_hostlist(job.get("node_list") or "")
    if not hosts:
        return []
    per = max(1, int(job.get("ntasks") or 1) // len(hosts))
    return [f"{per}*{h}" if per > 1 else h for h in hosts]


def short_lines(jobs: list[dict], opts: dict) -> list[str]:
    """The default (or -p) table as lines."""
    pending = bool(opts.get("pending"))
    wide = bool(opts.get("wide"))
    cols = [i for i in range(8) if not (pending and i == 5)]

    def row(values: tuple[str, ...]) -> str:
        cells = []
        for i in cols:
            v = values[i]
            if i < 7:
                if not wide and i > 0:
                    v = truncate(v, WIDTHS[i])
                v = v.ljust(WIDTHS[i])
            cells.append(v)
        return " ".join(cells).rstrip()

    lines = [] if opts.get("noheader") else [row(HEADER)]
    for j in jobs:
        hosts = exec_hosts(j)
        st = stat(j)
        lines.append(row((job_id(j), j.get("user") or "", st, j.get("account") or "",
                          j.get("submit_host") or "", hosts[0] if hosts else "", job_name(j),
                          submit_time(j.get("submit_time")))))
        if not pending:
            for h in hosts[1:]:
                lines.append(" " * 45 + h)
        if pending and st in ("PEND", "PSUSP"):
            lines.append(f" {pending_reason(j)};")
    return lines


def _when(epoch: float | None) -> str:
    return time.strftime("%a %b %d %H:%M:%S", time.localtime(epoch)) if epoch else ""


def long_lines(job: dict) -> list[str]:
    """`bjobs -l` for one job (LSF's long form, not wrapped at 80 columns)."""
    st = stat(job)
    project = job.get("comment") or "default"
    out = [f"Job <{lsf_id(job.get('display_id') or job['id'])}>, Job Name <{job_name(job)}>, "
           f"User <{job.get('user')}>, Project <{project}>, Status <{st}>, Queue <{job.get('account')}>, "
           f"Command <{job.get('command') or job.get('name') or ''}>"]
    sub = (f"{_when(job.get('submit_time'))}: Submitted from host <{job.get('submit_host') or ''}>, "
           f"CWD <{job.get('workdir') or ''}>")
    if job.get("stdout"):
        sub += f", Output File <{job['stdout']}>"
    if job.get("stderr") and job.get("stderr") != job.get("stdout"):
        sub += f", Error File <{job['stderr']}>"
    sub += f", {job.get('ntasks') or 1} Task(s)"
    if job.get("tres_per_node"):
        sub += f", Requested Resources <{job['tres_per_node']}>"
    if job.get("dependency"):
        sub += f", Dependency Condition <{job['dependency']}>"
    out.append(sub + ";")
    limit = job.get("time_limit_s")
    if limit not in (None, -1):
        out += ["", " RUNLIMIT", f" {limit / 60:.1f} min"]
    if job.get("start_time") and st not in ("PEND", "PSUSP"):
        hosts = exec_hosts(job)
        out.append("")
        out.append(f"{_when(job['start_time'])}: Started {job.get('ntasks') or 1} Task(s) on Host(s) "
                   f"<{'> <'.join(hosts)}>, Allocated {job.get('cpus') or 1} Slot(s) on Host(s) "
                   f"<{'> <'.join(hosts)}>, Execution CWD <{job.get('workdir') or ''}>;")
    if st in ("DONE", "EXIT") and job.get("end_time"):
        status, _, sig = (job.get("exit_code") or "0:0").partition(":")
        if st == "DONE":
            what = "Done successfully."
        elif sig not in ("", "0"):
            what = f"Exited by signal {sig}. The CPU time used is unknown."
        elif job.get("state") != "FAILED":
            what = f"Exited ({job.get('state')}) with exit code {status}."
        else:
            what = f"Exited with exit code {status}."
        out.append(f"{_when(job['end_time'])}: {what}")
    if st in ("PEND", "PSUSP"):
        out += ["", " PENDING REASONS:", f" {pending_reason(job)};"]
    out += ["", " SCHEDULING PARAMETERS:", f" Slurm state <{job.get('state')}>, reason <{job.get('reason')}>, "
            f"priority <{job.get('priority')}>, partition <{job.get('partition')}>, qos <{job.get('qos')}>"]
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bjobs` console script."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, args = parse_args(PROG, argv, OPTIONS)
    except LsfError as e:
        sys.stderr.write(e.message + "\n")
        return 255
    if opts.get("help"):
        fmt.write(HELP)
        return 0
    if opts.get("version"):
        fmt.write("batchd bjobs (LSF-compatible front-end) 0.1\n")
        return 0
    ids = []
    for a in args:
        i = job_id_arg(a)
        if i is None:
            sys.stderr.write(f"{a}: Illegal job ID.\n")
            return 255
        ids.append(i)
    jobs = fmt.daemon_call(PROG, "GET", "/v1/jobs", query=query(opts, ids)).get("jobs", [])
    rc = 0
    for i in ids:
        if not any(str(j["id"]) == i or j.get("display_id") == i or str(j.get("array_job_id")) == i
                   for j in jobs):
            sys.stderr.write(f"Job <{lsf_id(i)}> is not found\n")
            rc = 255
    jobs = select(jobs, dict(opts, ids=ids))
    if not jobs:
        if not ids:
            what = ("pending" if opts.get("pending") else "running" if opts.get("running") else
                    "suspended" if opts.get("suspended") else "" if (opts.get("all") or opts.get("done"))
                    else "unfinished")
            sys.stderr.write(f"No {what + ' ' if what else ''}job found\n")
        return rc
    if opts.get("long"):
        blocks = ["\n".join(long_lines(j)) for j in jobs]
        fmt.write(("\n" + DASHES + "\n\n").join(blocks) + "\n")
    else:
        fmt.write("".join(line + "\n" for line in short_lines(jobs, opts)))
    return rc


if __name__ == "__main__":
    sys.exit(main())
