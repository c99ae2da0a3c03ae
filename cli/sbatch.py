"""`sbatch`: submit a batch script to batchd, as Slurm's sbatch does.

Flow: parse the command line (getopt grammar, `cli/options.py`); read the script (file,
stdin, or `--wrap`); read its `#SBATCH` lines (only those before the first command
line); read the `SBATCH_*` variables; merge them with the command line winning over the
environment winning over the script; build the JOB_SPEC of `batchd/protocol.py`; send
`POST /v1/jobs`; print `Submitted batch job N` (`N` with `--parsable`).

Exit codes as Slurm: 0 submitted; 255 an option value Slurm's parser refuses; 1 a
refused submission (`sbatch: error: Batch job submission failed: ...`), an unreadable or
empty script, a getopt error, or an unreachable daemon; with `-W` the job's exit code.

`--export=NONE` (and a `VAR` list) gives the job the user's *login* environment under the
listed variables, as Slurm's `--get-user-env`. batchd approximates the login environment
without running a login shell: HOME, SHELL, USER, LOGNAME from the password database,
MAIL=/var/mail/USER and PATH=/usr/local/bin:/usr/bin:/bin (plus the sbin directories
for root), which is what a Debian login shell sets before any profile script.

Import cost is part of the latency budget (< 40 ms end to end): only builtins,
`_socket` and `_json` (through the client) and the small modules beside this one.
"""

import os
import sys

from batchd.cli import sbatch_opts as so
from batchd.cli.options import OptionError, parse, try_help

PROG = "sbatch"
WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"
# daemon error codes -> the line Slurm prints before "Batch job submission failed"
PRE_LINES = {
    "InvalidPartition": "invalid partition specified: {partition}",
    "MemoryNotSatisfiable": "Memory specification can not be satisfied",
    "AssocMaxSubmitJobLimit": "AssocMaxSubmitJobLimit",
}
def _err(text, code=1):
    sys.stderr.write(f"{PROG}: error: {text}\n")
    sys.exit(code)


def _die(e):
    sys.stderr.write(e.message + "\n")
    sys.exit(e.exit_code)


def script_args(line):
    """The arguments of one `#SBATCH` line (after the magic word): whitespace-separated,
    with '...' and "..." quoting; an unquoted `#` starts a comment."""
    out = []
    cur = []
    have = False
    quote = None
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
            else:
                cur.append(ch)
            continue
        if ch in "'\"":
            quote = ch
            have = True
        elif ch in " \t\r\n":
            if have:
                out.append("".join(cur))
                cur, have = [], False
        elif ch == "#" and not have:
            break
        else:
            cur.append(ch)
            have = True
    if have:
        out.append("".join(cur))
    return out


def directives(script):
    """The `#SBATCH` arguments of a script, in order, read up to the first line that is
    neither blank nor a comment (Slurm ignores later directives)."""
    args = []
    for line in script.split("\n"):
        if line.startswith("#SBATCH"):
            args.extend(script_args(line[7:]))
            continue
        s = line.lstrip()
        if s and not s.startswith("#"):
            break
    return args


def check_script(script):
    """Slurm's sanity checks of a batch script; exits 1 with its messages."""
    if script == "":
        _err("Batch script is empty!")
    if script.strip() == "":
        _err("Batch script contains only whitespace!")
    if not script.startswith("#!"):
        _err("This does not look like a batch script.  The first\n"
             f"{PROG}: error: line must start with #! followed by the path to an interpreter.\n"
             f"{PROG}: error: For instance: #!/bin/sh")
    if "\r\n" in script:
        _err("Batch script contains DOS line breaks (\\r\\n)\n"
             f"{PROG}: error: instead of expected UNIX line breaks (\\n).")


def login_env(uid=None):
    """The approximated login environment (module docstring) of the job's user: the
    calling user, or the `--uid` user root submits for."""
    import pwd

    pw = pwd.getpwuid(os.getuid() if uid is None else uid)
    path = "/usr/local/bin:/usr/bin:/bin"
    if pw.pw_uid == 0:
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return {"HOME": pw.pw_dir, "SHELL": pw.pw_shell or "/bin/sh", "USER": pw.pw_name,
            "LOGNAME": pw.pw_name, "MAIL": f"/var/mail/{pw.pw_name}", "PATH": path}


