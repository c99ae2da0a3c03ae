"""Fixtures of the chargeback tests: a migrated store per backend."""

from __future__ import annotations

import pytest

from batchd.store import Store
from batchd.store.migrate import upgrade


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    upgrade(s.engine)
    yield s
    s.close()
