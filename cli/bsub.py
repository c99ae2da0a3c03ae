"""`bsub`: submit a batch job with LSF's options; the job is an ordinary batchd job.

Flow: parse LSF's command line (single-dash options, some of several letters: `-cwd`,
`-oo`, `-gpu`); take the job from a script file (a first argument that is a file
starting with `#!`), from a command line (`bsub sleep 10`, wrapped in a /bin/sh
script as LSF runs it through a shell), or from stdin (`bsub < job.sh`, prompting
`bsub> ` on a terminal); read the script's `#BSUB` lines (those before its first
command; the command line wins over them); translate to Slurm terms (`cli/lsf.py`,
docs/lsf.md) and build the JOB_SPEC with sbatch's own `build_spec`, so bsub and
sbatch give the daemon the same thing for the same request; send `POST /v1/jobs`;
print `Job <N> is submitted to queue <Q>.` (`default queue` when -q was not given).

Exit codes: 0 submitted; 255 on every refusal (a bad option or value, an SSH or X11
interactive job, a submission the daemon refuses, an unreachable daemon), with LSF's
`<reason>. Job not submitted.` on stderr; with -K, -I, -Ip or -Is the job's exit code
(-I* run the job as `srun` outside a job does: batchd.cli.srun_alloc.run_prepared).

Startup must stay fast: builtins and the small modules beside this one only (no click,
no sqlalchemy, no http.client, no dataclasses).
"""

from __future__ import annotations

import os
import sys

from batchd.cli import lsf
from batchd.cli.lsf import LsfError
from batchd.slurm.digits import isdigits

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: startup budget
    from collections.abc import Callable, Mapping
    from typing import NoReturn, TextIO

    from batchd.cli.lsf import Resolver

PROG = "bsub"
TAIL = ". Job not submitted."

# option -> (key, takes a value). Keys starting with "_" are accepted and ignored.
OPTIONS = {
    "-J": ("name", True), "-q": ("queue", True), "-n": ("ntasks", True), "-W": ("runlimit", True),
    "-o": ("out_append", True), "-oo": ("out_trunc", True), "-e": ("err_append", True),
    "-eo": ("err_trunc", True), "-cwd": ("cwd", True), "-P": ("project", True), "-gpu": ("gpu", True),
    "-R": ("resreq", True), "-M": ("memlimit", True), "-w": ("dependency", True), "-H": ("hold", False),
    "-b": ("begin", True), "-sp": ("sp", True), "-x": ("exclusive", False), "-m": ("hosts", True),
    "-r": ("rerun", False), "-rn": ("norerun", False), "-i": ("input", True), "-is": ("input", True),
    "-u": ("mail_user", True), "-B": ("mail_begin", False), "-N": ("mail_end", False),
    "-K": ("wait", False), "-env": ("env", True), "-h": ("help", False), "-V": ("version", False),
    "--help": ("help", False), "--version": ("version", False),
    "-I": ("interactive_plain", False), "-Ip": ("interactive_pty", False), "-Is": ("interactive_shell", False),
    "-IS": ("interactive", False), "-ISp": ("interactive", False), "-ISs": ("interactive", False),
    "-IX": ("interactive", False), "-t": ("termtime", True),
    "-We": ("_estimate", True), "-L": ("_login_shell", True), "-G": ("_user_group", True),
    "-g": ("_job_group", True), "-app": ("_app", True), "-sla": ("_sla", True), "-Lp": ("_lp", True),
    "-E": ("_pre_exec", True), "-Ep": ("_post_exec", True), "-a": ("_esub", True),
    "-c": ("_cpu_limit", True), "-D": ("_data_limit", True), "-F": ("_file_limit", True),
    "-S": ("_stack_limit", True), "-v": ("_swap_limit", True), "-p": ("_process_limit", True),
    "-T": ("_thread_limit", True), "-C": ("_core_limit", True), "-U": ("reservation", True),
    "-Q": ("_requeue_exit", True), "-s": ("_signal", True), "-ul": ("_ulimit", False),
    "-Zs": ("_spool", False), "-Jd": ("_description", True),
}

