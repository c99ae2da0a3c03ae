"""JWTs as Slurm's auth/jwt makes them (batchd.server.tokens): what verifies and what
does not, the key file's rules, and who may have a token for whom (`POST /v1/token`)."""

from __future__ import annotations

import base64
import json
import os
import pwd
import time
from types import SimpleNamespace

import pytest

from batchd.errors import PermissionDenied
from batchd.server import tokens
from batchd.server.tokens import KeyUnavailable, TokenError, Tokens, sign, verify

KEY = b"0123456789abcdef0123456789abcdef"


def _part(obj) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def test_a_token_verifies_and_names_its_user():
    t = sign(KEY, "alice", 60, now=1000)
    claims = verify(KEY, t, now=1030)
    assert (claims["sun"], claims["iat"], claims["exp"]) == ("alice", 1000, 1060)
    head = json.loads(base64.urlsafe_b64decode(t.split(".")[0] + "=="))
    assert head == {"alg": "HS256", "typ": "JWT"}


@pytest.mark.parametrize("mangle, words", [
    (lambda t: t[:-2] + ("AA" if t[-2:] != "AA" else "BB"), "signature"),
    (lambda t: ".".join([t.split(".")[0], _part({"exp": 10 ** 10, "sun": "root"}), t.split(".")[2]]), "signature"),
    (lambda t: ".".join([_part({"alg": "none"}), t.split(".")[1], ""]), "algorithm"),
    (lambda t: ".".join([_part({"alg": "HS512"}), *t.split(".")[1:]]), "algorithm"),
    (lambda t: t + ".x", "malformed"),
    (lambda t: "not-a-token", "malformed"),
    (lambda t: t.replace(".", ".!", 1), "malformed"),
])
def test_a_changed_or_foreign_token_is_refused(mangle, words):
    t = sign(KEY, "alice", 60)
    with pytest.raises(TokenError, match=words):
        verify(KEY, mangle(t))


def test_expired_and_userless_tokens_are_refused():
    with pytest.raises(TokenError, match="expired"):
        verify(KEY, sign(KEY, "alice", 60, now=1000), now=1061)
    with pytest.raises(TokenError, match="signature"):
        verify(b"x" * 32, sign(KEY, "alice", 60))
    import hashlib
    import hmac
    head, body = _part({"alg": "HS256"}), _part({"exp": time.time() + 60})
    mac = base64.urlsafe_b64encode(hmac.new(KEY, f"{head}.{body}".encode(), hashlib.sha256).digest()).rstrip(b"=")
    with pytest.raises(TokenError, match="no user"):
        verify(KEY, f"{head}.{body}.{mac.decode()}")


def test_the_key_is_made_private_and_a_readable_one_is_refused(tmp_path):
    cfg = SimpleNamespace(http={}, state_dir=str(tmp_path))
    t = Tokens(cfg)
    token, expires = t.issue("alice", None)
    path = tmp_path / tokens.KEY_NAME
    assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_bytes()) == tokens.KEY_BYTES
    assert expires - time.time() == pytest.approx(tokens.DEFAULT_LIFESPAN_S, abs=5)
    assert t.check(token) == "alice"
    os.chmod(path, 0o644)
    with pytest.raises(KeyUnavailable, match="readable by others"):
        Tokens(cfg).check(token)
    os.chmod(path, 0o600)
    path.write_bytes(b"short")
    with pytest.raises(KeyUnavailable, match="at least 32"):
        Tokens(cfg).key()
    cfg_off = SimpleNamespace(http={"jwt_key": str(tmp_path / "absent")}, state_dir=str(tmp_path))
    with pytest.raises(KeyUnavailable, match="cannot be read"):
        Tokens(cfg_off, create=False).key()


def test_a_token_for_another_user_is_an_administrators(tmp_path):
    from batchd.server.service import Caller, Service
    from tests.refstore import reference_store

    cfg, store = reference_store(tmp_path / "b.db", dev=False)
    try:
        svc = Service(cfg, store)
        me = Caller(uid=4101, gid=4101)
        mine = svc.issue_token(me, 120, None)
        assert mine["user"] == "4101" and svc.tokens.check(mine["token"]) == "4101"
        with pytest.raises(PermissionDenied, match="another user"):
            svc.issue_token(me, 120, "root")
        root_name = pwd.getpwuid(0).pw_name
        other = svc.issue_token(Caller(uid=0, gid=0), 120, "nobody")
        assert other["user"] == "nobody" and svc.tokens.check(other["token"]) == "nobody"
        with pytest.raises(Exception, match="Invalid user"):
            svc.issue_token(Caller(uid=0, gid=0), 120, "no-such-user-here")
        assert svc.issue_token(Caller(uid=0, gid=0), 120, root_name)["user"] == root_name
    finally:
        store.close()
