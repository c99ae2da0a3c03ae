"""srun: run a command as a job step (inside a job), or in a job of its own (outside one).

Usage: srun [OPTIONS] COMMAND [ARGS...]

  -n, --ntasks=N        number of tasks (inside a job, default: the job's tasks; with
                        fewer tasks than nodes, the first N nodes)
  -N, --nodes=N         inside a job: run on the job's first N nodes only
  -l, --label           prefix each output line with its task number
  -D, --chdir=DIR       working directory of the tasks (default: the current one)
      --pty             task 0 on a pseudo-terminal of its own (stdin a terminal, one task)
  -h, --help            show this help

Outside a job every option of sbatch applies too (see below).

Each task runs through the agent of its node with SLURM_PROCID, SLURM_LOCALID,
SLURM_NODEID and the GPUs of its node set, so `srun torchrun ...` or an MPI-style
launch reaches every node of a multi-node job. srun waits for the step, prints the
tasks' output in task order (`-l` prefixes each line with its task number) and exits
with the highest task exit code, as Slurm's srun does. Ctrl-C cancels the step.

Outside a job, srun takes sbatch's options (`--gres`, `--gpus*`, `-N`, `-n`, `-c`,
`--mem*`, `-t`, `-A`, `-q`, `-p`, `-J`, `-D`, `--export`, ...) and creates a job that runs
COMMAND as the user, named after it. While the job waits srun says so, as Slurm's does
(`srun: job N queued and waiting for resources`, then `... has been allocated resources`;
`-Q` keeps it quiet); it streams the job's stdout and stderr as they are written and exits
with the command's exit code. Ctrl-C once says the step's state, twice within a second
cancels the job (exit 130). With more than one task (`-n`, `-N`) the job runs the tasks as
one step on its nodes. stdin goes to task 0. The job may run on any node: its task
connects back to this srun over a channel authenticated with a key of the session
(docs/interactive.md).

`--pty` gives task 0 a pseudo-terminal of its own on its node (`srun --gres=gpu:1 --pty
bash`): srun's terminal goes raw and is relayed both ways over that channel; the window
size follows srun's; leaving the shell ends the job with its exit code. Without a
terminal on stdin (a batch script), srun says so as Slurm's does and runs the task without
one.
"""

import os
import signal
import sys
import time

from batchd.cli.client import DaemonError, Unreachable, call, request
from batchd.cli.options import Opt, OptionError, die, parse
from batchd.protocol import step_output_path

TABLE = [
    Opt("n", "ntasks", "required", "ntasks"),
    Opt("N", "nodes", "required", "nodes"),
    Opt("l", "label", "none", "label"),
    Opt("D", "chdir", "required", "chdir"),
    Opt(None, "pty", "none", "pty"),
    Opt("h", "help", "none", "help"),
]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    job = os.environ.get("SLURM_JOB_ID")
    if not job and argv and argv[0] not in ("-h", "--help"):
        from batchd.cli.srun_alloc import run_outside

        return run_outside(argv)
    try:
        opts, args = parse("srun", argv, TABLE, stop_at_positional=True)
    except OptionError as e:
        die(e)
    if opts.get("help") or not args:
        sys.stdout.write(__doc__)
        return 0 if opts.get("help") else 1
    cwd = os.path.abspath(opts.get("chdir") or os.getcwd())
    body = {"job_id": int(job), "argv": args, "env": dict(os.environ), "cwd": cwd,
            "ntasks": int(opts["ntasks"]) if opts.get("ntasks") else None,
            "nodes": int(opts["nodes"]) if opts.get("nodes") else None}
    if opts.get("pty") and not os.isatty(0):  # a batch script's srun --pty: Slurm's lines, no pty
        sys.stderr.write("srun: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device\n"
                         "srun: error: Not using a pseudo-terminal, disregarding --pty option\n")
    elif opts.get("pty"):
        return _pty_step(body)
    step = call("srun", "POST", "/v1/steps", body)
    sid = step["step_id"]

    def _cancel(signum, _frame):
        try:
            request("POST", "/v1/steps/cancel", {"job_id": int(job), "step_id": sid})
        except (DaemonError, Unreachable):
            pass
        sys.stderr.write(f"srun: Job step {job}.{sid} aborted: cancelled\n")

    signal.signal(signal.SIGINT, _cancel)
    signal.signal(signal.SIGTERM, _cancel)
    final = ("COMPLETED", "FAILED", "CANCELLED")
    while True:
        tasks = call("srun", "GET", "/v1/steps", query={"job_id": job, "step_id": str(sid)})["tasks"]
        if tasks and all(t["state"] in final for t in tasks):
            break
        time.sleep(0.1)
    rc = 0
    for t in sorted(tasks, key=lambda x: x["procid"]):
        path = step_output_path(cwd, job, sid, t["procid"])
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    sys.stdout.write(f"{t['procid']}: {line}" if opts.get("label") else line)
            os.unlink(path)
        except FileNotFoundError:
            pass
        code = t["exit_code"] or (128 + t["exit_signal"] if t["exit_signal"] else 0)
        if t["state"] != "COMPLETED" and code == 0:
            code = 1
        if code:
            sys.stderr.write(f"srun: error: {t['node']}: task {t['procid']}: "
                             f"{'Exited with exit code ' + str(t['exit_code']) if t['exit_code'] else t['state']}\n")
        rc = max(rc, code)
    sys.stdout.flush()
    return rc


def _pty_step(body: dict) -> int:
    """A step of one task on a pseudo-terminal (in salloc's allocation, typically
    `srun --pty bash`): the task is the relay, which connects back to this srun."""
    from batchd.cli.srun_pty import ChannelListener, relay, report

    listener = ChannelListener()
    try:
        body = dict(body, argv=[sys.executable, "-m", "batchd.cli.ptyhost", "--", *body["argv"]],
                    env=dict(body["env"], **listener.environment()), ntasks=1, nodes=1)
        step = call("srun", "POST", "/v1/steps", body)
        query = {"job_id": str(body["job_id"]), "step_id": str(step["step_id"])}
        final = ("COMPLETED", "FAILED", "CANCELLED")
        while not listener.try_accept(0.1):
            tasks = call("srun", "GET", "/v1/steps", query=query)["tasks"]
            if tasks and all(t["state"] in final for t in tasks):  # ended before it reached srun
                t = tasks[0]
                status = t["exit_code"] or -(t["exit_signal"] or 0) or (0 if t["state"] == "COMPLETED" else 1)
                return report(status, t["node"])
        status = relay(listener.channel)
        tasks = call("srun", "GET", "/v1/steps", query=query)["tasks"]
        node = tasks[0]["node"] if tasks else "?"
        if status is None:
            request("POST", "/v1/steps/cancel", {"job_id": body["job_id"], "step_id": step["step_id"]})
            return 1
        return report(status, node)
    finally:
        listener.close()


if __name__ == "__main__":
    sys.exit(main())
