"""The daemon's loop coalesces wake-ups: after a cycle, the next starts only once the gap
(`[scheduler] cycle_min_gap_ms`, or the last cycle's own duration when longer) is over;
before any cycle, or after a quiet spell, at once."""

from __future__ import annotations

import time

from batchd.config import parse_config
from batchd.daemon import Daemon

NODE = {"node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]}


def _daemon(gap_ms: float, last_end: float, last_s: float, requested: bool = True) -> Daemon:
    """`requested`: the last cycle was started by a request's wake-up (a submission)."""
    d = Daemon.__new__(Daemon)  # only the loop's bookkeeping: no store, no socket
    d.cfg = parse_config({**NODE, "scheduler": {"cycle_min_gap_ms": gap_ms}})
    d._last_cycle_end, d._last_cycle_s = last_end, last_s
    d._gap_applies = requested
    return d


def test_the_first_cycle_and_one_after_a_quiet_spell_start_at_once():
    assert _daemon(50, 0.0, 0.0)._cycle_gap_left() <= 0
    assert _daemon(50, time.monotonic() - 1.0, 0.01)._cycle_gap_left() <= 0


def test_a_wake_up_right_after_a_cycle_waits_for_the_gap():
    left = _daemon(50, time.monotonic(), 0.01)._cycle_gap_left()
    assert 0.03 < left <= 0.05


def test_a_long_cycle_makes_the_gap_as_long_as_itself():
    left = _daemon(50, time.monotonic(), 0.4)._cycle_gap_left()
    assert 0.3 < left <= 0.4


def test_a_gap_of_zero_never_waits():
    assert _daemon(0, time.monotonic(), 0.0)._cycle_gap_left() <= 0


def test_after_a_cycle_the_tick_or_a_job_end_started_a_submission_starts_at_once():
    assert _daemon(50, time.monotonic(), 0.4, requested=False)._cycle_gap_left() <= 0


def test_a_request_wake_up_makes_the_next_cycle_one_that_later_ones_wait_for():
    d = _daemon(50, 0.0, 0.0, requested=False)
    d._requested = False
    d.wake_event = __import__("threading").Event()
    d._hard_wake()
    assert d.wake_event.is_set() and d._requested
    d._requested = False
    d.wake_event.clear()
    # the periodic tick sets the event but is no request
    d.notifier = type("N", (), {"notify": lambda self, what: None})()
    d._tick()
    assert d.wake_event.is_set() and not d._requested