HELP = """Usage: bsub [options] [command [arguments]]
       bsub [options] < script
       bsub [options] script [arguments]     (a file starting with #!)

Submit a batch job to batchd with LSF's options. Queue = batchd account.

  -J name[idx]%N   job name; name[1-10:2]%3 submits a job array (%N throttle)
  -q queue         queue = the batchd account to charge (default: your default account)
  -n min[,max]     number of tasks (slots); max is ignored
  -W [hour:]minute  run limit (minutes)
  -o file          stdout, appended (%J = job id, %I = array index); stderr too unless -e;
                   a directory gets <job id>.out (-e: <job id>.err) in it
  -oo file         stdout, overwritten
  -e file          stderr, appended
  -eo file         stderr, overwritten
  -cwd dir         working directory of the job
  -P project       project name, stored as the job's comment
  -gpu "num=N[:gmodel=TYPE][:mig=PROFILE][:j_exclusive=yes]"
                   GPUs per host; mig= a MIG profile such as 1g.24gb; "-" = one GPU
  -R "res_req"     rusage[mem=X] (per host, MB unless KB/MB/GB/TB given or
                   LSF_UNIT_FOR_LIMITS says otherwise), rusage[ngpus_physical=N],
                   span[hosts=N], span[ptile=N], affinity[core(N)]; other sections ignored
  -M mem_limit     memory per host when -R gives no rusage[mem]
  -w 'condition'   dependency: done(ID), ended(ID), exit(ID), started(ID), ID, names;
                   && (all) or || (any), not both; ID[N] array elements
  -H               submit held (release with scontrol release)
  -b [[[YY:]MM:]DD:]hh:mm  do not start before that time
  -sp priority     user priority 1-100 (default 50): nice = 50 - priority
  -x               exclusive use of the hosts
  -m "host ..."    run on these hosts
  -r | -rn         rerunnable (requeue on preemption) or not
  -i file          stdin of the job
  -u user -B -N    mail options: accepted with a warning, no mail is sent
  -K               wait for the job to finish; exit with its exit code
  -env "all|none|VAR[=val], ..."  environment given to the job (default all)
  -I               interactive: wait for the job, its output here, stdin to it
  -Ip, -Is         interactive on a pseudo-terminal (-Is: for a shell, bsub -Is bash)
  -IS, -ISp, -ISs, -IX  refused: batchd has no SSH or X11 forwarding
  -t time          refused: batchd has no termination deadlines (use -W)
  -U name          refused: batchd has no advance reservations (sbatch --reservation)
  -h, --help       this help
  -V, --version    the version

Accepted and ignored: -We -L -G -g -app -sla -Lp -E -Ep -a -c -D -F -S -v -p -T -C
-Q -s -ul -Zs -Jd.
#BSUB lines before a script's first command act as options; the command line wins.
"""


def fail(text: str) -> NoReturn:
    """Print `<text>. Job not submitted.` and exit 255, as LSF's bsub."""
    text = text.rstrip()
    if text.endswith("."):
        text = text[:-1]
    sys.stderr.write(text + TAIL + "\n")
    sys.exit(255)


def parse(argv: list[str], from_script: bool = False) -> tuple[dict, list[str]]:
    """LSF's command line -> (values, rest). Values map OPTIONS keys to the last value
    given (`resreq` to the list of every -R); parsing stops at the first argument that
    is not an option (the command) or after `--`. Raises LsfError."""
    values: dict = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            return values, argv[i:]
        if not a.startswith("-") or a == "-":
            return values, argv[i - 1:]
        spec = OPTIONS.get(a)
        value = None
        if spec is None and len(a) > 2 and OPTIONS.get(a[:2], (None, False))[1]:
            spec, value = OPTIONS[a[:2]], a[2:]  # -n4, -Jname
        if spec is None:
            raise LsfError(f"{PROG}: illegal option -- {a.lstrip('-')}\n"
                           "Usage: bsub [options] command [arguments]; bsub -h for help")
        key, takes = spec
        if takes and value is None:
            if i >= len(argv):
                raise LsfError(f"{PROG}: option requires an argument -- {a.lstrip('-')}")
            value = argv[i]
            i += 1
        if key == "resreq":
            values.setdefault("resreq", []).append(value)
        else:
            values[key] = value if takes else True
    return values, []


def directives(script: str) -> list[str]:
    """The `#BSUB` arguments of a script, read up to its first command line."""
    from batchd.cli.sbatch import script_args

    args = []
    for line in script.split("\n"):
        if line.startswith("#BSUB"):
            args.extend(script_args(line[5:]))
            continue
        s = line.lstrip()
        if s and not s.startswith("#"):
            break
    return args


def _first_command(script: str) -> str | None:
    for line in script.split("\n"):
        s = line.strip()
        if s and not s.startswith("#"):
            return s
    return None


