"""`scontrol update JobId=N TimeLimit=V` as Slurm 22.05 reads V (recorded from the peer on
2026-12-04; the whole record is in tests/compat/test_time_limits.py):

    TimeLimit=abc, TimeLimit=+, TimeLimit=-abc      -> rc 1, "scontrol: error: Invalid TimeLimit value"
    TimeLimit=+1:30:00 on a 2-minute job            -> 01:32:00
    TimeLimit=-0:30 on 01:32:00                     -> 01:31:00 (30 s rounds up to a minute)
    TimeLimit=+1-0 on 01:31:00                      -> 1-01:31:00
    TimeLimit=-5 on a 2-minute job                  -> rc 1, "scontrol: error: TimeLimit decrement larger
                                                       than current time limit (5 > 2)"
    TimeLimit=-1 on a 5-minute job                  -> 00:04:00 (a decrement, not UNLIMITED)
    TimeLimit=-1 on an UNLIMITED job                -> UNLIMITED
    TimeLimit=0                                     -> 00:00:00, the job ends TIMEOUT at once

batchd differs in two places, both refused with a message instead: a zero limit (the wire has
none, so that a zero can never read as "no limit"), and `+N` on an UNLIMITED job, which Slurm
wraps round to 00:00:00 (batchd keeps UNLIMITED).
"""

import pytest

from batchd.cli import client, scontrol

JOBS = {"5": 2 * 60, "6": 5 * 60, "7": -1, "8": 92 * 60}


@pytest.fixture
def sent(monkeypatch):
    calls = []

    def request(method, path, body=None, query=None, timeout=60.0):
        if method == "GET":
            jid = query["ids"]
            return {"jobs": [{"id": int(jid), "display_id": jid, "time_limit_s": JOBS[jid]}] if jid in JOBS else []}
        calls.append(body)
        return {"done": body["ids"], "errors": []}

    monkeypatch.setattr(client, "request", request)
    return calls


@pytest.mark.parametrize("job, value, want, err", [
    ("5", "abc", None, "scontrol: error: Invalid TimeLimit value\n"),
    ("5", "+", None, "scontrol: error: Invalid TimeLimit value\n"),
    ("5", "-abc", None, "scontrol: error: Invalid TimeLimit value\n"),
    ("5", "+1:30:00", 92 * 60, ""),
    ("8", "-0:30", 91 * 60, ""),
    ("8", "+1-0", 86400 + 92 * 60, ""),
    ("5", "-5", None, "scontrol: error: TimeLimit decrement larger than current time limit (5 > 2)\n"),
    ("6", "-1", 4 * 60, ""),
    ("7", "-1", -1, ""),
    ("7", "+1", -1, ""),
    ("5", "UNLIMITED", -1, ""),
    ("5", "infinite", -1, ""),
    ("5", "1:30", 2 * 60, ""),         # M:S, rounded up to whole minutes as Slurm stores it
    ("5", "2-3", 2 * 86400 + 3 * 3600, ""),
    ("5", "0", None, scontrol.ZERO_LIMIT),
    ("5", "-2", None, scontrol.ZERO_LIMIT),
    ("999", "+1", None, "Invalid job id specified for job 999\n"),
], ids=lambda x: None)
def test_time_limit_values(sent, job, value, want, err):
    out, rc = scontrol.update([f"JobId={job}", f"TimeLimit={value}"])
    assert (out, rc) == (err, 1 if err else 0)
    assert sent == ([] if want is None else [{"ids": [job], "changes": {"time_limit_s": want}}])


def test_relative_limit_is_each_jobs_own(sent):
    assert scontrol.update(["JobId=5,6", "TimeLimit=+1", "Nice=3"]) == ("", 0)
    assert sent == [{"ids": ["5"], "changes": {"nice": 3, "time_limit_s": 3 * 60}},
                    {"ids": ["6"], "changes": {"nice": 3, "time_limit_s": 6 * 60}}]
