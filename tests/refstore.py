"""A migrated SQLite store holding the nodes of a config file (default the reference cluster
of examples/slurm-reference.toml), for tests that drive the service without a daemon."""

from __future__ import annotations

import time
from pathlib import Path

from batchd.config import Config, load_config
from batchd.model import Node
from batchd.store import Store
from batchd.store.migrate import upgrade

REFERENCE = Path(__file__).resolve().parents[1] / "examples" / "slurm-reference.toml"


def reference_store(db: Path, *, dev: bool = True, config: Path = REFERENCE) -> tuple[Config, Store]:
    """(config, store) over a fresh database at `db`: migrated, the default account, and every
    node of `config` registered IDLE now. The caller closes the store."""
    cfg = load_config(str(config), dev=dev)
    cfg.state_dir = str(db.parent)  # what the daemon would keep there (the JWT key) stays with the test
    store = Store(f"sqlite:///{db}")
    upgrade(store.engine)
    store.ensure_default_account()
    for n in cfg.nodes:
        store.upsert_node(Node(name=n.name, state="IDLE", cpus=n.cpus, memory_mb=n.memory_mb,
                               gpus=list(n.gpus) if isinstance(n.gpus, list) else [], heartbeat=time.time()))
    return cfg, store