def read_job(rest: list[str], stdin: TextIO | None) -> tuple[str, str | None, list[str], str, bool]:
    """(script, script_path, argv, default_name, parse_directives) for the positional
    arguments, or for stdin when there are none."""
    if rest:
        first = rest[0]
        if os.path.isfile(first):
            try:
                with open(first, "rb") as f:
                    head = f.read(2)
                    text = (head + f.read()).decode(errors="replace") if head == b"#!" else None
            except OSError:
                text = None
            if text is not None:
                return text, first, rest[1:], " ".join(rest), True
        return "#!/bin/sh\n" + " ".join(rest) + "\n", None, [], " ".join(rest), False
    stream = stdin if stdin is not None else sys.stdin
    if stream.isatty():
        lines = []
        while True:
            sys.stdout.write("bsub> ")
            sys.stdout.flush()
            line = stream.readline()
            if not line:
                sys.stdout.write("\n")
                break
            lines.append(line)
        text = "".join(lines)
    else:
        text = stream.read()
    if not text.strip():
        fail("No command is specified")
    if not text.startswith("#!"):
        text = "#!/bin/sh\n" + text
    return text, None, [], _first_command(text) or "bsub", True


def _export(env: str) -> str:
    """`-env` value -> sbatch's --export value."""
    toks = [t.strip() for t in env.split(",") if t.strip()]
    return ",".join(t.upper() if t.lower() in ("all", "none") else t for t in toks) or "ALL"


def to_slurm(v: dict, resolve_name: Resolver | None = None,
             environ: Mapping[str, str] | None = None) -> tuple[dict, dict]:
    """LSF option values -> (sbatch option values for `build_spec`, JOB_SPEC overrides).
    Raises LsfError with the reason for a value batchd refuses."""
    environ = os.environ if environ is None else environ
    if v.get("interactive"):
        raise LsfError(f"{PROG}: interactive jobs over SSH or X11 (-IS, -ISp, -ISs, -IX) are not "
                       "supported by batchd: use -I, -Ip or -Is")
    if "termtime" in v:
        raise LsfError(f"{PROG}: -t (termination time) is not supported by batchd: use -W")
    s, extra = {}, {}
    if v.get("name") is not None:
        s["name"], arr = lsf.split_array_name(v["name"])
        if arr:
            s["array"] = arr
    for key, skey in (("queue", "account"), ("project", "comment"), ("input", "input"),
                      ("mail_user", "mail_user"), ("reservation", "reservation")):
        if v.get(key) is not None:
            s[skey] = v[key]
    if v.get("mail_begin") or v.get("mail_end"):
        s["mail_type"] = ",".join(t for k, t in (("mail_begin", "BEGIN"), ("mail_end", "END")) if v.get(k))
    if v.get("ntasks") is not None:
        n = v["ntasks"].split(",")[0].strip()
        if not isdigits(n) or int(n) <= 0:
            raise LsfError(f"{v['ntasks']}: Bad argument for option -n")
        s["ntasks"] = n
    if v.get("runlimit") is not None:
        extra["time_limit_s"] = lsf.runlimit_s(v["runlimit"])
    out = v.get("out_trunc") if v.get("out_trunc") is not None else v.get("out_append")
    err = v.get("err_trunc") if v.get("err_trunc") is not None else v.get("err_append")
    if out is not None:
        s["output"] = lsf.output_pattern(out, "array" in s)
    if err is not None:
        s["error"] = lsf.output_pattern(err, "array" in s)
    if out is not None or err is not None:
        trunc = v.get("out_trunc") is not None if out is not None else v.get("err_trunc") is not None
        extra["open_mode"] = "truncate" if trunc else "append"
    unit = environ.get("LSF_UNIT_FOR_LIMITS", "MB")
    req = lsf.parse_resreq(v.get("resreq") or [], unit)
    if "mem_mb" in req:
        extra["mem_mb"] = req["mem_mb"]
    elif v.get("memlimit") is not None:
        extra["mem_mb"] = lsf.mem_mb(v["memlimit"], unit)
    for key in ("nodes", "ntasks_per_node", "cpus_per_task"):
        if key in req:
            s[key] = str(req[key])
    gpu = lsf.parse_gpu(v["gpu"]) if v.get("gpu") is not None else None
    if gpu is None and req.get("gpus"):
        gpu = {"name": "gpu", "type": None, "count": req["gpus"]}
    extra["gres"] = [gpu] if gpu else []
    if v.get("dependency") is not None:
        s["dependency"] = lsf.convert_dependency(v["dependency"], resolve_name)
    if v.get("hold"):
        s["hold"] = True
    if v.get("begin") is not None:
        extra["begin_time"] = lsf.begin_time(v["begin"])
    if v.get("sp") is not None:
        if not isdigits(v["sp"]) or not 0 < int(v["sp"]) < 2**31:  # LSF's priority is a C int
            raise LsfError(f"{v['sp']}: Bad argument for option -sp")
        extra["nice"] = 50 - int(v["sp"])
    if v.get("exclusive"):
        s["exclusive"] = None
    if v.get("hosts") is not None:
        s["nodelist"] = ",".join(v["hosts"].replace(",", " ").split())
    if v.get("rerun") or v.get("norerun"):
        s["requeue"] = not v.get("norerun")
    if v.get("wait"):
        s["wait"] = True
    if v.get("env") is not None:
        s["export"] = _export(v["env"])
    return s, extra


