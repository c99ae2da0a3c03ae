"""salloc: get an allocation, run a command in it here (default: your shell), release it.

Usage: salloc [OPTIONS] [COMMAND [ARGS...]]

  -A, --account=NAME    charge the allocation to this account
  -c, --cpus-per-task=N  CPUs per task
  -D, --chdir=DIR       run COMMAND in DIR
  -G, --gpus=N          GPUs of the allocation
  --gres=LIST           generic resources, e.g. gpu:h200:2 or gpu:1g.24gb:1
  -J, --job-name=NAME   the allocation's name (default: interactive)
  --mem=SIZE            memory per node
  -N, --nodes=N         number of nodes
  -n, --ntasks=N        number of tasks
  -p, --partition=NAME  partition
  -Q, --quiet           errors only, no progress messages
  -q, --qos=NAME        quality of service
  -t, --time=TIME       time limit
  -K, --kill-command[=SIGNAL]  signal COMMAND when the allocation is revoked (TERM)
  -h, --help            show this help

Every other option of sbatch is taken too. salloc waits for the allocation, saying so as
Slurm's salloc does
(`salloc: Pending job allocation N`, `salloc: job N queued and waiting for resources`,
`... has been allocated resources`, `salloc: Granted job allocation N`; `-Q` only errors),
then runs COMMAND where salloc was typed with SLURM_JOB_ID and the allocation's variables:
`srun` inside runs its tasks on the allocation's nodes and GPUs. When COMMAND ends the
allocation is released (`salloc: Relinquishing job allocation N`) and salloc exits with
its code, which the job keeps (sacct). `scancel` or the time limit revokes it
(`salloc: Job allocation N has been revoked.`); salloc still waits for COMMAND and exits
with its code, as Slurm's does, unless `-K`/`--kill-command[=SIGNAL]` (default SIGTERM)
asks for COMMAND to get that signal then.

The allocation is a job named `interactive` (or -J) whose script is a holder that
connects back to salloc (`python -m batchd.cli.ptyhost --hold`, over srun --pty's channel:
batchd.cli.ptychannel), sends the job's environment (salloc's SLURM_* variables come from
it) and waits for COMMAND's exit code, which it exits with. The job's first node may be any
node that can reach this machine; salloc gone (its terminal closed, killed), the holder
sees the connection close and the allocation ends.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from batchd.cli import sbatch_opts as so
from batchd.cli.options import Opt, OptionError, die, parse
from batchd.cli.srun_alloc import (
    FINAL,
    cancel,
    job_spec,
    job_view,
    option_words,
    refuse_batch_only,
    submit,
    wait_final,
)
from batchd.protocol import IDLE_REASON

PROG = "salloc"
#: the options the help describes (the reference and the completions read it); salloc
#: parses every option of sbatch's table
#: salloc's own options (not sbatch's)
SALLOC_ONLY = [Opt("K", "kill-command", "optional", "kill_command")]
TABLE = [o for o in so.TABLE if o.long in ("account", "cpus-per-task", "chdir", "gpus", "gres", "job-name", "mem",
                                           "nodes", "ntasks", "partition", "quiet", "qos", "time", "help")] + SALLOC_ONLY
POLL_S = 0.1
#: the job's variables Slurm 22.05's salloc gives its command (recorded; SLURM_CONF aside:
#: batchd has no slurm.conf)
SALLOC_KEYS = ("SLURM_CLUSTER_NAME", "SLURM_JOBID", "SLURM_JOB_ACCOUNT", "SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_ID",
               "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_JOB_PARTITION", "SLURM_JOB_QOS",
               "SLURM_NNODES", "SLURM_NODELIST", "SLURM_NODE_ALIASES", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST",
               "SLURM_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_NPROCS", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE",
               "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_GPU", "SLURM_GPUS", "SLURM_GPUS_PER_NODE")


def job_variables(environ: dict[str, str], spec: dict) -> dict[str, str]:
    """Slurm's salloc variables out of the job's environment (what the holder sent);
    SLURM_MEM_PER_CPU only when the user asked for it (a batch job has it by default)."""
    keys = (*SALLOC_KEYS, *(("SLURM_MEM_PER_CPU",) if spec.get("mem_per_cpu_mb") else ()))
    return {k: environ[k] for k in keys if k in environ}


def allocation_env(view: dict, spec: dict) -> dict[str, str]:
    """The variables Slurm 22.05's salloc sets for its command (recorded)."""
    nodes = view.get("node_list") or ""
    count = str(view.get("nodes") or 1)
    cpus = view.get("cpus_per_node") or view.get("cpus") or ""
    env = {"SLURM_JOB_ID": str(view["id"]), "SLURM_JOBID": str(view["id"]),
           "SLURM_JOB_NAME": str(view.get("name") or ""), "SLURM_JOB_NODELIST": nodes, "SLURM_NODELIST": nodes,
           "SLURM_JOB_NUM_NODES": count, "SLURM_NNODES": count,
           "SLURM_JOB_ACCOUNT": str(view.get("account") or ""), "SLURM_JOB_PARTITION": str(view.get("partition") or ""),
           "SLURM_JOB_QOS": str(view.get("qos") or ""), "SLURM_SUBMIT_DIR": str(spec.get("submit_dir") or os.getcwd()),
           "SLURM_SUBMIT_HOST": str(spec.get("submit_host") or os.uname().nodename.split(".")[0])}
    if cpus:
        env["SLURM_JOB_CPUS_PER_NODE"] = str(cpus)
    cluster = view.get("cluster") or view.get("cluster_name")
    if cluster:
        env["SLURM_CLUSTER_NAME"] = str(cluster)
    return env


