"""A real Service on a fresh SQLite store (the reference cluster's config), and a helper
that sends one request through `api.handle` as the daemon's transport would."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from batchd import api
from batchd.config import load_config
from batchd.model import Node
from batchd.service import Caller, Service
from batchd.store import Store
from batchd.store.migrate import upgrade

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "slurm-reference.toml"
ME = Caller(uid=os.getuid(), gid=os.getgid())


@pytest.fixture
def svc(tmp_path: Path):
    cfg = load_config(str(CONFIG), dev=True)
    store = Store(f"sqlite:///{tmp_path / 'batchd.db'}")
    upgrade(store.engine)
    store.ensure_default_account()
    for n in cfg.nodes:
        store.upsert_node(Node(name=n.name, state="IDLE", cpus=n.cpus, memory_mb=n.memory_mb,
                               gpus=list(n.gpus) if isinstance(n.gpus, list) else [], heartbeat=time.time()))
    yield Service(cfg, store)
    store.close()


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
