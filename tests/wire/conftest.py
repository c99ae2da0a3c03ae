"""A real Service on a fresh SQLite store (the reference cluster's config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchd.server.service import Service
from tests.refstore import reference_store


@pytest.fixture
def svc(tmp_path: Path):
    cfg, store = reference_store(tmp_path / "batchd.db", dev=True)
    yield Service(cfg, store)
    store.close()
