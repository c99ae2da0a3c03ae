"""The job side of a run: what the supervisor's forked child does before it execs the
job (new session, the user's identity, CPU pinning, the output files opened as the user,
the working directory), and the lines written into the job's files as the user."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import stat
import subprocess
import time
from typing import NoReturn

from batchd.node.spool import CANCEL_NOTES, DAEMON_ONLY_ENV, LaunchRequest

log = logging.getLogger(__name__)

#: A job whose output file cannot be opened ends FAILED with ExitCode 0:53, as Slurm
#: 22.05 records it (its batch step CANCELLED 0:53).
OUTPUT_OPEN_FAILED = b"couldn't open output file"
OUTPUT_OPEN_FAILED_SIG = 53
_RESET_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD,
                  signal.SIGUSR1, signal.SIGXFSZ, signal.SIGQUIT)


def pin_cpus(cpu_ids: list[int] | None) -> None:
    """Pin the calling process to the job's CPUs that this machine lets it use (a
    static inventory may name CPUs the machine does not have: those are dropped, and
    with none left the process stays unpinned)."""
    if not cpu_ids:
        return
    with contextlib.suppress(OSError, AttributeError):
        cpus = set(cpu_ids) & os.sched_getaffinity(0)
        if cpus:
            os.sched_setaffinity(0, cpus)


def exec_job(req: LaunchRequest, script: str, go_r: int, err_w: int, sid_w: int,
             parents: tuple[int, ...] = ()) -> None:
    """Child side of the fork: never returns (execs or `_exit`s).

    `parents` are the supervisor's ends of the pipes, closed first: the child must see
    EOF on `go_r` when the supervisor dies (else it would wait for ever, and keep the
    run's lock, inherited through the fork, held). Once in its own session the child
    says so on `sid_w` (the supervisor records the job's process group only then), and
    waits for the supervisor's go on `go_r`, written once the start is recorded.
    Failures before exec are written to `err_w` (read by the supervisor) and, once the
    stderr file is open, into it, Slurm style; the child then exits 1 (job FAILED).
    """
    stderr_open = False

    def fail(msg: str) -> NoReturn:
        with contextlib.suppress(OSError):
            os.write(err_w, msg.encode())
        if stderr_open:
            with contextlib.suppress(OSError):
                os.write(2, f"batchd: error: {msg}\n".encode())
        os._exit(1)

    try:
        for fd in parents:
            with contextlib.suppress(OSError):
                os.close(fd)
        os.setsid()
        with contextlib.suppress(OSError):  # a dead supervisor: EOF on go_r below
            os.write(sid_w, b"s")
        os.close(sid_w)
        for sig in _RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        if os.read(go_r, 1) != b"g":
            os._exit(127)  # the supervisor died before recording the start
        pin_cpus(req.cpu_ids)
        with contextlib.suppress(OSError):  # undo the supervisor's own OOM protection
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("0")
        if os.geteuid() == 0:
            groups = req.groups if req.groups is not None else os.getgrouplist(req.user, req.gid)
            os.setgroups(groups)
            os.setgid(req.gid)
            os.setuid(req.uid)
        os.umask(int(req.env.get("SLURM_UMASK", "0022"), 8) & 0o777)
        # Opened after dropping privileges: a user can never make root write or read a file;
        # and never through another user's symlink planted in /tmp (`open_output`).
        # Always O_APPEND (as slurmstepd opens them; truncate mode adds O_TRUNC): the notices
        # appended later through another descriptor (`write_stepd_note`) must never be
        # overwritten by what the job writes after them.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if req.open_mode == "append" else os.O_TRUNC)
        paths = [os.path.join(req.workdir, p) for p in (req.stdout, req.stderr or req.stdout)]
        fout = ferr = -1
        try:
            fout = open_output(paths[0], flags)
            ferr = fout if paths[1] == paths[0] else open_output(paths[1], flags)
        except OSError as exc:
            msg = f"couldn't open output file {exc.filename}: {exc.strerror}"
            with contextlib.suppress(OSError):  # the supervisor's log, for the admin
                os.write(2, f"batchd: error: job {req.job_id}: {msg}\n".encode())
            if fout >= 0:  # stdout opened, the error file did not: say it where the user looks
                with contextlib.suppress(OSError):
                    os.write(fout, f"slurmstepd: error: {msg}\n".encode())
            fail(msg)
        stdin = os.path.join(req.workdir, req.stdin) if req.stdin else "/dev/null"
        try:
            fin = os.open(stdin, os.O_RDONLY)
        except OSError as exc:
            # Slurm 22.05 only logs this in slurmd's log; batchd tells the user too
            with contextlib.suppress(OSError):
                os.write(ferr, f"slurmstepd: error: Could not open stdin file {stdin}: {exc.strerror}\n".encode())
            fail(f"Could not open stdin file {stdin}: {exc.strerror}")
        os.dup2(fin, 0)
        os.dup2(fout, 1)
        os.dup2(ferr, 2)
        stderr_open = True
        try:
            os.chdir(req.workdir)
        except OSError as exc:
            fail(f"couldn't chdir to `{req.workdir}': {exc.strerror}: job FAILED")
        env = {k: v for k, v in req.env.items() if k not in DAEMON_ONLY_ENV}
        env["SLURM_TASK_PID"] = str(os.getpid())  # exec keeps the pid: the batch shell's
        try:
            with open(script, "rb") as head:
                shebang = head.read(2) == b"#!"
            if shebang:
                os.execve(script, [script, *req.argv], env)
            os.execve("/bin/bash", ["/bin/bash", script, *req.argv], env)
        except OSError as exc:
            fail(f"execve(): {script}: {exc.strerror}")
    except BaseException as exc:  # nothing may return into the supervisor's code
        fail(f"job setup failed: {exc}")
    finally:
        os._exit(1)


class PlantedSymlink(PermissionError):
    """The last component of an output path is a symlink the kernel's
    `fs.protected_symlinks` would not follow for this user."""


def may_follow(link: os.stat_result, directory: os.stat_result, uid: int) -> bool:
    """The kernel's `fs.protected_symlinks` rule for one symlink: follow it unless its
    directory is sticky and world-writable (/tmp) and the link is owned by neither the
    follower (`uid`) nor the directory's owner."""
    protected = directory.st_mode & (stat.S_ISVTX | stat.S_IWOTH) == stat.S_ISVTX | stat.S_IWOTH
    return not protected or link.st_uid in (uid, directory.st_uid)


def open_output(path: str, flags: int, mode: int = 0o666) -> int:
    """`os.open(path, flags, mode)` for an output or error file, by the job's user, that
    follows a symlink in the last component only where `may_follow` allows it, whatever
    the host's `fs.protected_symlinks` setting: another user's link planted in /tmp can
    never redirect a job's output into a file of the job's user. The link is looked at
    and opened through one descriptor of its directory, and in the protected case the
    link cannot be swapped between the two (sticky: only its owner may replace it).
    Raises OSError (`PlantedSymlink` for a refused link, `filename` set)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        # a symlink: ELOOP, or EACCES (O_CREAT on another's link in a sticky directory)
        if exc.errno not in (errno.ELOOP, errno.EACCES):
            raise
        first = exc
    head, name = os.path.split(path)
    dfd = os.open(head or ".", os.O_PATH | os.O_DIRECTORY)
    try:
        link = os.lstat(name, dir_fd=dfd)
        if not stat.S_ISLNK(link.st_mode):
            raise first
        if not may_follow(link, os.fstat(dfd), os.geteuid()):
            raise PlantedSymlink(errno.EACCES, f"refusing to follow a symlink owned by uid {link.st_uid} "
                                 f"in a sticky world-writable directory", path)
        return os.open(name, flags, mode, dir_fd=dfd)
    except OSError as exc:
        exc.filename = path
        raise
    finally:
        os.close(dfd)


def write_stepd_note(req: LaunchRequest, cause: str) -> None:
    """Append slurmstepd's `*** JOB N ON node CANCELLED AT time[ DUE TO ...] ***` line
    to the job's error file (CANCEL_NOTES), opened as the job's user (a forked child
    drops to the user first when the supervisor is root). Failures are only logged."""
    note = CANCEL_NOTES.get(cause)
    if note is None:
        return
    node = _node(req)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
    write_stepd_error(req, f"*** JOB {req.job_id} ON {node} CANCELLED AT {stamp}{note} ***")


def _node(req: LaunchRequest) -> str:
    return req.node or req.env.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


def write_stepd_error(req: LaunchRequest, message: str) -> None:
    """Append `slurmstepd-NODE: error: MESSAGE` to the job's error file, opened as the job's
    user (a forked child drops to the user first when the supervisor is root), after
    whatever the job wrote (its files are O_APPEND too). Failures are only logged."""
    line = f"slurmstepd-{_node(req)}: error: {message}\n"
    path = os.path.join(req.workdir, req.stderr or req.stdout)
    if os.geteuid() != 0:
        append_line(path, line)
        return
    try:
        pid = os.fork()
    except OSError as exc:
        log.warning("stepd note not written error=%s", exc)
        return
    if pid == 0:  # child: become the user, append, leave
        try:
            groups = req.groups if req.groups is not None else os.getgrouplist(req.user, req.gid)
            os.setgroups(groups)
            os.setgid(req.gid)
            os.setuid(req.uid)
            append_line(path, line)
        finally:
            os._exit(0)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def append_line(path: str, line: str) -> None:
    """Append `line` to `path` (created 0666 & umask when missing); errors are logged."""
    try:
        fd = open_output(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except OSError as exc:
        log.warning("stepd note not written path=%s error=%s", path, exc)
        return
    try:
        os.write(fd, line.encode())
    except OSError as exc:
        log.warning("stepd note not written path=%s error=%s", path, exc)
    finally:
        os.close(fd)



def append_as_user(user: str, uid: int, gid: int, path: str, line: str) -> None:
    """Append `line` to `path` as the user `uid`/`gid`, e.g. why a job could not be
    launched, into the job's error file. Safe in a threaded daemon: the user's side is a
    fresh `/bin/sh` started with the user's identity (no Python code runs in a fork).
    Failures are only logged."""
    if os.geteuid() != 0:
        append_line(path, line)
        return
    try:
        # the same symlink rule as the job's own outputs (open_output): a link planted by
        # another user in a sticky world-writable directory is not followed. (The shell
        # below opens the path again; a link planted in between is a narrow race that the
        # kernel's fs.protected_symlinks, on by default, closes.)
        link = os.lstat(path)
        if stat.S_ISLNK(link.st_mode) and not may_follow(link, os.stat(os.path.dirname(path) or "."), uid):
            log.warning("note not written path=%s error=refusing a symlink owned by uid %s", path, link.st_uid)
            return
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("note not written path=%s error=%s", path, exc)
        return
    try:
        groups = os.getgrouplist(user, gid)
    except (KeyError, OSError):
        groups = [gid]
    try:
        r = subprocess.run(["/bin/sh", "-c", 'printf "%s" "$1" >> "$2"', "sh", line, path],
                           user=uid, group=gid, extra_groups=groups, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=10, check=False, cwd="/", env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("note not written path=%s error=%s", path, exc)
        return
    if r.returncode != 0:
        log.warning("note not written path=%s error=%s", path, r.stderr.decode(errors="replace").strip()[-200:])
