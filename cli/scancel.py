"""`scancel`: cancel or signal jobs, with Slurm 22.05's messages and exit codes.

Request: `POST /v1/jobs/signal` with `{"ids", "filters", "signal", "batch_only"}` (see
batchd/protocol.py). Job ids: `123`, array tasks `123_4`, `123_[1-3,7]`; filters (`-u -A
-n -t -p -q -w --me`) narrow the given ids, or select jobs when no id is given.

Behaviour copied from the recordings (views/02_scancel.txt, 06_scancel_errors.txt):
- an unknown or already finished job is silent and exit 0; with `-v` it prints
  `scancel: error: Kill job error on job id N: Invalid job id specified` (still exit 0);
- other refusals (permission) print that line always and exit 1;
- `scancel abc` -> `scancel: error: Invalid job id abc`; no id and no filter ->
  `scancel: error: No job identification provided`; both exit 1;
- `-v` prints `scancel: Terminating job N` (or `scancel: Signal S to job N`) first.
"""

import re
import signal as _signal
import sys

from batchd.cli import fmt
from batchd.cli.options import Opt, OptionError, parse
from batchd.slurm.digits import isdigits

PROG = "scancel"
JOB_ID_RE = re.compile(r"^\d+(?:_(?:\d+|\[[\d,\-:%]+\]))?(?:\.(?:\d+|batch|extern))?$")
# daemon messages that mean "nothing to cancel": silent unless -v, never an error exit
IGNORED = ("Invalid job id specified", "Job/step already completing or completed")

TABLE = [
    Opt("A", "account", "required", "accounts", multi=True),
    Opt("b", "batch", "none", "batch"),
    Opt("f", "full", "none", "full"),
    Opt("H", "hurry", "none", "hurry"),
    Opt(None, "help", "none", "help"),
    Opt("i", "interactive", "none", "interactive"),
    Opt(None, "me", "none", "me"),
    Opt("n", "name", "required", "names", multi=True),
    Opt(None, "jobname", "required", "names", multi=True),
    Opt("p", "partition", "required", "partitions", multi=True),
    Opt("q", "qos", "required", "qos", multi=True),
    Opt("Q", "quiet", "none", "quiet"),
    Opt("s", "signal", "required", "signal"),
    Opt("t", "state", "required", "states", multi=True),
    Opt("u", "user", "required", "users", multi=True),
    Opt(None, "usage", "none", "usage"),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt("V", "version", "none", "version"),
    Opt("w", "nodelist", "required", "nodelist", multi=True),
]

HELP = """Usage: scancel [OPTIONS] [job_id[_array_id][.step_id]]
  -A, --account=account           act only on jobs charging this account
  -b, --batch                     signal batch shell for specified job
  -f, --full                      signal batch shell and all steps for specified job
  -H, --hurry                     avoid burst buffer stage out
  -i, --interactive               require response from user for each job
  -M, --clusters                  clusters to issue commands to.
                                  NOTE: SlurmDBD must be up.
  -n, --name=job_name             act only on jobs with this name
      --jobname=job_name          the same as --name
  -p, --partition=partition       act only on jobs in this partition
  -Q, --quiet                     disable warnings
  -q, --qos=qos                   act only on jobs with this quality of service
  -R, --reservation=reservation   act only on jobs with this reservation
      --sibling=cluster_name      remove an active sibling job from a federated job
  -s, --signal=name | integer     signal to send to job, default is SIGKILL
  -t, --state=states              act only on jobs in this state.  Valid job
                                  states are PENDING, RUNNING and SUSPENDED
  -u, --user=user_name            act only on jobs of this user
  -V, --version                   output version information and exit
  -v, --verbose                   verbosity level
  -w, --nodelist                  act only on jobs on these nodes
      --me                        equivalent to --user=<my username>

Help options:
  --help                          show this help message
  --usage                         display brief usage message
"""

USAGE = """Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]
               [-p partition] [-Q] [-q qos] [-R reservation] [-s signal | integer]
               [-t PENDING | RUNNING | SUSPENDED] [--usage] [-u user_name]
               [--hurry] [-V] [-v] [-w hosts...] [--wckey=wckey] [--me]
               [job_id[_array_id][.step_id]]
"""


def parse_signal(text: str) -> int:
    """`USR1`, `SIGUSR1`, `usr1` or `10` -> the signal number; ValueError otherwise."""
    t = text.strip()
    if isdigits(t):
        n = int(t)
        if 0 < n < 65:
            return n
        raise ValueError(text)
    name = t.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(getattr(_signal.Signals, name))
    except AttributeError:
        raise ValueError(text) from None