def holder_environment(payload: bytes) -> dict[str, str]:
    return dict(item.decode(errors="replace").partition("=")[::2] for item in payload.split(b"\0") if b"=" in item)


def kill_signal(value: str | bool) -> int:
    """The signal of `-K`/`--kill-command[=SIGNAL]` (a name with or without SIG, or a
    number; SIGTERM when none is given, as Slurm's salloc)."""
    if value is True or value == "":
        return int(signal.SIGTERM)
    text = str(value).upper()
    if text.isdigit() and 0 < int(text) < signal.NSIG:
        return int(text)
    try:
        return int(signal.Signals[text if text.startswith("SIG") else "SIG" + text])
    except KeyError:
        sys.stderr.write(f"{PROG}: error: Invalid signal specification: {value}\n")
        sys.exit(1)


def build(argv: list[str], environ: dict[str, str],
          channel_env: dict[str, str] | None = None) -> tuple[dict, dict, list[str]]:
    try:
        values, command = parse(PROG, argv, [*so.TABLE, *SALLOC_ONLY], stop_at_positional=True, exit_code=1)
    except OptionError as e:
        die(e)
    if values.get("help") or values.get("usage"):
        sys.stdout.write(__doc__)
        sys.exit(0)
    refuse_batch_only(PROG, values)
    if values.get("kill_command") is not None:
        values["kill_signal"] = kill_signal(values["kill_command"])
    if not command:
        command = [environ.get("SHELL") or "/bin/sh"]
    extra = ["--wrap", "exec " + shlex.join([sys.executable, "-m", "batchd.cli.ptyhost", "--hold"]),
             "-o", "/dev/null", "-e", "/dev/null"]
    if values.get("name") is None:
        extra += ["-J", "interactive"]
    words = [w for w in option_words(argv, command) if not (w == "-K" or w.startswith(("-K", "--kill-command")))]
    spec = job_spec(PROG, [*words, *extra], environ)
    if channel_env:
        spec["environment"] = dict(spec.get("environment") or {}, **channel_env)
    return spec, values, command


def main(argv: list[str] | None = None) -> int:
    from batchd.cli.srun_pty import ChannelListener

    argv = sys.argv[1:] if argv is None else argv
    listener = ChannelListener()
    try:
        return _run(argv, listener)
    finally:
        listener.close()


