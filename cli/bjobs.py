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
"""

import sys
import time

from batchd.cli import fmt, lsf
from batchd.cli.lsf import LsfError

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


def query(opts, ids):
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


def select(jobs, opts):
    """Keep the jobs the state options ask for, in bjobs' order."""
    want = None
    if opts.get("pending"):
        want = ("PEND", "PSUSP")
    elif opts.get("running"):
        want = ("RUN",)
    elif opts.get("suspended"):
        want = ("PSUSP", "USUSP", "SSUSP")
    elif opts.get("done"):
        want = ("DONE", "EXIT")
    out = [j for j in jobs if want is None or lsf.stat(j) in want]
    host = opts.get("host")
    if host:
        out = [j for j in out if host in fmt.expand_hostlist(j.get("node_list") or "")]
    return sorted(out, key=lambda j: (_ORDER.get(lsf.stat(j), 3), j.get("array_job_id") or j["id"],
                                      j.get("array_task_id") or 0))


def job_id(job):
    """The JOBID column: the array's id for an array element, as LSF."""
    return str(job.get("array_job_id") or job["id"])


def job_name(job):
    """The JOB_NAME column: `name[index]` for an array element."""
    name = job.get("name") or ""
    if job.get("array_task_id") is not None and job.get("array_job_id") is not None:
        return f"{name}[{job['array_task_id']}]"
    return name


def exec_hosts(job):
    """EXEC_HOST values, one per host: `host` or `N*host` for N tasks on it; [] while pending."""
    if lsf.stat(job) in ("PEND", "PSUSP"):
        return []
    hosts = fmt.expand_hostlist(job.get("node_list") or "")
    if not hosts:
        return []
    per = max(1, int(job.get("ntasks") or 1) // len(hosts))
    return [f"{per}*{h}" if per > 1 else h for h in hosts]


def short_lines(jobs, opts):
    """The default (or -p) table as lines."""
    pending = bool(opts.get("pending"))
    wide = bool(opts.get("wide"))
    cols = [i for i in range(8) if not (pending and i == 5)]

    def row(values):
        cells = []
        for i in cols:
            v = values[i]
            if i < 7:
                if not wide and i > 0:
                    v = lsf.truncate(v, WIDTHS[i])
                v = v.ljust(WIDTHS[i])
            cells.append(v)
        return " ".join(cells).rstrip()

    lines = [] if opts.get("noheader") else [row(HEADER)]
    for j in jobs:
        hosts = exec_hosts(j)
        st = lsf.stat(j)
        lines.append(row((job_id(j), j.get("user") or "", st, j.get("account") or "",
                          j.get("submit_host") or "", hosts[0] if hosts else "", job_name(j),
                          lsf.submit_time(j.get("submit_time")))))
        if not pending:
            for h in hosts[1:]:
                lines.append(" " * 45 + h)
        if pending and st in ("PEND", "PSUSP"):
            lines.append(f" {lsf.pending_reason(j)};")
    return lines


def _when(epoch):
    return time.strftime("%a %b %d %H:%M:%S", time.localtime(epoch)) if epoch else ""


def long_lines(job):
    """`bjobs -l` for one job (LSF's long form, not wrapped at 80 columns)."""
    st = lsf.stat(job)
    project = job.get("comment") or "default"
    out = [f"Job <{lsf.lsf_id(job.get('display_id') or job['id'])}>, Job Name <{job_name(job)}>, "
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
        out += ["", " PENDING REASONS:", f" {lsf.pending_reason(job)};"]
    out += ["", " SCHEDULING PARAMETERS:", f" Slurm state <{job.get('state')}>, reason <{job.get('reason')}>, "
            f"priority <{job.get('priority')}>, partition <{job.get('partition')}>, qos <{job.get('qos')}>"]
    return out


def main(argv=None):
    """Entry point of the `bjobs` console script."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, args = lsf.parse_args(PROG, argv, OPTIONS)
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
        i = lsf.job_id_arg(a)
        if i is None:
            sys.stderr.write(f"{a}: Illegal job ID.\n")
            return 255
        ids.append(i)
    jobs = fmt.daemon_call(PROG, "GET", "/v1/jobs", query=query(opts, ids)).get("jobs", [])
    rc = 0
    for i in ids:
        if not any(str(j["id"]) == i or j.get("display_id") == i or str(j.get("array_job_id")) == i
                   for j in jobs):
            sys.stderr.write(f"Job <{lsf.lsf_id(i)}> is not found\n")
            rc = 255
    jobs = select(jobs, opts)
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
