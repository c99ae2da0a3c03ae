"""Helpers of the wire tests: a request through `api.handle` as the daemon's transport
would send it, and a job specification as sbatch builds it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from batchd.server import api
from batchd.server.service import Caller, Service

ME = Caller(uid=os.getuid(), gid=os.getgid())


def call(svc: Service, method: str, target: str, body=None, raw: bytes | None = None,
         caller: Caller = ME) -> tuple[int, dict]:
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    status, payload = api.handle(svc, caller, method, target, data)
    return status, json.loads(json.dumps(payload))


def spec(tmp_path: Path, **kw) -> dict:
    base = {"name": "job", "script": "#!/bin/sh\ntrue\n", "workdir": str(tmp_path), "submit_dir": str(tmp_path),
            "environment": {"PATH": "/usr/bin:/bin"}, "export": "ALL", "argv": [], "account": "default"}
    base.update(kw)
    return base