def _run(argv: list[str], listener) -> int:
    spec, values, command = build(argv, dict(os.environ), listener.environment())
    quiet = bool(values.get("quiet"))

    def say(text: str) -> None:
        if not quiet:
            sys.stderr.write(f"{PROG}: {text}\n")
            sys.stderr.flush()

    interrupted = threading.Event()

    def on_signal(_signum, _frame):
        interrupted.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    job_id = submit(spec)
    queued = False
    view: dict | None = None
    while True:
        if interrupted.is_set():
            cancel(job_id)
            say(f"Job allocation {job_id} has been revoked.")
            return 1
        view = job_view(job_id) or view
        state = (view or {}).get("state", "PENDING")
        if state == "PENDING" and not queued and (view or {}).get("reason") not in (None, "None"):
            queued = True
            say(f"Pending job allocation {job_id}")
            say(f"job {job_id} queued and waiting for resources")
        if state in FINAL:
            sys.stderr.write(f"{PROG}: error: Job allocation {job_id} has been revoked.\n")
            return 1
        if state not in ("PENDING", "CONFIGURING"):
            break
        time.sleep(POLL_S)
    if queued:
        say(f"job {job_id} has been allocated resources")
    say(f"Granted job allocation {job_id}")

    stop = threading.Event()
    holder_env = _await_holder(job_id, listener)
    if holder_env is None:
        say(f"Job allocation {job_id} has been revoked.")
        return 1
    ch = listener.channel
    env = {**os.environ, **allocation_env(view or {"id": job_id}, spec), **job_variables(holder_env, spec)}
    # the command has the terminal; salloc does not stop at the user's Ctrl-C
    for s, h in old.items():
        signal.signal(s, h if s != signal.SIGINT else signal.SIG_IGN)
    try:
        # salloc ignores SIGINT, the command must not inherit that: Ctrl-C is the command's
        proc = subprocess.Popen(command, env=env, cwd=spec.get("workdir") or None,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: {command[0]}: {e.strerror}\n")
        _release(ch, 1)
        return 1
    revoked = threading.Event()

    def watch():
        while proc.poll() is None and not stop.wait(0.5):
            v = job_view(job_id)
            if v is not None and v.get("state") in FINAL:
                revoked.set()
                say(f"Job allocation {job_id} has been revoked.")
                if v.get("reason") == IDLE_REASON:
                    sys.stderr.write(f"{PROG}: error: the allocation's GPUs stayed at 0 % for the idle_timeout "
                                     f"of QOS {v.get('qos')}\n")
                # Slurm's salloc waits for the command; only -K signals it
                if values.get("kill_signal"):
                    try:
                        proc.send_signal(values["kill_signal"])
                    except OSError:
                        pass
                return

    threading.Thread(target=watch, daemon=True, name="salloc-watch").start()
    rc = proc.wait()
    stop.set()
    code = rc if rc >= 0 else 128 - rc
    if not revoked.is_set():
        say(f"Relinquishing job allocation {job_id}")
        _release(ch, min(code, 255))
    ch.sock.close()
    if not revoked.is_set():  # the job ends with the command's code: wait for it (briefly)
        wait_final(job_id, 10)
    return code


def _await_holder(job_id: int, listener) -> dict[str, str] | None:
    """The job's environment once its holder has connected and sent it; None when the job
    ended first."""
    from batchd.cli import ptychannel as pc

    while not listener.try_accept(POLL_S):
        v = job_view(job_id)
        if v is not None and v.get("state") in FINAL:
            return None
    ch = listener.channel
    ch.sock.settimeout(30)
    try:
        while True:
            frames = ch.recv()
            if frames is None:
                return None
            for kind, payload in frames:
                if kind == pc.ENVIRON:
                    ch.sock.settimeout(None)
                    return holder_environment(payload)
    except (OSError, pc.ChannelError):
        return None


def _release(ch, code: int) -> None:
    """COMMAND's exit code to the holder, which ends the job with it."""
    from batchd.cli import ptychannel as pc

    try:
        ch.send(pc.EXIT, str(code).encode())
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