def build(argv: list[str], environ: dict[str, str], stdin: TextIO | None = None, cwd: str | None = None,
          resolve_name: Resolver | None = None) -> tuple[dict, dict]:
    """(spec, values) for a bsub command line: the complete JOB_SPEC (as sbatch builds it,
    `lsf` true) and the merged LSF option values. Exits (SystemExit) for help, version
    and every refusal."""
    from batchd.cli import sbatch, sbatch_opts
    from batchd.cli.options import OptionError

    try:
        cli, rest = parse(argv)
    except LsfError as e:
        sys.stderr.write(e.message + "\n")
        sys.exit(255)
    if cli.get("help"):
        sys.stdout.write(HELP)
        sys.exit(0)
    if cli.get("version"):
        sys.stdout.write("batchd bsub (LSF-compatible front-end) 0.1\n")
        sys.exit(0)
    cwd = cwd or os.getcwd()
    script, script_path, args, default_name, embedded = read_job(rest, stdin)
    merged: dict = {}
    if embedded:
        try:
            merged, _ = parse(directives(script), from_script=True)
        except LsfError as e:
            fail(f"#BSUB line: {e.message}")
    resreq = cli.get("resreq") or merged.get("resreq")
    merged.update(cli)
    if resreq:
        merged["resreq"] = resreq
    try:
        s, extra = to_slurm(merged, resolve_name, environ)
        spec = sbatch_opts.build_spec(s)
    except LsfError as e:
        fail(e.message)
    except OptionError as e:
        fail(e.message.replace("sbatch: error: ", "").replace("sbatch: fatal: ", ""))
    spec.update(extra)
    spec["lsf"] = True
    spec["name"] = s.get("name") or default_name
    spec["unnamed"] = False
    spec["script"] = script
    spec["script_path"] = script_path
    spec["argv"] = args
    spec["submit_dir"] = cwd
    wd = merged.get("cwd")
    spec["workdir"] = os.path.normpath(os.path.join(cwd, wd)) if wd else cwd
    for key, suffix in (("output", "out"), ("error", "err")):
        path = spec.get(key)
        if path and (path.endswith("/") or os.path.isdir(os.path.join(spec["workdir"], path.replace("%%", "%")))):
            # LSF: an output directory gets the file <job id>.out (.err) in it
            spec[key] = path.rstrip("/") + f"/%A.{suffix}"
    spec["export"] = s.get("export", "ALL")
    spec["environment"] = sbatch.job_environment(s.get("export"), environ)
    spec["submit_host"] = os.uname().nodename.split(".")[0]
    spec["wrap"] = False
    spec["parsable"] = False
    spec["clusters"] = None
    return spec, merged


def _name_resolver(request: Callable[..., dict]) -> Resolver:
    def resolve(name: str) -> list[int]:
        from batchd.cli.client import DaemonError, Unreachable
        from batchd.cli.fmt import current_user

        try:
            reply = request("GET", "/v1/jobs", query={"names": name, "users": current_user(), "all": "1"})
        except (DaemonError, Unreachable) as e:
            raise LsfError(f"{name}: {e}") from None
        return sorted({j.get("array_job_id") or j["id"] for j in reply.get("jobs", [])})
    return resolve


def submit(spec: dict, request: Callable[..., dict]) -> dict:
    """Send the spec with a fresh submission token; the reply. Prints LSF's refusal line
    and exits 255 on error. A reply lost to a daemon that died after storing the job is
    recovered by resending the same token (batchd.cli.client.submit_job); one stderr
    line says so."""
    from batchd.cli.client import DaemonError, Unreachable, new_submit_token, submit_job

    spec = dict(spec, submit_token=new_submit_token())
    try:
        reply, lost = submit_job(spec, request)
        if lost and reply.get("duplicate"):
            sys.stderr.write(f"{PROG}: the daemon's reply was lost (it restarted after storing the job); "
                             f"the retry found it: the job was submitted once, as job <{reply.get('job_id')}>\n")
        return reply
    except Unreachable as e:
        fail(f"{PROG}: {e}")
    except (OSError, ValueError) as e:
        fail(f"{PROG}: the batchd daemon did not answer ({e})")
    except DaemonError as e:
        if e.code == "InvalidAccount":
            fail(f"{spec.get('account') or 'default'}: No such queue, or you may not submit to it")
        if e.code == "InvalidNice":
            fail("-sp: only administrators may give a job a priority above 50")
        if e.detail:  # batchd's explanation (GPU types here, the most CPUs a host has)
            fail(f"{e.message}: {e.detail}")
        fail(e.message)
    return None


