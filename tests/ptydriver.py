"""A command on a real pseudo-terminal, driven as a user at a keyboard would: what it
prints is read as it comes, keys are written to it, the window can be resized."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time


class PtyDriver:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, rows: int = 24, cols: int = 80):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its controlling terminal
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.seen = b""
        self.status: int | None = None

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the command and its children let go of the terminal
            data = b""
        if not data:
            return False
        self.seen += data
        return True

    def expect(self, pattern: str, timeout: float = 20.0) -> re.Match:
        """Wait until what the command printed matches `pattern` (a regex on the text)."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern.encode())
        while True:
            m = rx.search(self.seen)
            if m:
                return m
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 0.2)):
                m = rx.search(self.seen)
                if m:
                    return m
                raise AssertionError(f"{pattern!r} not seen; the terminal showed {self.seen.decode(errors='replace')!r}")

    def send(self, text: str | bytes) -> None:
        os.write(self.fd, text.encode() if isinstance(text, str) else text)

    def resize(self, rows: int, cols: int) -> None:
        """A new window size; the kernel sends SIGWINCH to the command's foreground."""
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def wait(self, timeout: float = 30.0) -> int:
        """The command's exit code (reading what it still prints)."""
        deadline = time.monotonic() + timeout
        while self.status is None:
            done, st = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.status = os.waitstatus_to_exitcode(st)
                break
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"still running; the terminal showed {self.seen.decode(errors='replace')!r}")
            self._read(0.1)
        while self._read(0.05) and select.select([self.fd], [], [], 0)[0]:
            pass
        return self.status

    def text(self) -> str:
        return self.seen.decode(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.status is None:
            self.kill()
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        os.close(self.fd)
