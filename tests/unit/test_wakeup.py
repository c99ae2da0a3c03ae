"""The run-end wake-up (batchd.node.wakeup): a supervisor's datagram reaches the daemon's
listener; without a listener, or where no socket can be made, nothing fails."""

from __future__ import annotations

import threading

from batchd.node.wakeup import WakeListener, wake_agent, wake_path


def test_a_wake_reaches_the_listener(tmp_path):
    woke = threading.Event()
    lst = WakeListener(str(tmp_path), woke.set)
    assert lst.start()
    try:
        assert (wake_path(str(tmp_path))).endswith("wake.sock")
        assert (tmp_path / "wake.sock").stat().st_mode & 0o777 == 0o600
        wake_agent(str(tmp_path))
        assert woke.wait(5)
    finally:
        lst.stop()
    assert not (tmp_path / "wake.sock").exists()
    wake_agent(str(tmp_path))  # nobody listens: no error


def test_a_path_too_long_for_a_socket_leaves_the_periodic_pass(tmp_path):
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    lst = WakeListener(str(deep), lambda: None)
    assert lst.start() is False
    wake_agent(str(deep))  # no error either
    lst.stop()


def test_a_stale_socket_file_is_replaced(tmp_path):
    first = WakeListener(str(tmp_path), lambda: None)
    assert first.start()
    first._sock.close()  # a daemon killed without its stop: the file stays  # type: ignore[union-attr]
    woke = threading.Event()
    second = WakeListener(str(tmp_path), woke.set)
    assert second.start()
    try:
        wake_agent(str(tmp_path))
        assert woke.wait(5)
    finally:
        second.stop()
