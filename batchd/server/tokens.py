"""JSON Web Tokens as Slurm's `auth/jwt` makes and checks them (RFC 7519, HS256 only): the
claims `iat`, `exp` and `sun` (the user's name), signed with HMAC-SHA256 under the key in
`[http] jwt_key` (default `<state_dir>/jwt_hs256.key`). `scontrol token` asks the daemon
over the Unix socket for one (`POST /v1/token`: the socket knows the caller, so the token
is the caller's); a REST request carries it in `X-SLURM-USER-TOKEN`, and its user is the
request's caller (`batchd.server.slurmrest`).

The key never leaves the daemon: it is read from a file that must be the daemon user's
and unreadable by anyone else (mode 0600 or 0400, as Slurm asks of its key); the daemon
makes one of 32 random bytes where none exists. A file others can read, or one of
fewer than 32 bytes, is refused: no token is issued or accepted then (and the log says
why), rather than tokens anyone on the host could forge.

Checking a token: three base64url parts, a header whose `alg` is HS256 (`none` and every
other algorithm are refused, so a token cannot choose how it is checked), the signature
compared in constant time, `exp` in the future, `sun` (or Slurm's fallback `username`) a
non-empty string. The standard library's `hmac` does the cryptography: no dependency.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import threading
import time
from typing import Any

from batchd.errors import BatchdError

log = logging.getLogger(__name__)

KEY_BYTES = 32
DEFAULT_LIFESPAN_S = 1800
MAX_LIFESPAN_S = 365 * 86400
KEY_NAME = "jwt_hs256.key"
MAX_TOKEN_CHARS = 8192


class TokenError(BatchdError):
    """A token that does not authenticate (HTTP 401)."""

    status = 401
    code = "AuthenticationFailed"


class KeyUnavailable(BatchdError):
    """No usable key: tokens are off (HTTP 503)."""

    status = 503
    code = "TokensUnavailable"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text or not all(c.isalnum() or c in "-_" for c in text) or not text.isascii():
        raise TokenError("malformed token")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise TokenError("malformed token") from None


def sign(key: bytes, user: str, lifespan_s: int, now: float | None = None) -> str:
    """A token for `user`, valid `lifespan_s` seconds from `now`."""
    iat = int(time.time() if now is None else now)
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64(json.dumps({"iat": iat, "exp": iat + int(lifespan_s), "sun": user}, separators=(",", ":")).encode())
    mac = hmac.new(key, f"{head}.{body}".encode("ascii"), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


def verify(key: bytes, token: str, now: float | None = None) -> dict[str, Any]:
    """The claims of a valid token, else TokenError saying what is wrong with it."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise TokenError("malformed token")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenError("malformed token")
    try:
        header = json.loads(_unb64(parts[0]))
        claims = json.loads(_unb64(parts[1]))
    except (ValueError, UnicodeDecodeError):
        raise TokenError("malformed token") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise TokenError("malformed token")
    if str(header.get("alg", "")).upper() != "HS256":
        raise TokenError(f"token algorithm {header.get('alg')!r} is not accepted (HS256 only)")
    mac = hmac.new(key, f"{parts[0]}.{parts[1]}".encode("ascii"), hashlib.sha256).digest()
    if not hmac.compare_digest(mac, _unb64(parts[2])):
        raise TokenError("token signature does not verify")
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        raise TokenError("token has no expiry")
    if exp < (time.time() if now is None else now):
        raise TokenError("token expired")
    user = claims.get("sun") or claims.get("username")
    if not isinstance(user, str) or not user:
        raise TokenError("token names no user")
    return dict(claims, sun=user)


def key_path(cfg: Any) -> str:
    return (cfg.http or {}).get("jwt_key") or os.path.join(cfg.state_dir, KEY_NAME)


def ensure_key(path: str) -> None:
    """Make a key of KEY_BYTES random bytes, mode 0600, where there is none."""
    if os.path.exists(path):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(KEY_BYTES))
    log.info("jwt key created path=%s", path)


def read_key(path: str) -> bytes:
    """The key, or KeyUnavailable when the file is missing, others may read it, it is not
    this process's user's, or it is too short."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise KeyUnavailable(f"the JWT key {path} cannot be read: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077:
            raise KeyUnavailable(f"the JWT key {path} is readable by others (mode {st.st_mode & 0o777:o}; "
                                 "it must be 0600 or 0400)")
        if st.st_uid not in (os.geteuid(), 0):
            raise KeyUnavailable(f"the JWT key {path} belongs to uid {st.st_uid}, not to the daemon's user")
        key = f.read(4096)
    if len(key) < KEY_BYTES:
        raise KeyUnavailable(f"the JWT key {path} holds {len(key)} bytes; at least {KEY_BYTES} are needed")
    return key


class Tokens:
    """The daemon's issuer and checker, reading the key once (again when it was unusable:
    an admin's fixed mode takes effect without a restart)."""

    def __init__(self, cfg: Any, create: bool = True):
        self.path = key_path(cfg)
        self.create = create
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def key(self) -> bytes:
        with self._lock:
            if self._key is None:
                if self.create:
                    try:
                        ensure_key(self.path)
                    except OSError as e:
                        raise KeyUnavailable(f"the JWT key {self.path} cannot be made: {e.strerror}") from None
                self._key = read_key(self.path)
            return self._key

    def issue(self, user: str, lifespan_s: int | None) -> tuple[str, int]:
        life = DEFAULT_LIFESPAN_S if lifespan_s is None else int(lifespan_s)
        now = int(time.time())
        return sign(self.key(), user, life, now), now + life

    def check(self, token: str) -> str:
        """The user a valid token names (TokenError otherwise)."""
        return str(verify(self.key(), token)["sun"])