#: bsub's interactive modes: -I (output and stdin relayed), -Ip and -Is (a pseudo-terminal)
INTERACTIVE = ("interactive_plain", "interactive_pty", "interactive_shell")


def _interactive(spec: dict, merged: dict, request: Callable[..., dict]) -> int:
    """bsub -I, -Ip, -Is: the job runs as srun outside a job runs it (batchd.cli.srun_alloc),
    with LSF's lines on stderr (`Job <N> is submitted to ... queue <Q>.`, `<<Waiting for
    dispatch ...>>`, `<<Starting on HOST>>`); bsub exits with the command's exit code."""
    from batchd.cli import srun_alloc

    if merged.get("input") is not None:
        fail("-i: an interactive job reads the terminal, not a file")
    if spec.get("array"):
        fail("an interactive job cannot be a job array")
    command = ["/bin/sh", "-c", spec["script"].split("\n", 1)[1]] if not spec.get("script_path") else \
        [spec["script_path"], *spec.get("argv", [])]

    class Lsf(srun_alloc.Voice):
        task_lines = False

        def submitted(self, job_id: int, spec: dict) -> None:
            queue = spec.get("account")
            where = f"queue <{queue}>" if queue else f"default queue <{_queue_of(job_id, request)}>"
            sys.stderr.write(f"Job <{job_id}> is submitted to {where}.\n<<Waiting for dispatch ...>>\n")
            sys.stderr.flush()

        def queued(self, job_id: int) -> None:
            pass

        def started(self, job_id: int, view: dict, was_queued: bool) -> None:
            host = srun_alloc.first_node(view)
            sys.stderr.write(f"<<Starting on {host}>>\n")
            sys.stderr.flush()

    return srun_alloc.run_prepared(spec, command, pty=bool(merged.get("interactive_pty") or
                                                          merged.get("interactive_shell")),
                                   voice=Lsf(), submit=lambda s: int(submit(s, request)["job_id"]))


def _queue_of(job_id: int, request: Callable[..., dict]) -> str:
    try:
        jobs = request("GET", "/v1/jobs", query={"ids": str(job_id), "all": "1"}).get("jobs", [])
        return (jobs[0].get("account") if jobs else None) or "default"
    except Exception:  # the job is submitted; only the queue's name is missing
        return "default"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bsub` console script."""
    from batchd.cli.client import request

    argv = sys.argv[1:] if argv is None else argv
    spec, merged = build(argv, dict(os.environ), resolve_name=_name_resolver(request))
    mail = [o for o, k in (("-u", "mail_user"), ("-B", "mail_begin"), ("-N", "mail_end")) if merged.get(k)]
    if mail:  # accepted so that scripts run, but a user must not wait for mail
        sys.stderr.write(f"{PROG}: warning: {', '.join(mail)} {'is' if len(mail) == 1 else 'are'} ignored: "
                         "batchd sends no mail\n")
    if any(merged.get(k) for k in INTERACTIVE):
        return _interactive(spec, merged, request)
    reply = submit(spec, request)
    job_id = reply["job_id"]
    if spec.get("account"):
        sys.stdout.write(f"Job <{job_id}> is submitted to queue <{spec['account']}>.\n")
    else:
        queue = "default"
        try:
            jobs = request("GET", "/v1/jobs", query={"ids": str(job_id), "all": "1"}).get("jobs", [])
            queue = jobs[0].get("account") or queue if jobs else queue
        except Exception:  # the job is submitted; only the queue's name is missing
            pass
        sys.stdout.write(f"Job <{job_id}> is submitted to default queue <{queue}>.\n")
    sys.stdout.flush()
    if spec["wait"]:
        from batchd.cli.sbatch import wait_for

        sys.stdout.write("<<Waiting for dispatch ...>>\n")
        sys.stdout.flush()
        rc = wait_for(job_id, request)
        sys.stdout.write("<<Job is finished>>\n")
        return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
