"""srun outside a job: create a job for COMMAND, wait for it as Slurm's srun does, and
relay its task (see `batchd.cli.srun`'s help).

The job is an ordinary batch job whose script is the relay (`python -m batchd.cli.ptyhost`,
running COMMAND, or with several tasks `srun COMMAND`, a step of the job on its nodes): it
is scheduled, pinned to its GPUs, time-limited, accounted and shown by squeue and sacct
like any other, named after the command. The relay connects back to this srun over the
channel of `batchd.cli.ptychannel` (a per-session key in the job's environment; the job may
run on any node that reaches this machine) and carries the task's stdout and stderr as they
are written, srun's stdin, and the task's end; with `--pty` a pseudo-terminal instead.
`bsub -I`, `-Ip`, `-Is` run through the same code (`run_prepared`).

Slurm's behaviour kept (recorded from a real Slurm 22.05's srun on this machine kind):
- `srun: job N queued and waiting for resources` when the job cannot start at once, and
  `srun: job N has been allocated resources` when it starts (both only after a wait;
  `-Q` neither);
- a failed task: `srun: error: NODE: task 0: Exited with exit code N`, exit N; a task
  killed by a signal: `srun: error: NODE: task 0: Terminated` (the signal's name), exit
  128 + the signal; at the time limit slurmstepd's `*** ... DUE TO TIME LIMIT ***` first;
- the first Ctrl-C: `srun: interrupt (one more within 1 sec to abort)` and the task's
  state; a second within a second: `srun: sending Ctrl-C to StepId=...`,
  `srun: forcing job termination`, the job cancelled, exit 130;
- `-l`: every line of output prefixed with the task number (`0: `);
- stdin goes to task 0.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable

from batchd.cli import sbatch as sb
from batchd.cli import sbatch_opts as so
from batchd.cli.client import DaemonError, Unreachable, request
from batchd.cli.options import Opt, OptionError, die, parse
from batchd.protocol import IDLE_REASON

PROG = "srun"
#: srun's options that sbatch does not have (no argument each)
SRUN_ONLY = (Opt("l", "label", "none", "label"), Opt("u", "unbuffered", "none", "unbuffered"),
             Opt(None, "pty", "none", "pty"))
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE")
POLL_S = 0.05


class Voice:
    """What srun says around the job (Slurm's lines); `bsub -I` speaks LSF's instead."""

    #: Slurm's `srun: error: NODE: task 0: ...` line for a failed task
    task_lines = True

    def submitted(self, job_id: int, spec: dict) -> None:
        pass

    def queued(self, job_id: int) -> None:
        sys.stderr.write(f"{PROG}: job {job_id} queued and waiting for resources\n")

    def started(self, job_id: int, view: dict, was_queued: bool) -> None:
        if was_queued:
            sys.stderr.write(f"{PROG}: job {job_id} has been allocated resources\n")


SRUN = Voice()


def option_words(argv: list[str], command: list[str]) -> list[str]:
    """The words of `argv` before the command `parse` found, without a closing `--`."""
    head = argv[:len(argv) - len(command)]
    return head[:-1] if head and head[-1] == "--" else head


def refuse_batch_only(prog: str, values: dict) -> None:
    """sbatch's --wrap and --array are no options of srun or salloc (Slurm's getopt line)."""
    if values.get("wrap") is not None or values.get("array") is not None:
        bad = "--wrap" if values.get("wrap") is not None else "--array"
        sys.stderr.write(f"{prog}: unrecognized option '{bad}'\nTry \"{prog} --help\" for more information\n")
        sys.exit(1)


def job_spec(prog: str, words: list[str], environ: dict[str, str]) -> dict:
    """The JOB_SPEC sbatch builds for `words`, its refusals in `prog`'s name; sbatch's
    SBATCH_* input variables are not srun's or salloc's, and are left out."""
    sb.PROG = prog
    spec, _merged = sb.build(words, {k: v for k, v in environ.items() if not k.startswith("SBATCH_")})
    return spec


def split_argv(argv: list[str]) -> tuple[list[str], dict, list[str]]:
    """(the options for sbatch, srun's own option values, COMMAND)."""
    try:
        # getopt's refusals exit 255, as Slurm 22.05's srun's (recorded)
        values, command = parse(PROG, argv, [*so.TABLE, *SRUN_ONLY], stop_at_positional=True, exit_code=255)
    except OptionError as e:
        die(e)
    head = option_words(argv, command)
    longs = {f"--{o.long}" for o in SRUN_ONLY}
    shorts = {o.short for o in SRUN_ONLY if o.short}
    flags = shorts | {o.short for o in so.TABLE if o.short and o.arg == "none"}
    kept = []
    for tok in head:
        if tok in longs:
            continue
        if tok[:1] == "-" and tok[1:2] != "-" and set(tok[1:]) & shorts and set(tok[1:]) <= flags:
            # a cluster of flags (-lQ): srun's own out, sbatch's kept
            rest = "".join(c for c in tok[1:] if c not in shorts)
            if rest:
                kept.append("-" + rest)
            continue
        kept.append(tok)
    return kept, values, command


def _tasks(values: dict) -> int:
    def num(key: str) -> int:
        v = str(values.get(key) or "1").split("-")[-1]
        return int(v) if v.isdigit() else 1
    return max(num("ntasks"), num("nodes") * num("ntasks_per_node"), num("nodes"))


RELAY = [sys.executable, "-m", "batchd.cli.ptyhost"]


def relay_script(command: list[str], use_pty: bool, flags: str = "") -> str:
    """The job's script line: the relay running COMMAND on a pty, or with the streams of
    `flags` relayed (`o` stdout, `e` stderr, `i` stdin; batchd.cli.ptyhost)."""
    relay = [*RELAY, "--", *command] if use_pty else [*RELAY, "--pipes", flags or "-", "--", *command]
    return "exec " + shlex.join(relay)


def first_node(view: dict) -> str:
    """The node the job's task 0 ran on (its batch host), "" before it has one."""
    return (view.get("batch_host") or view.get("node_list") or "").split(",")[0]


def build(argv: list[str], environ: dict[str, str], channel_env: dict[str, str],
          terminal: bool = False) -> tuple[dict, dict, list[str], bool, bool]:
    """(JOB_SPEC, srun's values, COMMAND, whether the task gets a pty, whether srun's stdin
    goes to it) for an srun command
    line outside a job. The job's script is the relay (`batchd.cli.ptyhost`), which connects
    back to srun with `channel_env` (the listener's address and key): COMMAND on a
    pseudo-terminal with `--pty` and a `terminal` on stdin, else with its output (and stdin)
    relayed. With several tasks COMMAND is one step of the job on its nodes (`srun` there)."""
    opts, values, command = split_argv(argv)
    if not command:
        sys.stderr.write(f"{PROG}: fatal: No command given to execute.\n")
        sys.exit(1)
    refuse_batch_only(PROG, values)
    several = _tasks(values) > 1
    use_pty = bool(values.get("pty")) and terminal
    if use_pty and several:
        sys.stderr.write(f"{PROG}: fatal: --pty runs one task here; leave out -n and -N or --pty\n")
        sys.exit(1)
    extra: list[str] = []
    flags = ""
    if use_pty:
        extra += ["-o", "/dev/null", "-e", "/dev/null"]
    else:
        if several:  # the tasks as one step of the job, on its nodes (batchd's srun inside the job)
            here = shutil.which("srun", path=os.path.dirname(os.path.abspath(sys.argv[0])) or None) or "srun"
            inner = [here, *(["-l"] if values.get("label") else []), *command]
        else:
            inner = command
        flags = "".join(f for f, key in (("o", "output"), ("e", "error")) if values.get(key) is None)
        if values.get("input") is None and not several and stdin_forwarded():
            flags += "i"
        extra += [x for key, opt in (("output", "-o"), ("error", "-e")) if values.get(key) is None
                  for x in (opt, "/dev/null")]
    extra = ["--wrap", relay_script(command if use_pty else inner, use_pty, flags), *extra]
    if values.get("name") is None:
        extra += ["-J", os.path.basename(command[0]) or "srun"]
    spec = job_spec(PROG, [*opts, *extra], environ)
    spec["environment"] = dict(spec.get("environment") or {}, **channel_env)
    return spec, values, command, use_pty, "i" in flags


def stdin_forwarded() -> bool:
    """Whether srun passes its stdin to the task: a pipe or file always, a terminal only
    while srun is in its foreground (a read from it in the background would stop srun)."""
    try:
        if not os.isatty(0):
            os.fstat(0)  # open at all
            return True
        return os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def submit(spec: dict) -> int:
    """Store the job (a fresh submission token: a lost reply is recovered as sbatch's is);
    its id. A refusal is Slurm's srun line (`Unable to allocate resources: ...`), exit 1."""
    from batchd.cli.client import new_submit_token, submit_job

    try:
        reply, _lost = submit_job(dict(spec, submit_token=new_submit_token()), request)
    except Unreachable as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        sys.exit(1)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"{PROG}: error: Unable to allocate resources: the batchd daemon did not answer ({e})\n")
        sys.exit(1)
    except DaemonError as e:
        sys.stderr.write(f"{PROG}: error: Unable to allocate resources: {e.message}\n")
        sys.exit(e.exit_code or 1)
    return int(reply["job_id"])