def _split(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def build_request(opts: dict, ids: list[str]) -> dict:
    """The POST /v1/jobs/signal body for the parsed options; raises OptionError on bad input."""
    for i in ids:
        if not JOB_ID_RE.match(i):
            raise OptionError(f"{PROG}: error: Invalid job id {i}", 1)
    filters = {}
    users = _split(opts.get("users"))
    if opts.get("me"):
        users.append(fmt.current_user())
    states = []
    for s in _split(opts.get("states")):
        name = fmt.state_name(s)
        if name is None:
            raise OptionError(f"{PROG}: error: Invalid job state specified: {s}", 1)
        states.append(name)
    for key, val in (("users", users), ("accounts", _split(opts.get("accounts"))),
                     ("names", _split(opts.get("names"))), ("states", states),
                     ("partitions", _split(opts.get("partitions"))), ("qos", _split(opts.get("qos"))),
                     ("nodes", _split(opts.get("nodelist")))):
        if val:
            filters[key] = val
    if not ids and not filters:
        raise OptionError(f"{PROG}: error: No job identification provided", 1)
    sig = None
    if opts.get("signal") is not None:
        try:
            sig = parse_signal(opts["signal"])
        except ValueError:
            raise OptionError(f"{PROG}: error: Invalid job signal: {opts['signal']}", 1) from None
    # --full signals the batch shell and every step: batchd's job is its batch shell's group
    batch = bool(opts.get("batch")) and not opts.get("full")
    return {"ids": [i.split(".")[0] for i in ids], "filters": filters, "signal": sig, "batch_only": batch}


def resolve_nodes(body: dict) -> dict | None:
    """`-w`: the daemon filters by owner, account, ... but not by node, so pick the jobs
    running on those nodes here and send their ids (None when no job matches)."""
    filters = dict(body["filters"])
    wanted = set()
    for n in filters.pop("nodes"):
        wanted.update(fmt.expand_hostlist_arg(PROG, n))
    q = {k: ",".join(v) for k, v in filters.items()}
    if body["ids"]:
        q["ids"] = ",".join(body["ids"])
    jobs = fmt.daemon_call(PROG, "GET", "/v1/jobs", query=q).get("jobs", [])
    ids = [j.get("display_id") or str(j["id"]) for j in jobs
           if wanted & set(fmt.expand_hostlist(j.get("node_list") or ""))]
    if not ids:
        return None
    return dict(body, ids=ids, filters=filters)


def report(reply: dict, body: dict, verbose: bool, quiet: bool = False) -> int:
    """Print the daemon's per-job result as scancel does; return the exit code."""
    rc = 0
    for err in reply.get("errors", []):
        msg = err.get("message", "")
        ignored = any(m in msg for m in IGNORED) or err.get("code") in ("NotFound", "AlreadyDone")
        if ignored and not verbose:
            continue
        if quiet and ignored:
            continue
        what = "Kill job error" if body.get("signal") is None else "Signal job error"
        sys.stderr.write(f"{PROG}: error: {what} on job id {err.get('id')}: {msg}\n")
        if not ignored:
            rc = 1
    return rc


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, ids = parse(PROG, argv, TABLE)
        if fmt.answered_info(opts, USAGE, HELP):
            return 0
        body = build_request(opts, ids)
    except OptionError as e:
        sys.stderr.write(e.message + "\n")
        return e.exit_code
    verbose = bool(opts.get("verbose"))
    if opts.get("interactive") and sys.stdin.isatty():
        keep = []
        for i in body["ids"]:
            sys.stderr.write(f"Cancel job_id={i} ? (y/n) ")
            sys.stderr.flush()
            if sys.stdin.readline().strip().lower().startswith("y"):
                keep.append(i)
        if not keep and not body["filters"]:
            return 0
        body["ids"] = keep
    if verbose:
        for i in body["ids"]:
            if body["signal"] is None:
                sys.stderr.write(f"{PROG}: Terminating job {i}\n")
            else:
                kind = "batch job" if body["batch_only"] else "job"
                sys.stderr.write(f"{PROG}: Signal {body['signal']} to {kind} {i}\n")
    if "nodes" in body["filters"]:
        resolved = resolve_nodes(body)
        if resolved is None:
            return 0
        body = resolved
    reply = fmt.daemon_call(PROG, "POST", "/v1/jobs/signal", body)
    if verbose and not ids:  # jobs chosen by filters: name them once known
        for i in reply.get("done", []):
            sys.stderr.write(f"{PROG}: Terminating job {i}\n" if body["signal"] is None
                             else f"{PROG}: Signal {body['signal']} to job {i}\n")
    return report(reply, body, verbose, bool(opts.get("quiet")))


if __name__ == "__main__":
    sys.exit(main())
