"""The task side of `srun --pty`: run in the job (`python -m batchd.cli.ptyhost CMD...`), it
connects back to srun (`batchd.cli.ptychannel`), gives COMMAND a pseudo-terminal of its
own (a new session with it as the controlling terminal, so job control and Ctrl-C work
as in a login shell) and relays the terminal both ways: srun's keystrokes to the pty,
the pty's output to srun, srun's window size (and its changes: the kernel sends SIGWINCH).
Its exit code is COMMAND's, which the job keeps.

- srun gone (its terminal closed, the connection lost): COMMAND's session gets SIGHUP, as
  from a terminal hang-up, then SIGKILL after HANGUP_WAIT_S; the job ends.
- the job ended by batchd (time limit, scancel): the supervisor signals every process of
  the job; the relay keeps draining the pty and sends COMMAND's end to srun.
- no srun reachable: exit 1 after CONNECT_WAIT_S with a line on stderr (the job's error file).

`--pipes FLAGS` (srun without --pty): COMMAND without a terminal; its stdout (`o` in
FLAGS) and stderr (`e`) are relayed to srun, srun's stdin (`i`) to it; a stream not
relayed is the job's own (its -o/-e file, /dev/null for stdin). srun gone: SIGTERM to
COMMAND, SIGKILL after HANGUP_WAIT_S.

`--hold` (salloc's allocation): no command; the relay sends the job's environment (the
SLURM_* variables of the allocation) to salloc and waits for salloc's EXIT frame, whose code
it exits with; a lost connection (salloc gone) ends the job at once, exit 1.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import signal
import socket
import struct
import sys
import termios
import time

from batchd.cli import ptychannel as pc

CONNECT_WAIT_S = 30.0
HANGUP_WAIT_S = 10.0
FIRST_FRAME_WAIT_S = 5.0


def _addresses(spec: str) -> list[tuple[str, int]]:
    hosts, _, port = spec.rpartition(":")
    return [(h, int(port)) for h in hosts.split(",") if h]


def _connect(spec: str, key: str) -> pc.Channel:
    deadline = time.monotonic() + CONNECT_WAIT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        for host, port in _addresses(spec):
            try:
                sock = socket.create_connection((host, port), timeout=5)
            except OSError as e:
                last = e
                continue
            try:
                ch = pc.connect(sock, key)
            except pc.ChannelError as e:
                last = e
                sock.close()
                continue
            sock.settimeout(None)
            return ch
        time.sleep(0.5)
    raise SystemExit(f"batchd pty: cannot reach srun at {spec}: {last}")


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _spawn(argv: list[str], rows: int, cols: int) -> tuple[int, int]:
    """(pid, master fd) of COMMAND on a fresh pty of the given size."""
    master, slave = os.openpty()
    _set_size(slave, rows, cols)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(master)
            os.login_tty(slave)  # new session, the pty its controlling terminal, on 0/1/2
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
                signal.signal(s, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"batchd pty: {argv[0]}: {e.strerror}\r\n".encode())
            os._exit(127 if e.errno == errno.ENOENT else 126)
    os.close(slave)
    return pid, master


def _code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _hang_up(pid: int) -> int:
    """SIGHUP to COMMAND's session, SIGKILL after HANGUP_WAIT_S; its exit code."""
    for sig, wait in ((signal.SIGHUP, HANGUP_WAIT_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except OSError:
            pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return _code(status)
            time.sleep(0.05)
    return 128 + signal.SIGKILL


def hold(ch: pc.Channel) -> int:
    """salloc's holder: the environment to salloc, then wait for its end."""
    ch.send(pc.ENVIRON, b"\0".join(f"{k}={v}".encode(errors="replace") for k, v in os.environ.items()))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while True:
        try:
            frames = ch.recv()
        except (OSError, pc.ChannelError):
            frames = None
        if frames is None:
            return 1
        for kind, payload in frames:
            if kind == pc.EXIT:
                code = int(payload.decode() or "1")
                return code if 0 <= code <= 255 else 1


#: how much of srun's input the relay keeps for a task that does not read it yet; above
#: it the relay stops reading the channel's input until the task catches up
STDIN_BUFFER = 1 << 20


def pipes(ch: pc.Channel, argv: list[str], flags: str) -> int:
    """COMMAND with its streams relayed (see the module docstring); its exit code."""
    import subprocess

    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if "i" in flags else subprocess.DEVNULL,
                                stdout=subprocess.PIPE if "o" in flags else None,
                                stderr=subprocess.PIPE if "e" in flags else None)
    except OSError as e:
        ch.send(pc.ERR, f"batchd: {argv[0]}: {e.strerror}\n".encode())
        code = 127 if e.errno == errno.ENOENT else 126
        ch.send(pc.EXIT, str(code).encode())
        return code
    outputs = {p.fileno(): kind for p, kind in ((proc.stdout, pc.DATA), (proc.stderr, pc.ERR)) if p is not None}
    stdin_fd = proc.stdin.fileno() if proc.stdin is not None else None
    if stdin_fd is not None:
        os.set_blocking(stdin_fd, False)
    pending = bytearray()
    close_stdin = False
    while True:
        if stdin_fd is not None and close_stdin and not pending:
            os.close(stdin_fd)
            proc.stdin = None
            stdin_fd = None
        readers = [*outputs] + ([ch.sock] if len(pending) < STDIN_BUFFER else [])
        writers = [stdin_fd] if stdin_fd is not None and pending else []
        if not outputs and proc.poll() is not None:
            break
        try:  # no output left to wait for: look for the task's end often
            ready_r, ready_w, _ = select.select(readers, writers, [], 0.5 if outputs else 0.02)
        except InterruptedError:
            continue
        for fd in ready_r:
            if fd in outputs:
                data = os.read(fd, 65536)
                if data:
                    ch.send(outputs[fd], data)
                else:
                    del outputs[fd]
        if ch.sock in ready_r:
            try:
                got = ch.recv()
            except (OSError, pc.ChannelError):
                got = None
            if got is None:  # srun is gone: end the task as Slurm ends a step whose srun died
                return _end_task(proc)
            for kind, payload in got:
                if kind == pc.DATA and stdin_fd is not None and not close_stdin:
                    pending += payload
                elif kind == pc.EOF:
                    close_stdin = True
                elif kind == pc.SIGNAL:
                    try:
                        proc.send_signal(int(payload.decode() or "0"))
                    except (OSError, ValueError):
                        pass
        if stdin_fd is not None and stdin_fd in ready_w:
            try:
                del pending[:os.write(stdin_fd, pending)]
            except BlockingIOError:
                pass
            except OSError:  # the task closed its stdin: what srun still sends is dropped
                pending.clear()
                close_stdin = True
    status = proc.wait()
    ch.send(pc.EXIT, str(status).encode())
    return status if status >= 0 else 128 - status


def _end_task(proc) -> int:
    import subprocess

    proc.terminate()
    try:
        status = proc.wait(HANGUP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        status = proc.wait()
    return status if status >= 0 else 128 - status


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    holding = argv[:1] == ["--hold"]
    if holding:
        argv = argv[1:]
    flags = None
    if argv[:1] == ["--pipes"] and len(argv) > 1:
        flags, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    spec = os.environ.pop("BATCHD_PTY", "")
    key = os.environ.pop("BATCHD_PTY_KEY", "")
    if not (argv or holding) or not spec or not key:
        sys.stderr.write("batchd pty: run by srun --pty and salloc only (BATCHD_PTY, BATCHD_PTY_KEY)\n")
        return 2
    ch = _connect(spec, key)
    if holding or flags is not None:
        try:
            return hold(ch) if holding else pipes(ch, argv, flags or "")
        finally:
            ch.sock.close()
    rows, cols = 24, 80
    pending: list[tuple[bytes, bytes]] = []
    ch.sock.settimeout(FIRST_FRAME_WAIT_S)
    try:  # srun sends its window size first
        frames = ch.recv() or []
    except (OSError, pc.ChannelError):
        frames = []
    ch.sock.settimeout(None)
    for kind, payload in frames:
        if kind == pc.WINSIZE:
            rows, cols = pc.parse_winsize(payload)
        else:
            pending.append((kind, payload))
    signal.signal(signal.SIGTERM, lambda *_: None)  # the supervisor ends COMMAND too; keep draining
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pid, master = _spawn(argv, rows, cols)

    def deliver(kind: bytes, payload: bytes) -> None:
        if kind == pc.DATA:
            view = memoryview(payload)
            while view:
                try:
                    view = view[os.write(master, view):]
                except BlockingIOError:
                    select.select([], [master], [], 1.0)
        elif kind == pc.WINSIZE:
            _set_size(master, *pc.parse_winsize(payload))
        elif kind == pc.EOF:
            os.write(master, b"\x04")
        elif kind == pc.SIGNAL:
            try:
                os.killpg(os.tcgetpgrp(master), int(payload.decode() or "0"))
            except (OSError, ValueError):
                pass

    try:
        for kind, payload in pending:
            deliver(kind, payload)
        srun_here = True
        while True:
            try:
                ready, _, _ = select.select([master, ch.sock] if srun_here else [master], [], [])
            except InterruptedError:
                continue
            if master in ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every process let go of the terminal
                    data = b""
                if not data:
                    break
                if srun_here:
                    try:
                        ch.send(pc.DATA, data)
                    except OSError:
                        srun_here = False
            if srun_here and ch.sock in ready:
                try:
                    got = ch.recv()
                except (OSError, pc.ChannelError):
                    got = None
                if got is None:  # srun and its terminal are gone: hang up, as a terminal does
                    os.close(master)
                    return _hang_up(pid)
                for kind, payload in got:
                    deliver(kind, payload)
        _, status = os.waitpid(pid, 0)
        try:  # as os.waitstatus_to_exitcode gives it: negative for a signal
            ch.send(pc.EXIT, str(os.waitstatus_to_exitcode(status)).encode())
        except OSError:
            pass
        return _code(status)
    finally:
        try:
            ch.sock.close()
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
