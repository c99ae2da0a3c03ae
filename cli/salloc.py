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
  -h, --help            show this help

Every other option of sbatch is taken too. salloc waits for the allocation, saying so as
Slurm's salloc does
(`salloc: Pending job allocation N`, `salloc: job N queued and waiting for resources`,
`... has been allocated resources`, `salloc: Granted job allocation N`; `-Q` only errors),
then runs COMMAND where salloc was typed with SLURM_JOB_ID and the allocation's variables:
`srun` inside runs its tasks on the allocation's nodes and GPUs. When COMMAND ends the
allocation is released (`salloc: Relinquishing job allocation N`) and salloc exits with
its code, which the job keeps (sacct). `scancel` or the time limit revokes it
(`salloc: Job allocation N has been revoked.`) and COMMAND gets SIGHUP.

The allocation is a job named `interactive` (or -J) whose script waits for salloc: it
reads a FIFO in a 0700 directory of the caller's, where salloc writes COMMAND's exit code
at the end (the job's first node must be this machine or share its /tmp).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

from batchd.cli import sbatch_opts as so
from batchd.cli.options import OptionError, die, parse
from batchd.cli.srun_alloc import (
    FINAL,
    cancel,
    job_spec,
    job_view,
    open_for_writing,
    option_words,
    refuse_batch_only,
    submit,
)

PROG = "salloc"
#: the options the help describes (the reference and the completions read it); salloc
#: parses every option of sbatch's table
TABLE = [o for o in so.TABLE if o.long in ("account", "cpus-per-task", "chdir", "gpus", "gres", "job-name", "mem",
                                           "nodes", "ntasks", "partition", "quiet", "qos", "time", "help")]
POLL_S = 0.1
HOLDER = 'read rc < "$1" 2>/dev/null; exit "${rc:-1}"'


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


def build(argv: list[str], environ: dict[str, str], fifo: str) -> tuple[dict, dict, list[str]]:
    try:
        values, command = parse(PROG, argv, so.TABLE, stop_at_positional=True, exit_code=1)
    except OptionError as e:
        die(e)
    if values.get("help") or values.get("usage"):
        sys.stdout.write(__doc__)
        sys.exit(0)
    refuse_batch_only(PROG, values)
    if not command:
        command = [environ.get("SHELL") or "/bin/sh"]
    extra = ["--wrap", shlex.join(["sh", "-c", HOLDER, "holder", fifo]), "-o", "/dev/null", "-e", "/dev/null"]
    if values.get("name") is None:
        extra += ["-J", "interactive"]
    return job_spec(PROG, [*option_words(argv, command), *extra], environ), values, command


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with tempfile.TemporaryDirectory(prefix="batchd-salloc-", ignore_cleanup_errors=True) as outdir:  # 0700
        return _run(argv, outdir)


def _run(argv: list[str], outdir: str) -> int:
    fifo = os.path.join(outdir, "release")
    os.mkfifo(fifo, 0o600)
    spec, values, command = build(argv, dict(os.environ), fifo)
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

    def job_running() -> bool:  # while the job's holder has not opened the FIFO yet
        v = job_view(job_id)
        if v is not None and v.get("state") in FINAL:
            return False
        time.sleep(POLL_S)
        return True

    stop = threading.Event()
    fd = open_for_writing(fifo, job_running)
    if fd is None:
        say(f"Job allocation {job_id} has been revoked.")
        return 1
    env = dict(os.environ, **allocation_env(view or {"id": job_id}, spec))
    # the command has the terminal; salloc does not stop at the user's Ctrl-C
    for s, h in old.items():
        signal.signal(s, h if s != signal.SIGINT else signal.SIG_IGN)
    try:
        proc = subprocess.Popen(command, env=env, cwd=spec.get("workdir") or None)
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: {command[0]}: {e.strerror}\n")
        os.write(fd, b"1\n")
        os.close(fd)
        return 1
    revoked = threading.Event()

    def watch():
        while proc.poll() is None and not stop.wait(0.5):
            v = job_view(job_id)
            if v is not None and v.get("state") in FINAL:
                revoked.set()
                say(f"Job allocation {job_id} has been revoked.")
                try:
                    proc.send_signal(signal.SIGHUP)
                except OSError:
                    pass
                return

    threading.Thread(target=watch, daemon=True, name="salloc-watch").start()
    rc = proc.wait()
    stop.set()
    code = rc if rc >= 0 else 128 - rc
    if not revoked.is_set():
        say(f"Relinquishing job allocation {job_id}")
        try:
            os.write(fd, f"{min(code, 255)}\n".encode())
        except OSError:
            pass
    os.close(fd)
    if not revoked.is_set():  # the job ends with the command's code: wait for it (briefly)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            v = job_view(job_id)
            if v is None or v.get("state") in FINAL:
                break
            time.sleep(POLL_S)
    return code


if __name__ == "__main__":
    sys.exit(main())
