"""`bkill`: cancel or signal batchd jobs with LSF's options and messages.

- `bkill 123 "124[3]"`: those jobs (an array element as `ID[N]`); -u/-J/-q are ignored
  when ids other than 0 are given, as LSF does;
- `bkill 0`: every unfinished job matching -u (default: yours; `all` every user's),
  -J NAME, -q QUEUE, -m HOST, -stat run|pend|susp;
- no id: only the most recently submitted job matching those options (LSF's rule).
`-s SIG` sends a signal (name or number) instead of cancelling; `-r` cancels too.

Messages: `Job <N> is being terminated` (or `... is being signaled`) on stdout per job;
`Job <N>: No matching job found`, `Job <N>: Job has already finished`,
`Job <N>: User permission denied` on stderr; `No unfinished job found` when options
select nothing. Exit 0 when every job was acted on, 255 otherwise.
Requests: `GET /v1/jobs` (to select by options) and `POST /v1/jobs/signal` with ids.
"""

import sys

from batchd.cli import bjobs, fmt
from batchd.cli.lsf import LsfError
from batchd.slurm.digits import isdigits

PROG = "bkill"
OPTIONS = {
    "-u": ("user", True), "-J": ("name", True), "-q": ("queue", True), "-m": ("host", True),
    "-s": ("signal", True), "-r": ("remove", False), "-b": ("bulk", False), "-d": ("done", False),
    "-stat": ("stat", True), "-C": ("_reason", True), "-l": ("list", False), "-app": ("_app", True),
    "-g": ("_group", True), "-sla": ("_sla", True), "-h": ("help", False), "--help": ("help", False),
    "-V": ("version", False), "--version": ("version", False),
}
STAT_GROUPS = {"run": ("RUN",), "pend": ("PEND", "PSUSP"), "susp": ("PSUSP", "USUSP", "SSUSP")}

HELP = """Usage: bkill [-l] [-r | -s signal] [-u user_name | -u all] [-J job_name] [-q queue_name]
             [-m host_name] [-stat run | pend | susp] [-C reason] [-b] [-d]
             [0 | job_ID ... | "job_ID[index]" ...]

Cancel batchd jobs (or send them a signal) with LSF's options. Queue = batchd account.

  job_ID ...       these jobs; "123[4]" is one element of array 123
  0                every unfinished job that matches the options below
  (no job ID)      only your most recently submitted job that matches them
  -u user | all    jobs of this user or of all users (default: your own)
  -J job_name      jobs with this name
  -q queue         jobs in this queue (batchd account)
  -m host          jobs running on this host
  -stat run|pend|susp  only running, pending or suspended jobs
  -s signal        send this signal (KILL, TERM, USR1, 10, ...) instead of cancelling
  -r               cancel at once (the same as without -s in batchd)
  -b, -d, -C reason  accepted, no effect
  -l               list the signal names
  -h, --help       this help
  -V, --version    the version
"""


def parse_signal(text: str) -> int:
    """`USR1`, `SIGUSR1`, `usr1` or `10` -> the signal number; LsfError otherwise."""
    from batchd.cli.sbatch_opts import SIGNALS

    t = text.strip().upper()
    if isdigits(t) and 0 < int(t) < 65:
        return int(t)
    num = SIGNALS.get(t[3:] if t.startswith("SIG") else t)
    if num is None:
        raise LsfError(f"{text}: Illegal signal value")
    return num


def select_query(opts: dict) -> dict[str, str]:
    """The GET /v1/jobs query for bkill 0 / bkill without ids."""
    q = {}
    user = opts.get("user")
    if user != "all":
        q["users"] = user or fmt.current_user()
    if opts.get("queue"):
        q["accounts"] = opts["queue"]
    if opts.get("name"):
        q["names"] = opts["name"]
    return q


def pick(jobs: list[dict], opts: dict, every: bool) -> list[str]:
    """The batchd ids to act on among the unfinished `jobs`: all (bkill 0) or the most
    recently submitted one (a whole array when that is an array)."""
    jobs = [j for j in jobs if bjobs.stat(j) not in ("DONE", "EXIT")]
    if opts.get("stat"):
        want = STAT_GROUPS.get(opts["stat"].lower())
        if want is None:
            raise LsfError(f"{opts['stat']}: Illegal -stat value (run, pend or susp)")
        jobs = [j for j in jobs if bjobs.stat(j) in want]
    if opts.get("host"):
        jobs = [j for j in jobs if opts["host"] in fmt.expand_hostlist(j.get("node_list") or "")]
    if not jobs:
        return []
    if every:
        return [j.get("display_id") or str(j["id"]) for j in jobs]
    last = max(jobs, key=lambda j: (j.get("submit_time") or 0, j.get("array_job_id") or j["id"]))
    return [str(last.get("array_job_id") or last["id"])]


def acted(asked: list[str], done: list) -> list[str]:
    """The ids to report as acted on, in the daemon's order: an array asked for by its
    own id is reported once under that id (as LSF does), not per element."""
    out = []
    for d in done:
        d = str(d)
        whole = next((a for a in asked if "_" not in a and d.startswith(a + "_")), None)
        name = whole or d
        if name not in out:
            out.append(name)
    return out


def message(err: dict) -> str:
    """A daemon error item -> LSF's line."""
    msg = err.get("message") or ""
    jid = bjobs.lsf_id(err.get("id"))
    if "Invalid job id" in msg:
        return f"Job <{jid}>: No matching job found"
    if "completing or completed" in msg:
        return f"Job <{jid}>: Job has already finished"
    if "permission" in msg.lower():
        return f"Job <{jid}>: User permission denied"
    return f"Job <{jid}>: {msg}"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bkill` console script."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, args = bjobs.parse_args(PROG, argv, OPTIONS)
        if opts.get("help"):
            fmt.write(HELP)
            return 0
        if opts.get("version"):
            fmt.write("batchd bkill (LSF-compatible front-end) 0.1\n")
            return 0
        if opts.get("list"):
            from batchd.cli.sbatch_opts import SIGNALS

            fmt.write(" ".join(SIGNALS) + "\n")
            return 0
        sig = parse_signal(opts["signal"]) if opts.get("signal") is not None else None
        ids = []
        for a in args:
            i = bjobs.job_id_arg(a)
            if i is None:
                raise LsfError(f"{a}: Illegal job ID.")
            ids.append(i)
        if not ids or ids == ["0"] or "0" in ids:
            jobs = fmt.daemon_call(PROG, "GET", "/v1/jobs", query=select_query(opts)).get("jobs", [])
            ids = [i for i in ids if i != "0"] + pick(jobs, opts, "0" in ids)
            if not ids:
                sys.stderr.write("No unfinished job found\n")
                return 255
    except LsfError as e:
        sys.stderr.write(e.message + "\n")
        return 255
    body: dict = {"ids": ids, "filters": {}, "signal": sig, "batch_only": False}
    reply = fmt.daemon_call(PROG, "POST", "/v1/jobs/signal", body)
    verb = "terminated" if sig is None else "signaled"
    fmt.write("".join(f"Job <{bjobs.lsf_id(i)}> is being {verb}\n" for i in acted(ids, reply.get("done", []))))
    errors = reply.get("errors", [])
    for err in errors:
        sys.stderr.write(message(err) + "\n")
    return 255 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
