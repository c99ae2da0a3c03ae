"""Usage decay and accrual (slurm_spec 2.1) and PriorityUsageResetPeriod."""

import calendar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchd.priority.usage import (
    Charge,
    accrue,
    advance_usage,
    decay,
    decay_factor,
    job_usage,
    last_reset_boundary,
    run_overlap,
)

WEEK = 7 * 86400


def test_decay_reference_figure():
    assert decay(1e6, 300, WEEK) == pytest.approx(999656.31, abs=0.005)


def test_cycle_accrual_reference_figure():
    assert job_usage(4, 300, WEEK) == pytest.approx(1199.59, abs=0.005)


def test_one_hour_billing_8_in_300s_cycles():
    u = 0.0
    for _ in range(12):
        u = accrue(u, 8, 300, WEEK)
    assert u == pytest.approx(28735.74, abs=0.005)
    # same through advance_usage, with a running job charged cycle by cycle
    usage: dict[str, float] = {}
    job = Charge("a/u", 8.0, start_s=1000.0)
    for k in range(12):
        usage = advance_usage(usage, [job], 1000.0 + 300 * k, 1300.0 + 300 * k, WEEK)
    assert usage["a/u"] == pytest.approx(28735.74, abs=0.005)


def test_half_life_is_linearised():
    assert decay(1.0, WEEK, WEEK) == pytest.approx(0.500073, abs=5e-7)
    assert decay_factor(0) == 1.0
    assert decay(5.0, 10**6, 0) == 5.0
    with pytest.raises(ValueError):
        decay_factor(-1)


def test_run_overlap():
    assert run_overlap(100, 400, 50, None) == 300
    assert run_overlap(100, 400, 250, None) == 150
    assert run_overlap(100, 400, 50, 200) == 100
    assert run_overlap(100, 400, 500, None) == 0
    assert run_overlap(100, 400, None, None) == 0


def test_finished_and_preempted_jobs_charged_for_the_time_they_ran():
    u = advance_usage({}, [Charge("a/u", 2.0, start_s=0.0, end_s=120.0)], 0.0, 300.0, 0)
    assert u["a/u"] == pytest.approx(240.0)


def test_usage_factor_scales():
    u = advance_usage({}, [Charge("a/u", 2.0, 0.0, usage_factor=0.5)], 0.0, 100.0, 0)
    assert u["a/u"] == pytest.approx(100.0)


def test_input_not_modified_and_clock_backwards_refused():
    src = {"a/u": 10.0}
    advance_usage(src, [], 0, 100, WEEK)
    assert src == {"a/u": 10.0}
    with pytest.raises(ValueError):
        advance_usage(src, [], 100, 50, WEEK)


def _ts(y, m, d, hh=0, mm=0):
    return float(calendar.timegm((y, m, d, hh, mm, 0)))


@pytest.mark.parametrize(
    "period,now,want",
    [
        ("DAILY", _ts(2026, 11, 30, 15, 30), _ts(2026, 11, 30)),
        ("WEEKLY", _ts(2026, 11, 30, 15, 30), _ts(2026, 11, 29)),  # a Monday -> Sunday
        ("WEEKLY", _ts(2026, 11, 29, 1), _ts(2026, 11, 29)),
        ("MONTHLY", _ts(2026, 11, 30, 15), _ts(2026, 11, 1)),
        ("QUARTERLY", _ts(2026, 11, 30, 15), _ts(2026, 10, 1)),
        ("YEARLY", _ts(2026, 11, 30, 15), _ts(2026, 1, 1)),
        ("NONE", _ts(2026, 11, 30), None),
        ("NOW", _ts(2026, 11, 30), None),
    ],
)
def test_reset_boundaries(period, now, want):
    assert last_reset_boundary(period, now) == want


def test_reset_zeroes_and_charges_only_after_boundary():
    midnight = _ts(2026, 12, 1)
    u = advance_usage({"a/u": 1e6, "b/v": 5.0}, [Charge("a/u", 1.0, start_s=0.0)], midnight - 100, midnight + 200,
                      0, "DAILY")
    assert u == {"a/u": pytest.approx(200.0), "b/v": 0.0}
    with pytest.raises(ValueError):
        last_reset_boundary("FORTNIGHTLY", midnight)


def test_restart_mid_job_matches_uninterrupted_run_within_one_cycle():
    """A daemon restart: usage and the last cycle time are persisted; the next cycle
    (longer, it spans the downtime) charges exactly [last, now]."""
    job = Charge("a/u", 8.0, start_s=0.0)
    straight: dict[str, float] = {}
    t = 0.0
    while t < 86400:
        straight = advance_usage(straight, [job], t, t + 300, WEEK)
        t += 300
    restarted: dict[str, float] = {}
    t = 0.0
    while t < 40000:
        restarted = advance_usage(restarted, [job], t, t + 300, WEEK)
        t += 300
    persisted = dict(restarted), t  # what the store holds when the daemon dies
    restarted, t = persisted
    restarted = advance_usage(restarted, [job], t, t + 1800, WEEK)  # the first cycle after 30 min down
    t += 1800
    while t < 86400:
        restarted = advance_usage(restarted, [job], t, t + 300, WEEK)
        t += 300
    one_cycle = job_usage(8.0, 300, WEEK)
    assert abs(restarted["a/u"] - straight["a/u"]) < one_cycle
    assert restarted["a/u"] > 0.99 * straight["a/u"]


usage_values = st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(u=usage_values, dt=st.floats(min_value=0, max_value=1e9), hl=st.floats(min_value=0, max_value=1e9),
       billing=st.floats(min_value=0, max_value=1e4), factor=st.floats(min_value=0, max_value=10))
def test_usage_never_negative(u, dt, hl, billing, factor):
    assert decay(u, dt, hl) >= 0
    assert accrue(u, billing, dt, hl, factor) >= 0
    out = advance_usage({"a/u": u}, [Charge("a/u", billing, 0.0, usage_factor=factor)], 0.0, dt, hl)
    assert out["a/u"] >= 0


@settings(max_examples=100, deadline=None)
@given(u=st.floats(min_value=1e-3, max_value=1e12), hl=st.integers(min_value=3600, max_value=10**8),
       cycles=st.integers(min_value=1, max_value=300))
def test_one_half_life_without_jobs_halves_within_linearisation(u, hl, cycles):
    usage = {"a/u": u}
    step = hl / cycles
    for k in range(cycles):
        usage = advance_usage(usage, [], k * step, min((k + 1) * step, hl), hl)
    ratio = usage["a/u"] / u
    # Slurm's d = 1 - 0.693/HL: one half-life leaves (1-0.693/HL)^HL, between 0.4999 and 0.5002
    assert 0.4999 < ratio < 0.5002
    assert ratio == pytest.approx((1 - 0.693 / hl) ** hl, rel=1e-9)
