"""srun's side of the channel to its task (`batchd.cli.ptychannel`): listen for the job's
relay (`batchd.cli.ptyhost`), then relay until the task ends. With `--pty` (`relay`) the
user's terminal goes raw; without (`relay_pipes`) the task's stdout and stderr come as
they are written and srun's stdin goes to it.

In raw mode every key reaches the task's terminal, Ctrl-C, Ctrl-Z and Ctrl-\\ included,
so the task's shell does job control and signals as on a login; srun's own window size
goes first and again on every SIGWINCH. The task's end is srun's exit code, with Slurm's
line for a failed task (`srun: error: NODE: task 0: Exited with exit code N`).
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import struct
import sys
import termios
import tty
from collections.abc import Callable
from typing import Any

from batchd.cli import ptychannel as pc

#: how long one accept may hold srun's waiting loop (s)
ACCEPT_SLICE_S = 0.05


def advertised_hosts() -> list[str]:
    """Where the relay tries to reach srun: `BATCHD_SRUN_HOST` (a comma list) when set,
    else this machine's name, then the loopback (a task on this very machine)."""
    given = os.environ.get("BATCHD_SRUN_HOST")
    if given:
        return [h for h in given.split(",") if h]
    return [socket.gethostname(), "127.0.0.1"]


def winsize(fd: int = 0) -> tuple[int, int]:
    rows, cols, _x, _y = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    return rows, cols


class ChannelListener:
    """The listening socket and the key of one session (srun, srun --pty, salloc)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("", 0), family=socket.AF_INET, backlog=4)
        self.key = pc.new_key()
        self.hosts = advertised_hosts()
        self.channel: pc.Channel | None = None

    def environment(self) -> dict[str, str]:
        port = self.sock.getsockname()[1]
        return {"BATCHD_PTY": f"{','.join(self.hosts)}:{port}", "BATCHD_PTY_KEY": self.key}

    def try_accept(self, timeout: float = ACCEPT_SLICE_S) -> bool:
        """Wait up to `timeout` for the relay; True once it is connected and checked
        (a connection that fails the handshake is closed and forgotten)."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return False
        conn, _addr = self.sock.accept()
        conn.settimeout(5)
        try:
            self.channel = pc.accept(conn, self.key)
        except pc.ChannelError:
            conn.close()
            return False
        conn.settimeout(None)
        return True

    def close(self) -> None:
        self.sock.close()
        if self.channel is not None:
            self.channel.sock.close()


def relay(ch: pc.Channel) -> int | None:
    """Relay the terminal until the task ends: its wait status as `os.waitstatus_to_exitcode`
    gives it (negative: killed by that signal), or None when the channel broke or srun was
    told to stop (SIGHUP, SIGTERM: the terminal or the session is gone)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    stop = []

    def on_winch(_s, _f):
        try:
            os.write(wake_w, b"w")
        except OSError:
            pass

    def on_stop(_s, _f):
        stop.append(1)
        try:
            os.write(wake_w, b"s")
        except OSError:
            pass

    old_handlers = {s: signal.signal(s, h) for s, h in ((signal.SIGWINCH, on_winch), (signal.SIGHUP, on_stop),
                                                        (signal.SIGTERM, on_stop), (signal.SIGINT, signal.SIG_IGN))}
    saved = termios.tcgetattr(0)
    tty.setraw(0)
    stdin_open = True
    try:
        ch.send(pc.WINSIZE, pc.winsize_payload(*winsize(0)))
        while not stop:
            watch = [ch.sock, wake_r] + ([0] if stdin_open else [])
            try:
                ready, _, _ = select.select(watch, [], [])
            except InterruptedError:
                continue
            if wake_r in ready:
                os.read(wake_r, 64)
                if not stop:
                    ch.send(pc.WINSIZE, pc.winsize_payload(*winsize(0)))
            if 0 in ready:
                data = os.read(0, 65536)
                if data:
                    ch.send(pc.DATA, data)
                else:
                    stdin_open = False
                    ch.send(pc.EOF)
            if ch.sock in ready:
                try:
                    frames = ch.recv()
                except pc.ChannelError:
                    return None
                if frames is None:
                    return None
                for kind, payload in frames:
                    if kind == pc.DATA:
                        view = memoryview(payload)
                        while view:
                            view = view[os.write(1, view):]
                    elif kind == pc.EXIT:
                        return int(payload.decode())
        return None
    except OSError:
        return None
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
        for s, h in old_handlers.items():
            signal.signal(s, h)
        os.close(wake_r)
        os.close(wake_w)


def report(status: int, node: str, prog: str = "srun") -> int:
    """Slurm's line for a task that failed, and srun's exit code for `status`."""
    if status < 0:
        try:
            name = signal.strsignal(-status) or f"signal {-status}"
        except ValueError:
            name = f"signal {-status}"
        sys.stderr.write(f"{prog}: error: {node}: task 0: {name}\n")
        return 128 - status
    if status:
        sys.stderr.write(f"{prog}: error: {node}: task 0: Exited with exit code {status}\n")
    return status


class Labeler:
    """One output stream to `fd`, every line prefixed with `label` (None: as it comes)."""

    def __init__(self, fd: int, label: str | None):
        self.fd, self.label = fd, label.encode() if label is not None else None
        self.partial = b""

    def write(self, data: bytes, final: bool = False) -> None:
        if self.label is not None:
            lines = (self.partial + data).split(b"\n")
            self.partial = lines.pop()
            if final and self.partial:
                lines.append(self.partial)
                self.partial = b""
            data = b"".join(self.label + line + b"\n" for line in lines)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:
                select.select([], [self.fd], [], 1.0)


def relay_pipes(ch: pc.Channel, label: str | None, forward_stdin: bool,
                on_tick: Callable[[], None] | None = None) -> int | None:
    """Relay a task without a terminal until it ends: its stdout and stderr to srun's, srun's
    stdin to it (`forward_stdin`); `on_tick` is called at least every 0.2 s (srun's Ctrl-C
    handling). The task's wait status (os.waitstatus_to_exitcode's form), or None when the
    channel broke."""
    out, err = Labeler(1, label), Labeler(2, label)
    sock = ch.sock
    sock.setblocking(False)
    outgoing = bytearray()
    stdin_open = forward_stdin
    try:
        while True:
            if on_tick is not None:
                on_tick()
            readers: list[Any] = [sock] + ([0] if stdin_open and not outgoing else [])
            try:
                ready_r, ready_w, _ = select.select(readers, [sock] if outgoing else [], [], 0.2)
            except InterruptedError:
                continue
            if sock in ready_w:
                try:
                    del outgoing[:sock.send(outgoing)]
                except BlockingIOError:
                    pass
            if 0 in ready_r:
                try:
                    data = os.read(0, 65536)
                except OSError:
                    data = b""
                if data:
                    outgoing += ch.frame(pc.DATA, data)
                else:
                    stdin_open = False
                    outgoing += ch.frame(pc.EOF)
            if sock in ready_r:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    return None
                for kind, payload in ch.feed(data):
                    if kind == pc.DATA:
                        out.write(payload)
                    elif kind == pc.ERR:
                        err.write(payload)
                    elif kind == pc.EXIT:
                        return int(payload.decode())
    except (OSError, pc.ChannelError):
        return None
    finally:
        out.write(b"", final=True)
        err.write(b"", final=True)
