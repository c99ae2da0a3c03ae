"""Notifier.notify (batchd/store/leader.py) keeps one connection for its NOTIFYs and reopens it
after an error; a listener receives every payload."""

from __future__ import annotations

import threading
import time

import pytest

from batchd.store.leader import Notifier


def test_notify_reuses_one_connection_and_recovers_from_a_lost_one(db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    got: list[str] = []
    seen = threading.Event()

    def on_notify(payload: str) -> None:
        got.append(payload)
        if payload == "third":
            seen.set()

    listener = Notifier(db_url, on_notify)
    listener.start()
    sender = Notifier(db_url, lambda p: None)
    try:
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:  # until the LISTEN is in place
            sender.notify("hello")
            time.sleep(0.1)
        sender.notify("first")
        conn = sender._notify_conn
        sender.notify("second")
        assert sender._notify_conn is conn and conn is not None
        conn.close()  # lost under it: the next notify opens another and is still delivered
        sender.notify("third")
        assert sender._notify_conn is not conn
        assert seen.wait(10)
        assert {"first", "second", "third"} <= set(got)
    finally:
        sender.stop()
        listener.stop()
    assert sender._notify_conn is None
