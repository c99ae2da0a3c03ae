"""A real Service on a fresh SQLite store (the reference cluster's config)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from batchd.config import load_config
from batchd.model import Node
from batchd.service import Service
from batchd.store import Store
from batchd.store.migrate import upgrade

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "slurm-reference.toml"


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
