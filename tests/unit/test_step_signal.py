"""`--signal` without `B:` is timed for srun steps through their supervisors' limits."""

import pytest

from batchd.node.steprunner import STEP_LIMIT_PAD_S, step_signal

SIG = {"signal": 10, "time_s": 60}


@pytest.mark.parametrize("spec,limit,start,now,want", [
    ({"signal": SIG}, 600, 1000.0, 1100.0, (500 + STEP_LIMIT_PAD_S, (10, 60 + STEP_LIMIT_PAD_S))),
    ({"signal": SIG}, 600, 1000.0, 1700.0, (STEP_LIMIT_PAD_S, (10, 60 + STEP_LIMIT_PAD_S))),  # past the limit
    ({"signal": {**SIG, "batch_only": True}}, 600, 1000.0, 1100.0, (None, None)),
    ({"signal": SIG}, None, 1000.0, 1100.0, (None, None)),
    ({"signal": SIG}, -1, 1000.0, 1100.0, (None, None)),
    ({}, 600, 1000.0, 1100.0, (None, None)),
], ids=["armed", "late-step", "batch-only", "no-limit", "unlimited", "no-signal"])
def test_step_signal(spec, limit, start, now, want):
    got = step_signal(spec, limit, start, now)
    assert got == want
    if got[0] is not None:  # the signal falls T seconds before the job's limit
        assert now + got[0] - got[1][1] == max(now, start + limit) - 60