def job_view(job_id: int) -> dict | None:
    """The job's JOB_VIEW, None while the daemon does not answer."""
    try:
        jobs = request("GET", "/v1/jobs", query={"ids": str(job_id), "all": "1"}).get("jobs", [])
    except (DaemonError, Unreachable):
        return None
    return next((j for j in jobs if str(j.get("id")) == str(job_id)), None)


def cancel(job_id: int) -> str | None:
    """Cancel the job (scancel's request); what went wrong, None when it was sent."""
    try:
        request("POST", "/v1/jobs/signal", {"ids": [str(job_id)]})
    except (DaemonError, Unreachable) as e:
        return str(e)
    return None


def _end_code(status: int, node: str, voice: Voice, several: bool, quiet: bool = False) -> int:
    """srun's exit code for the task's wait `status` (os.waitstatus_to_exitcode's form),
    with Slurm's line for a failed task unless the inner srun of several tasks said it,
    the voice says none (bsub) or srun already said why (`quiet`)."""
    from batchd.cli.srun_pty import report

    if several or not voice.task_lines or quiet:
        return status if status >= 0 else 128 - status
    return report(status, node, PROG)


def _exit(view: dict, several: bool, quiet_signal: bool = False, voice: Voice = SRUN) -> int:
    """srun's exit code from the ended job's view (its exit code, or its signal)."""
    code, _, sig = str(view.get("exit_code") or "0:0").partition(":")
    signum = int(sig) if sig.isdigit() else 0
    status = -signum if signum else (int(code) if code.isdigit() else 0)
    if status == 0:
        return 0 if view.get("state") == "COMPLETED" else 1
    return _end_code(status, first_node(view), voice, several, quiet=quiet_signal and status < 0)


