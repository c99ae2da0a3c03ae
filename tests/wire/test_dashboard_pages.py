"""The dashboard's pages built in-process (batchd.server.dashboard): not signed in goes to
the login form, a bad token does not sign in, every text is escaped, the security headers,
and a job's output is shown only from a regular file its own user owns."""

from __future__ import annotations

import os
import pwd
from email.message import Message

import pytest
from endpoint_cases import make_world

from batchd.server import dashboard
from batchd.server.dashboard import Dashboard, _tail
from batchd.server.weblistener import WebRequest


def _req(path: str, method: str = "GET", body: bytes = b"", **headers: str) -> WebRequest:
    msg = Message()
    for k, v in headers.items():
        msg[k.replace("_", "-")] = v
    path, _, query = path.partition("?")
    return WebRequest(method, path, query, msg, body)


@pytest.fixture
def world(tmp_path):
    w = make_world(tmp_path)
    yield w
    w.close()


def test_signing_in(world):
    d = Dashboard(world.svc)
    r = d(_req("/ui/queues"))
    assert (r.status, r.headers["Location"]) == (303, "/ui/login")
    r = d(_req("/ui/login", "POST", b"token=not-a-token"))
    assert r.status == 200 and b"does not sign you in" in r.body
    root = pwd.getpwuid(0).pw_name
    token, _exp = world.svc.tokens.issue(root, 60)
    r = d(_req("/ui/login", "POST", f"token=SLURM_JWT={token}".encode()))
    assert r.status == 303 and r.headers["Location"] == "/ui/"
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith(f"{dashboard.COOKIE}={token};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Secure" not in cookie and "Secure" in Dashboard(world.svc, secure=True)(
        _req("/ui/login", "POST", f"token={token}".encode())).headers["Set-Cookie"]
    for path in ("/ui/", "/ui/queues", "/ui/pending", "/ui/jobs", "/ui/bill", "/ui/bill.html"):
        r = d(_req(path, Cookie=f"other=1; {dashboard.COOKIE}={token}"))
        assert r.status == 200, (path, r.body[:300])
        assert "script-src 'self'" in r.headers["Content-Security-Policy"] and r.headers["Cache-Control"] == "no-store"
    frag = d(_req("/ui/pending?fragment=1", X_SLURM_USER_TOKEN=token))
    assert frag.body.startswith(b"<h1>Pending") and b"<html" not in frag.body


def test_every_text_is_escaped(world):
    from endpoint_cases import OWNER
    from wire_helpers import spec
    world.svc.submit(OWNER, spec(world.tmp, name="<script>alert(1)</script>"))
    root = pwd.getpwuid(0).pw_name
    token, _exp = world.svc.tokens.issue(root, 60)
    body = Dashboard(world.svc)(_req("/ui/pending", X_SLURM_USER_TOKEN=token)).body.decode()
    assert "<script>alert" not in body


def test_output_only_from_the_jobs_own_regular_file(tmp_path):
    f = tmp_path / "out.txt"
    f.write_text("".join(f"line {i}\n" for i in range(100)))
    me = os.getuid()
    tail = _tail(str(f), me)
    assert tail.splitlines()[-1] == "line 99" and len(tail.splitlines()) == dashboard.TAIL_LINES
    assert _tail(str(f), me + 1) == ""  # someone else's file: a job naming it as its output shows nothing
    link = tmp_path / "link"
    link.symlink_to(f)
    assert _tail(str(link), me) == ""
    assert _tail(str(tmp_path), me) == "" and _tail(str(tmp_path / "absent"), me) == "" and _tail(None, me) == ""
    if me == 0:
        os.chown(f, 4242, 4242)
        assert _tail(str(f), 0) == "" and _tail(str(f), 4242).endswith("line 99")