def read_env_file(path):
    """`--export-file`: NUL- or newline-separated VAR=val entries."""
    try:
        with open(path, "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        _err(f"Could not open user environment file {path}")
    sep = "\0" if "\0" in data else "\n"
    out = {}
    for item in data.split(sep):
        k, eq, val = item.partition("=")
        if eq and k:
            out[k] = val
    return out


def split_quoted(text):
    """Split an --export list at commas outside quotes; quotes are removed
    (`A='x,y',B` -> ["A=x,y", "B"]), as Slurm's find_quote_token."""
    out, cur, quote = [], [], None
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
            else:
                cur.append(ch)
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [t for t in out if t]


def job_environment(export, environ, export_file=None, uid=None):
    """The environment the job starts from (before the daemon adds SLURM_* output
    variables), following Slurm's --export rules; see the module docstring. `uid`: the
    job's user when it is not the caller (`--uid`), whose login environment NONE gives."""
    env = read_env_file(export_file) if export_file else {}
    raw = export if export is not None else "ALL"
    up = raw.upper()
    slurm_vars = {k: v for k, v in environ.items() if k.startswith("SLURM_")}
    if up == "ALL":
        env.update(environ)
        return env
    if up == "NIL":
        env.update(slurm_vars)
    elif up == "NONE":
        env.update(login_env(uid))
        env.update(slurm_vars)
    else:
        picked = {}
        for tok in split_quoted(raw):
            if tok.upper() == "ALL":
                picked.update(environ)
            elif "=" in tok:
                k, _, val = tok.partition("=")
                picked[k] = val
            elif tok in environ:
                picked[tok] = environ[tok]
        picked.update(slurm_vars)
        env.update(login_env(uid))
        env.update(picked)
    env["SLURM_EXPORT_ENV"] = raw
    if up != "NIL":
        env["SLURM_GET_USER_ENV"] = "1"
    return env


def build(argv, environ, stdin=None, cwd=None):
    """(spec, options) for a command line: the complete JOB_SPEC and the merged option
    values. Exits (SystemExit) for help, version and every refusal, as sbatch does."""
    try:
        # getopt errors exit 255 in Slurm 22.05's sbatch (recorded: unrecognized, ambiguous,
        # missing argument), unlike squeue's 1
        cli, rest = parse(PROG, argv, so.TABLE, stop_at_positional=True, exit_code=255)
    except OptionError as e:
        _die(e)
    if cli.get("help") or cli.get("usage"):
        from batchd.cli.sbatch_help import HELP, USAGE

        sys.stdout.write(HELP if cli.get("help") else USAGE)
        sys.exit(0)
    if cli.get("version"):
        sys.stdout.write("slurm 22.05.8 (batchd)\n")
        sys.exit(0)
    wrap = cli.get("wrap")
    if wrap is not None and rest:
        _err("Script arguments not permitted with --wrap option")
    cwd = cwd or os.getcwd()
    script_path = None
    if wrap is not None:
        script = WRAP_HEADER + wrap + "\n"
        default_name = "wrap"
    elif rest:
        script_path = rest[0]
        try:
            with open(script_path, "rb") as f:
                script = f.read().decode(errors="replace")
        except OSError:
            _err(f"Unable to open file {script_path}")
        default_name = os.path.basename(script_path)
    else:
        stream = stdin if stdin is not None else sys.stdin
        script = stream.read()
        default_name = None
    check_script(script)
    try:
        from_script, _ = parse(PROG, directives(script), so.TABLE, exit_code=255)
        from_env, _ = parse(PROG, so.env_argv(environ), so.TABLE, exit_code=255)
    except OptionError as e:
        _die(e)
    merged = dict(from_script)
    merged.update(from_env)
    merged.update(cli)
    try:
        so.mem_options(cli, merged)
        spec = so.build_spec(merged)
    except OptionError as e:
        _die(e)
    name = merged.get("name")
    if wrap is not None and "name" not in cli:
        # --wrap names the job "wrap" unless -J is on the command line
        name = merged.get("name") if "name" in from_env else "wrap"
    spec["name"] = name or default_name or "sbatch"
    spec["unnamed"] = name is None and default_name is None
    spec["script"] = script
    spec["script_path"] = script_path
    spec["argv"] = rest[1:] if script_path else []
    spec["submit_dir"] = cwd
    chdir = merged.get("chdir")
    spec["workdir"] = os.path.normpath(os.path.join(cwd, chdir)) if chdir else cwd
    spec["export"] = merged.get("export", "ALL")
    spec["environment"] = job_environment(merged.get("export"), environ, merged.get("export_file"),
                                          spec.get("uid"))
    spec["submit_host"] = os.uname().nodename.split(".")[0]
    spec["wrap"] = wrap is not None
    spec["parsable"] = bool(merged.get("parsable"))
    spec["clusters"] = merged.get("clusters")
    return spec, merged


def _exit_status(job):
    code = str(job.get("exit_code") or "0:0")
    status, _, sig = code.partition(":")
    try:
        return int(status) if int(sig or 0) == 0 else 1
    except ValueError:
        return 1


def wait_for(job_id, request):
    """-W: poll until every task of the job is final; the highest task exit status."""
    import time

    from batchd.protocol import JOB_STATES_FINAL

    delay = 0.2
    while True:
        reply = request("GET", "/v1/jobs", query={"ids": str(job_id), "all": "1"})
        jobs = reply.get("jobs", [])
        if jobs and all(j.get("state") in JOB_STATES_FINAL for j in jobs):
            return max(_exit_status(j) for j in jobs)
        time.sleep(delay)
        delay = min(delay * 1.5, 2.0)


def submit(spec, request):
    """Send the spec with a fresh submission token; returns the reply. Prints Slurm's
    refusal lines and exits 1 on error. A reply lost to a daemon that died after storing
    the job is recovered by resending the same token (batchd.cli.client.submit_job): the
    daemon then answers with the job it stored, and one stderr line says so."""
    from batchd.cli.client import DaemonError, Unreachable, new_submit_token, submit_job

    if not spec.get("test_only"):
        spec = dict(spec, submit_token=new_submit_token())
    try:
        reply, lost = submit_job(spec, request)
        if lost and reply.get("duplicate"):
            sys.stderr.write(f"{PROG}: the daemon's reply was lost (it restarted after storing the job); "
                             f"the retry found it: the job was submitted once, as job {reply.get('job_id')}\n")
        return reply
    except Unreachable as e:
        _err(str(e))
    except (OSError, ValueError) as e:
        # the daemon went away mid-request or answered garbage: one line, no traceback
        _err(f"Batch job submission failed: the batchd daemon did not answer ({e})")
    except DaemonError as e:
        pre = PRE_LINES.get(e.code)
        if pre:
            sys.stderr.write(f"{PROG}: error: {pre.format(**{'partition': spec.get('partition')})}\n")
        if getattr(e, "detail", None) and hints_wanted():  # batchd's explanation, after Slurm's line
            sys.stderr.write(f"{PROG}: error: Batch job submission failed: {e.message}\n")
            _err(e.detail, e.exit_code or 1)
        _err(f"Batch job submission failed: {e.message}", e.exit_code or 1)
    return None


#: options Slurm accepts that batchd takes and ignores: one warning each on stderr
IGNORED = {"mail_type": "--mail-type is ignored: batchd sends no mail",
           "mail_user": "--mail-user is ignored: batchd sends no mail",
           "_container": "--container is ignored: batchd runs no OCI containers"}


def hints_wanted():
    """batchd's explanations after Slurm's error lines go to a person: on a terminal, or with
    BATCHD_HINTS=1. In pipes and scripts stderr stays Slurm's to the letter (scripts match
    on it; BATCHD_HINTS=0 turns them off on a terminal too)."""
    flag = os.environ.get("BATCHD_HINTS")
    if flag is not None:
        return flag == "1"
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def warn_ignored(merged):
    """Warn once per option batchd accepts without acting on it (Slurm accepts them silently;
    a user should not believe mail will come)."""
    for key, text in IGNORED.items():
        if merged.get(key):
            sys.stderr.write(f"{PROG}: warning: {text}\n")


def main(argv=None):
    """Entry point of the `sbatch` console script."""
    from batchd.cli.client import request

    argv = sys.argv[1:] if argv is None else argv
    spec, merged = build(argv, dict(os.environ))
    if hints_wanted():
        warn_ignored(merged)
    reply = submit(spec, request)
    if spec["test_only"]:
        start = reply.get("start_time")
        import time

        when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)) if start else "Unknown"
        sys.stderr.write(f"{PROG}: Job {reply.get('job_id') or 0} to start at {when} using "
                         f"{reply.get('cpus', 1)} processors on nodes {reply.get('nodes', '')} "
                         f"in partition {reply.get('partition', '')}\n")
        return 0
    job_id = reply["job_id"]
    if spec["parsable"]:
        cluster = f";{spec['clusters']}" if spec.get("clusters") else ""
        sys.stdout.write(f"{job_id}{cluster}\n")
    elif not merged.get("quiet"):
        sys.stdout.write(f"Submitted batch job {job_id}\n")
    sys.stdout.flush()
    if spec["wait"]:
        from batchd.cli.client import DaemonError, Unreachable

        try:
            return wait_for(job_id, request)
        except (DaemonError, Unreachable, OSError, ValueError) as e:
            _err(getattr(e, "message", None) or str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "build", "directives", "script_args", "job_environment", "try_help"]
