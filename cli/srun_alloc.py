"""srun outside a job: create a job for COMMAND, wait for it as Slurm's srun does, and
stream its output (see `batchd.cli.srun`'s help).

The job is an ordinary batch job whose script runs COMMAND (`exec COMMAND`, or with
several tasks `exec srun COMMAND`, a step of the job on its nodes): it is scheduled, pinned
to its GPUs, time-limited, accounted and shown by squeue and sacct like any other, named
after the command. Its stdout and stderr go to two files in a directory of the caller's
own (mode 0700) that srun reads as they grow and removes at the end.

Slurm's behaviour kept (recorded from a real Slurm 22.05's srun on this machine kind):
- `srun: job N queued and waiting for resources` when the job cannot start at once, and
  `srun: job N has been allocated resources` when it starts (both only after a wait;
  `-Q` neither);
- a failed task: `srun: error: NODE: task 0: Exited with exit code N`, exit N; a task
  killed by a signal: `srun: error: NODE: task 0: Terminated` (the signal's name), exit
  128 + the signal;
- the first Ctrl-C: `srun: interrupt (one more within 1 sec to abort)` and the task's
  state; a second within a second: `srun: sending Ctrl-C to StepId=...`,
  `srun: forcing job termination`, the job cancelled, exit 130;
- `-l`: every line of output prefixed with the task number (`0: `);
- stdin goes to task 0 (here: the job's input is a FIFO in that directory, which srun
  feeds once the job opens it).
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
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

    prog = PROG
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


def build(argv: list[str], environ: dict[str, str], outdir: str,
          pty: Callable[[], dict[str, str]] | None = None) -> tuple[dict, dict, list[str]]:
    """(JOB_SPEC, srun's values, COMMAND) for an srun command line outside a job; with
    `--pty` and `pty` (the relay's variables, asked for only then) a job whose task is
    COMMAND on a pseudo-terminal (`batchd.cli.ptyhost`)."""
    opts, values, command = split_argv(argv)
    if not command:
        sys.stderr.write(f"{PROG}: fatal: No command given to execute.\n")
        sys.exit(1)
    refuse_batch_only(PROG, values)
    several = _tasks(values) > 1
    if values.get("pty") and pty is not None:
        if several:
            sys.stderr.write(f"{PROG}: fatal: --pty runs one task here; leave out -n and -N or --pty\n")
            sys.exit(1)
        relay = [sys.executable, "-m", "batchd.cli.ptyhost", "--", *command]
        extra = ["--wrap", "exec " + shlex.join(relay), "-o", "/dev/null", "-e", "/dev/null"]
        if values.get("name") is None:
            extra += ["-J", os.path.basename(command[0]) or "srun"]
        spec = job_spec(PROG, [*opts, *extra], environ)
        spec["environment"] = dict(spec.get("environment") or {}, **pty())
        return spec, values, command
    if several:  # the tasks as one step of the job, on its nodes (batchd's srun inside the job)
        here = shutil.which("srun", path=os.path.dirname(os.path.abspath(sys.argv[0])) or None) or "srun"
        wrap = "exec " + shlex.join([here, *(["-l"] if values.get("label") else []), *command])
    else:
        wrap = "exec " + shlex.join(command)
    extra = ["--wrap", wrap]
    if values.get("name") is None:
        extra += ["-J", os.path.basename(command[0]) or "srun"]
    if values.get("output") is None:
        extra += ["-o", os.path.join(outdir, "out")]
    if values.get("error") is None:
        extra += ["-e", os.path.join(outdir, "err")]
    if values.get("input") is None and not several and stdin_forwarded():
        fifo = os.path.join(outdir, "in")
        os.mkfifo(fifo, 0o600)
        extra += ["-i", fifo]
    return job_spec(PROG, [*opts, *extra], environ), values, command


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


def open_for_writing(fifo: str, keep_waiting: Callable[[], bool]) -> int | None:
    """The write end of `fifo` once a reader (the job) has opened it; None when the FIFO
    fails or `keep_waiting` (called, and left to pause, while there is no reader) says stop."""
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO or not keep_waiting():  # ENXIO: no reader yet
                return None


def feed_stdin(fifo: str, done: threading.Event) -> None:
    """Copy srun's stdin into the job's input FIFO once the job opens it, then close it (the
    job reads EOF). A later run of the job (requeued) that opens it again reads EOF at once."""
    copied = False
    while not done.is_set():
        fd = open_for_writing(fifo, lambda: not done.wait(POLL_S))
        if fd is None:
            return
        try:
            if not copied:
                copied = True
                os.set_blocking(fd, True)
                while True:
                    data = os.read(0, 65536)
                    if not data:
                        break
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
        except OSError:  # the task closed its stdin (EPIPE), or srun's stdin failed
            pass
        finally:
            os.close(fd)


class Stream:
    """One output file of the job, copied to `out` as it grows (`label`: per line)."""

    def __init__(self, path: str, out, label: str | None):
        self.path, self.out, self.label = path, out, label
        self.pos = 0
        self.partial = b""

    def pump(self, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            data = b""
        self.pos += len(data)
        if self.label is not None:
            data = self.partial + data
            lines = data.split(b"\n")
            self.partial = lines.pop()
            if final and self.partial:
                lines.append(self.partial)
                self.partial = b""
            data = b"".join(self.label.encode() + line + b"\n" for line in lines)
        if data:
            self.out.buffer.write(data)
            self.out.flush()


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


def _exit(view: dict, several: bool, quiet_signal: bool = False, voice: Voice = SRUN) -> int:
    code, _, sig = str(view.get("exit_code") or "0:0").partition(":")
    status = int(code) if code.isdigit() else 0
    signum = int(sig) if sig.isdigit() else 0
    node = (view.get("batch_host") or view.get("node_list") or "").split(",")[0]
    if signum:
        if not several and not quiet_signal and voice.task_lines:  # not after Ctrl-C twice (srun said why)
            try:
                name = signal.strsignal(signum) or f"signal {signum}"
            except ValueError:
                name = f"signal {signum}"
            sys.stderr.write(f"{PROG}: error: {node}: task 0: {name}\n")
        return 128 + signum
    if status:
        if not several and voice.task_lines:  # the inner srun said it for each task
            sys.stderr.write(f"{PROG}: error: {node}: task 0: Exited with exit code {status}\n")
        return status
    return 0 if view.get("state") == "COMPLETED" else 1


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


def _pty_session(job_id: int, listener, view: dict, voice: Voice = SRUN) -> int:
    """The task's relay is connected: the terminal is the task's until it ends."""
    from batchd.cli.srun_pty import relay, report

    status = relay(listener.channel)
    view = job_view(job_id) or view
    node = (view.get("batch_host") or view.get("node_list") or "").split(",")[0] or "?"
    if status is not None and status >= 0:
        return report(status, node, PROG) if voice.task_lines else status
    # killed (by batchd: time limit, scancel; or by hand), or the channel broke, or srun was
    # told to stop: the job's end says which; a job still running after a while is ended
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
        return report(status, node, PROG) if voice.task_lines else 128 - status
    return _exit(view, several=False, voice=voice)


def run_prepared(spec: dict, command: list[str], pty: bool, voice: Voice,
                 submit: Callable[[dict], int]) -> int:
    """Run `command` as the job of `spec` (built by another front-end: bsub -I, -Ip, -Is)
    the way srun outside a job does: output streamed and stdin forwarded, or with `pty` on
    a pseudo-terminal (without a terminal on stdin, as srun: a plain run)."""
    with tempfile.TemporaryDirectory(prefix="batchd-srun-", ignore_cleanup_errors=True) as outdir:
        listener = None
        spec = dict(spec, wrap=True, script_path=None, argv=[])
        if pty and os.isatty(0):
            from batchd.cli.srun_pty import PtyListener

            listener = PtyListener()
            relay = [sys.executable, "-m", "batchd.cli.ptyhost", "--", *command]
            spec.update(script="#!/bin/sh\nexec " + shlex.join(relay) + "\n", output="/dev/null", error="/dev/null",
                        input=None, environment=dict(spec.get("environment") or {}, **listener.environment()))
        else:
            spec.update(script="#!/bin/sh\nexec " + shlex.join(command) + "\n",
                        output=os.path.join(outdir, "out"), error=os.path.join(outdir, "err"), input=None)
            if stdin_forwarded():
                fifo = os.path.join(outdir, "in")
                os.mkfifo(fifo, 0o600)
                spec["input"] = fifo
        try:
            return _wait(spec, {}, outdir, listener, voice, submit)
        finally:
            if listener is not None:
                listener.close()


def run_outside(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="batchd-srun-", ignore_cleanup_errors=True) as outdir:  # 0700
        return _run(argv, outdir)


def _run(argv: list[str], outdir: str) -> int:
    listener = None

    def pty_env() -> dict[str, str]:
        nonlocal listener
        if not os.isatty(0):  # Slurm's srun says so and runs the task without one
            sys.stderr.write(f"{PROG}: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device\n"
                             f"{PROG}: error: Not using a pseudo-terminal, disregarding --pty option\n")
            raise NoTerminal
        from batchd.cli.srun_pty import PtyListener

        listener = PtyListener()
        return listener.environment()

    try:
        spec, values, _command = build(argv, dict(os.environ), outdir, pty_env)
    except NoTerminal:
        spec, values, _command = build(argv, dict(os.environ), outdir)
    try:
        return _wait(spec, values, outdir, listener)
    finally:
        if listener is not None:
            listener.close()


class NoTerminal(Exception):
    """`--pty` without a terminal on stdin."""


def _wait(spec: dict, values: dict, outdir: str, listener, voice: Voice = SRUN,
          submit: Callable[[dict], int] = submit) -> int:
    quiet = bool(values.get("quiet"))
    several = _tasks(values) > 1
    interrupts: list[float] = []
    abort = False
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

    # before the submission: a signal that comes while it is sent is not lost
    signal.signal(signal.SIGINT, on_int)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    job_id = submit(spec)
    voice.submitted(job_id, spec)
    label = None if several or not values.get("label") else "0: "
    streams = [Stream(str(spec.get("output") or ""), sys.stdout, label),
               Stream(str(spec.get("error") or ""), sys.stderr, label)]
    streams = [s for s in streams if s.path.startswith(outdir + os.sep)]
    done = threading.Event()
    fifo = str(spec.get("input") or "")
    if fifo.startswith(outdir + os.sep):
        threading.Thread(target=feed_stdin, args=(fifo, done), daemon=True, name="srun-stdin").start()
    queued = allocated = cancelled = False
    view: dict | None = None
    while True:
        if abort and not cancelled:
            why = cancel(job_id)
            if why is not None:
                sys.stderr.write(f"{PROG}: error: could not cancel job {job_id}: {why}\n")
            cancelled = True
        view = job_view(job_id) or view
        state = (view or {}).get("state", "PENDING")
        # waiting once a cycle has looked at the job and given it a reason to wait (a job the
        # next cycle starts was never queued, as Slurm's immediate allocation is not)
        if state == "PENDING" and not queued and (view or {}).get("reason") not in (None, "None"):
            queued = True
            if not quiet:
                voice.queued(job_id)
        if state != "PENDING" and not allocated:
            allocated = True
            if not quiet:
                voice.started(job_id, view or {}, queued)
        for s in streams:
            s.pump()
        if state in FINAL:
            break
        if listener is not None and not abort:
            if listener.try_accept(POLL_S):
                return _pty_session(job_id, listener, view or {}, voice)
        else:
            time.sleep(POLL_S)
    done.set()
    for s in streams:
        s.pump(final=True)
    rc = _exit(view or {}, several, quiet_signal=abort and bool(interrupts), voice=voice)
    return 130 if abort and interrupts else rc
