"""A run's end wakes its node's agent at once, not at the agent's next pass (every
AGENT_PERIOD_S): the supervisor, once the run's EXIT record is written, sends one datagram
to `wake.sock` in the spool directory, where the daemon listens (`WakeListener`).

Best effort both ways: no listener (the daemon is down or restarting), a path too long for
a socket address or any error leaves the agent's periodic pass to find the end, as before.
What the datagram holds is never read: a wake-up only makes the agent pass sooner.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

WAKE_SOCKET = "wake.sock"


def wake_path(spool_dir: str) -> str:
    return os.path.join(spool_dir, WAKE_SOCKET)


def wake_agent(spool_dir: str) -> None:
    """Tell the daemon listening in `spool_dir` that a run ended (never raises)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        s.sendto(b"end", wake_path(spool_dir))


class WakeListener:
    """The daemon's end of `wake.sock`: `on_wake` for every datagram, on a thread."""

    def __init__(self, spool_dir: str, on_wake: Callable[[], None]):
        self.path = wake_path(spool_dir)
        self.on_wake = on_wake
        self._sock: socket.socket | None = None

    def start(self) -> bool:
        """Bind and listen; False (logged) when the socket cannot be made."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            sock.bind(self.path)
            os.chmod(self.path, 0o600)
        except OSError as e:
            sock.close()
            log.warning("no wake-up socket, run ends are seen at the agent's next pass path=%s error=%s",
                        self.path, e)
            return False
        self._sock = sock
        threading.Thread(target=self._serve, name="wake", daemon=True).start()
        return True

    def _serve(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                sock.recv(64)
            except OSError:
                return
            self.on_wake()

    def stop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(self.path)
