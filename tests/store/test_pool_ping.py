"""PostgreSQL: a pooled connection is pinged before use only after it sat idle
(batchd.store.PING_IDLE_S); one the server closed meanwhile (a restart, an admin's
pg_terminate_backend) is replaced and the request succeeds; a busy connection is not
pinged at all."""

from __future__ import annotations

import psycopg
import pytest

import batchd.store as store_mod
from batchd.store import Store
from batchd.store.migrate import upgrade


@pytest.fixture
def pg_store(db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("PostgreSQL only (SQLite has no server to lose)")
    s = Store(db_url, pool_size=2)
    upgrade(s.engine)
    s.ensure_default_account()
    yield s, db_url
    s.close()


def _kill_others(url: str, dbname: str) -> int:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as c:
        return len(c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,)).fetchall())


def test_an_idle_connection_closed_by_the_server_is_replaced(pg_store, monkeypatch):
    store, url = pg_store
    assert "default" in [a.name for a in store.list_accounts()]  # a pooled connection now
    assert _kill_others(url, url.rsplit("/", 1)[1]) >= 1
    monkeypatch.setattr(store_mod, "PING_IDLE_S", 0.0)  # it has been idle long enough
    assert "default" in [a.name for a in store.list_accounts()]


def test_a_connection_in_use_a_moment_ago_is_not_pinged(pg_store, monkeypatch):
    store, url = pg_store
    store.list_accounts()
    pings = []
    real = store.engine.dialect.do_ping
    monkeypatch.setattr(store.engine.dialect, "do_ping", lambda c: pings.append(1) or real(c))
    for _ in range(5):
        store.list_accounts()
    assert pings == []
    monkeypatch.setattr(store_mod, "PING_IDLE_S", 0.0)
    store.list_accounts()
    assert pings == [1]
