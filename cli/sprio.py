"""`sprio`: the multifactor priority of pending jobs and its parts, as Slurm prints it.

    sprio [-l] [-n] [-w] [-j JOBS] [-u USERS] [-p PARTS] [-o FORMAT] [-h] [--snapshot FILE]

Computes locally from a snapshot: the live one from the daemon (`GET /v1/snapshot`)
or, with `--snapshot FILE`, a `batchd plan` snapshot file. Weights come from the
snapshot's `policy` (the daemon puts its `[priority]` configuration there). Exit 0,
1 on an error.

Startup must stay fast: no click, no sqlalchemy, no http.client here.
"""

import sys

from batchd.cli.options import Opt, OptionError, die, parse
from batchd.slurm.digits import isdigits

PROG = "sprio"

OPTIONS = [
    Opt("h", "noheader", "none", "noheader"),
    Opt("j", "jobs", "optional", "jobs", multi=True),
    Opt("l", "long", "none", "long"),
    Opt("M", "clusters", "required", "clusters"),
    Opt("n", "norm", "none", "norm"),
    Opt("o", "format", "required", "format"),
    Opt("p", "partition", "required", "partitions", multi=True),
    Opt("S", "sort", "required", "sort"),
    Opt("u", "user", "required", "users", multi=True),
    Opt(None, "users", "required", "users", multi=True),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt("V", "version", "none", "version"),
    Opt("w", "weights", "none", "weights"),
    Opt(None, "help", "none", "help"),
    Opt(None, "usage", "none", "usage"),
    Opt(None, "snapshot", "required", "snapshot"),
]

HELP = """\
Usage: sprio [OPTIONS]
  -h, --noheader                  no headers on output
  -j, --jobs                      comma separated list of jobs
                                  to view, default is all
  -l, --long                      long report
  -n, --norm                      display normalized values
  -o, --format=format             format specification
  -p, --partition=partition_name  comma separated list of partitions
  -S, --sort=sort_list            comma separated list of fields to sort on
  -u, --user=user_name            comma separated list of users to view
      --users=user_name           the same as --user
  -M, --clusters=cluster_name     accepted for compatibility (batchd is one cluster)
  -v, --verbose                   verbosity level
  -V, --version                   output version information and exit
  -w, --weights                   show the weights for each priority factor
      --snapshot=FILE             compute from a `batchd plan` snapshot file

Help options:
  --help                          show this help message
  --usage                         display a brief summary of sprio options
"""
USAGE = "Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partition_name[s]] [--usage] [-hlnvVw]\n"

_SORT = {"i": lambda f: (0, int(f.job_id)) if isdigits(f.job_id) else (1, f.job_id),
         "r": lambda f: f.partition, "u": lambda f: f.user, "y": lambda f: f.priority,
         "Y": lambda f: f.priority, "o": lambda f: f.account, "n": lambda f: f.qos}


def _error(msg, code=1):
    sys.stderr.write(f"{PROG}: error: {msg}\n")
    sys.exit(code)


def _names(values):
    out = []
    for v in values or []:
        if v:
            out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def _sort(rows, spec):
    """Slurm's -S: comma list of letters, '-' prefix = descending; applied right to left."""
    for item in reversed([s.strip() for s in spec.split(",") if s.strip()]):
        desc = item.startswith("-")
        key = _SORT.get(item.lstrip("+-")[:1])
        if key is None:
            _error(f"Invalid sort specification: {item}")
        rows.sort(key=key, reverse=desc)
    return rows


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, rest = parse(PROG, argv, OPTIONS)
    except OptionError as e:
        die(e)
    if opts.get("help"):
        sys.stdout.write(HELP)
        return 0
    if opts.get("usage"):
        sys.stdout.write(USAGE)
        return 0
    if opts.get("version"):
        from batchd.cli.sshare import _version

        sys.stdout.write(f"batchd {_version()}\n")
        return 0
    jobs_opt = opts.get("jobs")
    jobs = _names(jobs_opt)
    if jobs_opt is not None and rest:  # `sprio -j 12,13` as getopt leaves it
        jobs.extend(_names([rest.pop(0)]))
    if rest:
        sys.stderr.write(f"{PROG}: error: Unrecognized option: {rest[0]}\n")
        sys.stdout.write(USAGE)
        return 1
    for j in jobs:
        if not isdigits(j.split("_")[0]) or int(j.split("_")[0]) <= 0:
            _error(f"Invalid job id: {j}")

    from batchd.cli import sprio_table as table
    from batchd.cli.sshare import load_snapshot
    from batchd.priority import merge_policy, priority_rows

    snapshot = load_snapshot(opts.get("snapshot"), PROG)
    users = _names(opts.get("users"))
    try:
        policy = merge_policy(None, snapshot)
        rows = priority_rows(snapshot, None)
        fmt = opts.get("format") or table.default_format(
            policy, long=bool(opts.get("long")), normalized=bool(opts.get("norm")), users=bool(users))
        table.parse_format(fmt)
    except ValueError as e:
        _error(str(e))
    if jobs:
        rows = [r for r in rows if r.job_id in jobs]
    if users:
        rows = [r for r in rows if r.user in users]
    parts = _names(opts.get("partitions"))
    if parts:
        rows = [r for r in rows if r.partition in parts]
    rows = _sort(rows, opts.get("sort") or "i")
    if jobs and not rows and not opts.get("weights"):
        sys.stdout.write("Unable to find jobs matching user/id(s) specified\n")
        return 0
    sys.stdout.write(table.render(rows, fmt, policy, header=not opts.get("noheader"),
                                  weights=bool(opts.get("weights")),
                                  cluster=str(snapshot.get("cluster") or "cluster")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
