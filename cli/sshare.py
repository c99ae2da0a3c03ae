"""`sshare`: fair-share information per association, as Slurm prints it.

    sshare [-a] [-l] [-A ACCTS] [-u USERS] [-U] [-m] [-n] [-o FIELDS] [-p|-P] [--snapshot FILE]

Computes locally from a snapshot: the live one from the daemon (`GET /v1/snapshot`)
or, with `--snapshot FILE`, a `batchd plan` snapshot file (docs/snapshot.md, with
its `users` and `usage` keys), so a tree and its usage can be replayed offline.
Without `-a` or `-u`, user rows are those of the calling user (account rows are
always shown, as Slurm does). Exit 0, 1 on an error.

Startup must stay fast: no click, no sqlalchemy, no http.client here.
"""

import json
import os
import sys

from batchd.cli.options import Opt, OptionError, die, parse

PROG = "sshare"

OPTIONS = [
    Opt("a", "all", "none", "all"),
    Opt("A", "accounts", "required", "accounts", multi=True),
    Opt("e", "helpformat", "none", "helpformat"),
    Opt("h", None, "none", "noheader"),
    Opt("l", "long", "none", "long"),
    Opt("m", "partition", "none", "partition"),
    Opt("M", "clusters", "required", "clusters"),
    Opt(None, "cluster", "required", "clusters"),
    Opt("n", "noheader", "none", "noheader"),
    Opt("o", "format", "required", "format", multi=True),
    Opt("p", "parsable", "none", "parsable", const="p"),
    Opt("P", "parsable2", "none", "parsable", const="P"),
    Opt("u", "users", "required", "users", multi=True),
    Opt("U", "Users", "none", "users_only"),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt("V", "version", "none", "version"),
    Opt(None, "help", "none", "help"),
    Opt(None, "usage", "none", "help"),
    Opt(None, "snapshot", "required", "snapshot"),
]

USAGE = """\
Usage:  sshare [OPTION]
  Valid OPTIONs are:
    -a or --all            list all users
    -A or --accounts=      display specific accounts (comma separated list)
    -e or --helpformat     Print a list of fields that can be specified
                           with the '--format' option
    -l or --long           include normalized usage in output
    -m or --partition      print the partition part of the association
    -M or --cluster=names  clusters to issue commands to (ignored: one cluster)
    -n or --noheader       omit header from output
    -o or --format=        Comma separated list of fields (use
                           "--helpformat" for a list of available fields).
    -p or --parsable       '|' delimited output with a trailing '|'
    -P or --parsable2      '|' delimited output without a trailing '|'
    -u or --users=         display specific users (comma separated list)
    -U or --Users          display only user information
    -v or --verbose        display more information
    -V or --version        display tool version number
          --snapshot=FILE  compute from a `batchd plan` snapshot file
      -h or --help         display this usage description
          --usage          display this usage description
"""


def _error(msg, code=1):
    sys.stderr.write(f"{PROG}: error: {msg}\n")
    sys.exit(code)


def load_snapshot(path, prog, query=None):
    """The snapshot dict from `path`, or from the daemon when `path` is None (`query`: the
    request's, e.g. {"jobs": "running"})."""
    if path is None:
        from batchd.cli.client import call

        return call(prog, "GET", "/v1/snapshot", query=query)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        _error(f"cannot read snapshot {path}: {e.strerror or e}")
    except ValueError as e:
        _error(f"snapshot {path} is not valid JSON: {e}")
    if not isinstance(data, dict):
        _error(f"snapshot {path} is not a JSON object")
    return data


def _names(values):
    out = []
    for v in values or []:
        out.extend(x.strip().strip("'\"") for x in v.split(",") if x.strip())
    return out


def _current_user():
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER", "")


def _version():
    try:
        from importlib.metadata import version

        return version("batchd")
    except Exception:  # noqa: BLE001 - version lookup is best effort
        return "unknown"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, _rest = parse(PROG, argv, OPTIONS)
    except OptionError as e:
        die(e)
    if opts.get("help"):
        sys.stdout.write(USAGE)
        return 0
    if opts.get("version"):
        sys.stdout.write(f"batchd {_version()}\n")
        return 0
    from batchd.cli import sshare_table as table
    from batchd.priority import merge_policy, share_rows

    if opts.get("helpformat"):
        names = [f[0] for f in table.FIELDS]
        out = []
        for i, n in enumerate(names):
            out.append(("\n" if i and not i & 3 else " " if i else "") + f"{n:<17}")
        sys.stdout.write("".join(out) + "\n")
        return 0

    # sshare reads the running jobs only (TRESRunMins); the pending ones are not sent
    snapshot = load_snapshot(opts.get("snapshot"), PROG, {"jobs": "running"})
    try:
        policy = merge_policy(None, snapshot)
        rows = share_rows(snapshot, None)
        users = _names(opts.get("users"))
        if opts.get("all") or users == ["-1"]:
            user_filter = None
        elif users:
            user_filter = users
        else:
            user_filter = [_current_user()]
        accounts = _names(opts.get("accounts")) or None
        rows = table.filter_rows(rows, user_filter, accounts, bool(opts.get("users_only")))
        spec = ",".join(opts["format"]) if opts.get("format") else table.default_fields(
            policy["fairshare_algorithm"], bool(opts.get("long")), bool(opts.get("partition")))
        fields = table.resolve_fields(spec)
        run_mins, order = table.tres_run_mins(snapshot, policy)
        text = table.render(rows, fields, parsable=opts.get("parsable", ""), header=not opts.get("noheader"),
                            cluster=str(snapshot.get("cluster") or "cluster"), run_mins=run_mins,
                            tres_order=order, tres_raw=table.tres_raw_mins(snapshot, order),
                            grp_mins={str(a.get("name")): a["policy"]["grp_tres_mins"]
                                      for a in snapshot.get("accounts") or []
                                      if isinstance(a.get("policy"), dict) and a["policy"].get("grp_tres_mins")})
    except ValueError as e:
        _error(str(e))
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