def _stepd_line(job_id: int, node: str, view: dict) -> None:
    """slurmstepd's line for a job batchd ended (the job's error file holds it without a
    pty; with one, srun says it)."""
    why = {"TIMEOUT": " DUE TO TIME LIMIT", "CANCELLED": "", "PREEMPTED": " DUE TO PREEMPTION"}
    if view.get("reason") == IDLE_REASON:
        why["CANCELLED"] = " DUE TO GPU IDLE TIMEOUT"
    if view.get("state") in why:
        end = view.get("end_time")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(end))) if end else "?"
        sys.stderr.write(f"slurmstepd: error: *** JOB {job_id} ON {node} CANCELLED AT {stamp}"
                         f"{why[view['state']]} ***\n")


def _finish(job_id: int, status: int | None, view: dict, voice: Voice, several: bool) -> int:
    """srun's end once the relay is done: `status` as the relay gave it (None: the channel
    broke, or srun was told to stop). A killed task (by batchd: time limit, scancel; or by
    hand) or a lost channel waits for the job's end to say which; a job still running a
    while after its channel broke is ended."""
    view = job_view(job_id) or view
    node = first_node(view) or "?"
    if status is not None and status >= 0:
        return _end_code(status, node, voice, several)
    started = time.monotonic()
    cancelled = False
    while view.get("state") not in FINAL and time.monotonic() - started < 20:
        if status is None and not cancelled and time.monotonic() - started > 3:
            cancel(job_id)
            cancelled = True
        time.sleep(POLL_S)
        view = job_view(job_id) or view
    _stepd_line(job_id, node, view)
    if status is not None:
        return _end_code(status, node, voice, several)
    return _exit(view, several, voice=voice)


def run_prepared(spec: dict, command: list[str], pty: bool, voice: Voice,
                 submit: Callable[[dict], int]) -> int:
    """Run `command` as the job of `spec` (built by another front-end: bsub -I, -Ip, -Is)
    the way srun outside a job does: output streamed and stdin forwarded, or with `pty` on
    a pseudo-terminal (without a terminal on stdin, as srun: a plain run)."""
    from batchd.cli.srun_pty import ChannelListener

    listener = ChannelListener()
    try:
        use_pty = pty and os.isatty(0)
        forward = not use_pty and stdin_forwarded()
        script = "#!/bin/sh\n" + relay_script(command, use_pty, "oe" + ("i" if forward else "")) + "\n"
        spec = dict(spec, wrap=True, script_path=None, argv=[], script=script,
                    output="/dev/null", error="/dev/null", input=None,
                    environment=dict(spec.get("environment") or {}, **listener.environment()))
        return _wait(spec, {}, listener, use_pty, forward, voice, submit)
    finally:
        listener.close()


