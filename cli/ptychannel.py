"""The channel between `srun` (and `salloc`) and the job's task: one TCP connection, opened from the
task's node back to srun, mutually authenticated with a key only srun and the job hold,
every frame carrying a MAC (docs/interactive.md has the threat model).

srun listens on an ephemeral port and puts `BATCHD_PTY` (`host[,host...]:port`) and
`BATCHD_PTY_KEY` (32 random bytes, hex) in the job's environment, which only the daemon,
the job's own processes and root can read. The task's relay (`batchd.cli.ptyhost`) connects:

    relay -> srun   MAGIC, nonce_r (32 bytes)
    srun  -> relay  nonce_s (32), HMAC(key, "srun" | nonce_r | nonce_s)
    relay -> srun   HMAC(key, "task" | nonce_s | nonce_r)

Each side checks the other's MAC (`hmac.compare_digest`), so neither a process that
found the port nor one that listens where the relay connects learns or injects anything.
Then frames, both ways: kind (1 byte), length (4, big-endian), payload, and the first 16
bytes of HMAC(session, direction | sequence | kind | payload) with session =
HMAC(key, "session" | nonce_r | nonce_s). A frame out of order, replayed or changed breaks
the channel. Nothing is encrypted: the keystrokes cross the network as Slurm's srun I/O
does.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct

MAGIC = b"batchd-pty 1\n"
NONCE = 32
MAC = 16
MAX_FRAME = 1 << 20
#: frame kinds: data (terminal bytes either way), window size (rows, cols), end of the
#: user's input, the task's exit (its code), a signal for the task's foreground
DATA, WINSIZE, EOF, EXIT, SIGNAL = b"D", b"W", b"E", b"X", b"S"
#: salloc's holder: the job's environment (`NAME=value` items, NUL-separated), sent once
ENVIRON = b"V"
#: without a pty: the task's stderr (its stdout goes as DATA)
ERR = b"R"


class ChannelError(Exception):
    """The peer failed the handshake, or a frame failed its MAC or its form."""


def new_key() -> str:
    return os.urandom(32).hex()


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the peer closed the channel")
        buf += chunk
    return bytes(buf)


class Channel:
    """Framed, MAC'd messages over a connected socket (after `accept` or `connect`)."""

    def __init__(self, sock: socket.socket, session: bytes, sending: bytes, receiving: bytes):
        self.sock = sock
        self._session = session
        self._out_dir, self._in_dir = sending, receiving
        self._out_seq = self._in_seq = 0
        self._buf = bytearray()

    def frame(self, kind: bytes, payload: bytes = b"") -> bytes:
        """The next frame's bytes, to be sent in order (its sequence number is spent)."""
        head = kind + struct.pack(">I", len(payload))
        tag = _mac(self._session, self._out_dir, struct.pack(">Q", self._out_seq), head, payload)[:MAC]
        self._out_seq += 1
        return head + payload + tag

    def send(self, kind: bytes, payload: bytes = b"") -> None:
        self.sock.sendall(self.frame(kind, payload))

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """The whole frames `data` completes (what `recv` gave), checked; the rest is kept."""
        self._buf += data
        out = []
        while len(self._buf) >= 5:
            kind = bytes(self._buf[:1])
            (n,) = struct.unpack(">I", self._buf[1:5])
            if n > MAX_FRAME:
                raise ChannelError("frame too long")
            if len(self._buf) < 5 + n + MAC:
                break
            payload = bytes(self._buf[5:5 + n])
            tag = bytes(self._buf[5 + n:5 + n + MAC])
            want = _mac(self._session, self._in_dir, struct.pack(">Q", self._in_seq), bytes(self._buf[:5]),
                        payload)[:MAC]
            if not hmac.compare_digest(tag, want):
                raise ChannelError("a frame failed its check")
            self._in_seq += 1
            del self._buf[:5 + n + MAC]
            out.append((kind, payload))
        return out

    def recv(self) -> list[tuple[bytes, bytes]] | None:
        """The frames one read of the socket completes; None at the end of the connection."""
        data = self.sock.recv(65536)
        if not data:
            return None
        return self.feed(data)


def accept(sock: socket.socket, key_hex: str) -> Channel:
    """srun's side of the handshake on an accepted connection (ChannelError when it fails)."""
    key = bytes.fromhex(key_hex)
    try:
        if _read_exact(sock, len(MAGIC)) != MAGIC:
            raise ChannelError("not a batchd pty relay")
        nonce_r = _read_exact(sock, NONCE)
        nonce_s = os.urandom(NONCE)
        sock.sendall(nonce_s + _mac(key, b"srun", nonce_r, nonce_s))
        if not hmac.compare_digest(_read_exact(sock, 32), _mac(key, b"task", nonce_s, nonce_r)):
            raise ChannelError("the relay does not hold the job's key")
    except (OSError, ConnectionError) as e:
        raise ChannelError(str(e)) from None
    return Channel(sock, _mac(key, b"session", nonce_r, nonce_s), b"S", b"T")


def connect(sock: socket.socket, key_hex: str) -> Channel:
    """The relay's side of the handshake on a connected socket."""
    key = bytes.fromhex(key_hex)
    nonce_r = os.urandom(NONCE)
    try:
        sock.sendall(MAGIC + nonce_r)
        nonce_s = _read_exact(sock, NONCE)
        if not hmac.compare_digest(_read_exact(sock, 32), _mac(key, b"srun", nonce_r, nonce_s)):
            raise ChannelError("the listener does not hold the job's key")
        sock.sendall(_mac(key, b"task", nonce_s, nonce_r))
    except (OSError, ConnectionError) as e:
        raise ChannelError(str(e)) from None
    return Channel(sock, _mac(key, b"session", nonce_r, nonce_s), b"T", b"S")


def winsize_payload(rows: int, cols: int) -> bytes:
    return struct.pack(">HH", rows, cols)


def parse_winsize(payload: bytes) -> tuple[int, int]:
    rows, cols = struct.unpack(">HH", payload[:4])
    return rows, cols