def run_outside(argv: list[str]) -> int:
    from batchd.cli.srun_pty import ChannelListener

    listener = ChannelListener()
    try:
        terminal = os.isatty(0)
        spec, values, _command, use_pty, forward = build(argv, dict(os.environ), listener.environment(), terminal)
        if values.get("pty") and not terminal:  # Slurm's srun says so and runs the task without one
            sys.stderr.write(f"{PROG}: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device\n"
                             f"{PROG}: error: Not using a pseudo-terminal, disregarding --pty option\n")
        return _wait(spec, values, listener, use_pty, forward)
    finally:
        listener.close()


def _wait(spec: dict, values: dict, listener, use_pty: bool, forward_stdin: bool, voice: Voice = SRUN,
          submit: Callable[[dict], int] = submit) -> int:
    """Submit, say what Slurm's srun says while the job waits, then relay the task."""
    quiet = bool(values.get("quiet"))
    several = _tasks(values) > 1
    interrupts: list[float] = []
    abort = False
    cancelled = False
    job_id: int | None = None

    def on_int(_signum, _frame):
        nonlocal abort
        now = time.monotonic()
        if job_id is None or interrupts and now - interrupts[-1] <= 1.0:
            # before the job exists, once is enough: it is cancelled as soon as it does
            if job_id is not None:
                sys.stderr.write(f"{PROG}: sending Ctrl-C to StepId={job_id}.batch\n")
            sys.stderr.write(f"{PROG}: forcing job termination\n")
            interrupts.append(now)
            abort = True
            return
        interrupts.append(now)
        v = job_view(job_id) or {}
        sys.stderr.write(f"{PROG}: interrupt (one more within 1 sec to abort)\n"
                         f"{PROG}: StepId={job_id}.batch task 0: {str(v.get('state', 'unknown')).lower()}\n")

    def on_term(_signum, _frame):
        nonlocal abort
        abort = True

    def cancel_once() -> None:
        nonlocal cancelled
        if abort and not cancelled and job_id is not None:
            why = cancel(job_id)
            if why is not None:
                sys.stderr.write(f"{PROG}: error: could not cancel job {job_id}: {why}\n")
            cancelled = True

    # before the submission: a signal that comes while it is sent is not lost
    signal.signal(signal.SIGINT, on_int)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    job_id = submit(spec)
    voice.submitted(job_id, spec)
    label = None if several or not values.get("label") else "0: "
    queued = allocated = False
    view: dict = {}
    while True:
        cancel_once()
        view = job_view(job_id) or view
        state = view.get("state", "PENDING")
        # waiting once a cycle has looked at the job and given it a reason to wait (a job the
        # next cycle starts was never queued, as Slurm's immediate allocation is not)
        if state == "PENDING" and not queued and view.get("reason") not in (None, "None"):
            queued = True
            if not quiet:
                voice.queued(job_id)
        if state != "PENDING" and not allocated:
            allocated = True
            if not quiet:
                voice.started(job_id, view, queued)
        if state in FINAL:
            if state == "FAILED" and not abort:  # it never reached srun
                port = listener.sock.getsockname()[1]
                sys.stderr.write(f"{PROG}: error: job {job_id} ended before its task connected back to srun "
                                 f"(port {port} of {','.join(listener.hosts)})\n")
            rc = _exit(view, several, quiet_signal=abort and bool(interrupts), voice=voice)
            return 130 if abort and interrupts else rc
        if listener.try_accept(POLL_S):
            break
    if use_pty:
        from batchd.cli.srun_pty import relay

        status = relay(listener.channel)
    else:
        from batchd.cli.srun_pty import relay_pipes

        status = relay_pipes(listener.channel, label, forward_stdin, on_tick=cancel_once)
    if abort and interrupts:
        wait_final(job_id, 15)  # the job is cancelled: its end, briefly, and nothing said
        return 130
    return _finish(job_id, status, view, voice, several)


def wait_final(job_id: int, timeout_s: float) -> dict | None:
    """The job's view once it has ended; None when it has not within `timeout_s`, or as
    soon as the daemon does not answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = job_view(job_id)
        if v is None or v.get("state") in FINAL:
            return v
        time.sleep(POLL_S)
    return None
