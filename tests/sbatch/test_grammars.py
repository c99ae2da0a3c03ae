"""Time limits, --begin, --array and --dependency grammars."""

from __future__ import annotations

import time

import pytest

from batchd.slurm import arrayspec, dependency, slurmtime


@pytest.mark.parametrize("text, secs", [
    ("10", 600), ("0:30", 60), ("1:30", 120), ("90:00", 5400), ("1:00:00", 3600), ("2-3", 183600),
    ("2-3:4", 183840), ("2-3:4:5", 183900), ("1-", 86400), ("UNLIMITED", -1), ("infinite", -1),
    ("-1", -1), ("0", -1), ("0:0:1", 60), ("-5", 4294960097 * 60),
], ids=lambda v: str(v))
def test_time_limit(text, secs):
    assert slurmtime.time_limit_s(text) == secs


@pytest.mark.parametrize("text", ["abc", "", "1:2:3:4", "1-2-3", "1:2-3", "1h", "1.5"])
def test_time_limit_invalid(text):
    assert slurmtime.time_limit_s(text) is None


def test_format_duration():
    assert slurmtime.format_duration(-1) == "UNLIMITED"
    assert slurmtime.format_duration(600) == "00:10:00"
    assert slurmtime.format_duration(4294960097 * 60) == "2982611-04:17:00"


NOW = time.mktime((2026, 11, 30, 14, 0, 0, 0, 0, -1))


@pytest.mark.parametrize("text, want", [
    ("now", NOW), ("now+60", NOW + 60), ("now+1hour", NOW + 3600), ("now+2days", NOW + 2 * 86400),
    ("now-5minutes", NOW - 300), ("now+1week", NOW + 604800),
    ("16:00", time.mktime((2026, 11, 30, 16, 0, 0, 0, 0, -1))),
    ("13:00", time.mktime((2026, 12, 1, 13, 0, 0, 0, 0, -1))),        # past today -> tomorrow
    ("noon", time.mktime((2026, 12, 1, 12, 0, 0, 0, 0, -1))),
    ("teatime", time.mktime((2026, 11, 30, 16, 0, 0, 0, 0, -1))),
    ("4:30PM", time.mktime((2026, 11, 30, 16, 30, 0, 0, 0, -1))),
    ("today", time.mktime((2026, 11, 30, 0, 0, 0, 0, 0, -1))),
    ("tomorrow", time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1))),
    ("2027-01-02", time.mktime((2027, 1, 2, 0, 0, 0, 0, 0, -1))),
    ("2027-01-02T03:04:05", time.mktime((2027, 1, 2, 3, 4, 5, 0, 0, -1))),
    ("12/25", time.mktime((2026, 12, 25, 0, 0, 0, 0, 0, -1))),
    ("1225", time.mktime((2026, 12, 25, 0, 0, 0, 0, 0, -1))),
    ("01/02/27", time.mktime((2027, 1, 2, 0, 0, 0, 0, 0, -1))),
    ("0102", time.mktime((2027, 1, 2, 0, 0, 0, 0, 0, -1))),            # past date -> next year
], ids=lambda v: str(v))
def test_begin(text, want):
    assert slurmtime.parse_begin(text, NOW) == int(want)


@pytest.mark.parametrize("text", ["yesterdayish", "now+", "now+5parsecs", "25:00", "13/45", "2026-1x-01"])
def test_begin_invalid(text):
    with pytest.raises(ValueError):
        slurmtime.parse_begin(text, NOW)


@pytest.mark.parametrize("text, ids, thr", [
    ("0-7", list(range(8)), None), ("1,3,5", [1, 3, 5], None), ("0-15:4", [0, 4, 8, 12], None),
    ("0-15%4", list(range(16)), 4), ("0,6,16-18", [0, 6, 16, 17, 18], None), ("0-", [0], None),
    ("3,1,3", [1, 3], None), ("1000", [1000], None), ("2-9:3%1", [2, 5, 8], 1),
], ids=lambda v: str(v))
def test_array(text, ids, thr):
    assert arrayspec.parse(text) == (ids, thr)


@pytest.mark.parametrize("text", ["5-1", "1001", "a", "", "1,,2", "0-3:0", "-1", "1-3%x", "0-2000"])
def test_array_invalid(text):
    with pytest.raises(arrayspec.ArraySpecError, match="^Invalid job array specification$"):
        arrayspec.parse(text)


def test_array_format():
    assert arrayspec.format_ids([7, 0, 1, 2, 3]) == "0-3,7"
    assert arrayspec.format_ids([1, 3, 5]) == "1,3,5"
    assert arrayspec.format_ids(range(16), 4) == "0-15%4"


def item(kind, jid=None, tid=None, delay=0):
    return {"type": kind, "job_id": jid, "task_id": tid, "delay_s": delay}


@pytest.mark.parametrize("text, op, items", [
    ("afterok:63", "and", [item("afterok", 63)]),
    ("afterany:63:65", "and", [item("afterany", 63), item("afterany", 65)]),
    ("afterok:1,afternotok:2", "and", [item("afterok", 1), item("afternotok", 2)]),
    ("afterok:1?afternotok:2", "or", [item("afterok", 1), item("afternotok", 2)]),
    ("after:12+5", "and", [item("after", 12, delay=300)]),
    ("aftercorr:7", "and", [item("aftercorr", 7)]),
    ("afterok:7_3:8_*", "and", [item("afterok", 7, 3), item("afterok", 8)]),
    ("singleton", "and", [item("singleton")]),
    ("123:456", "and", [item("afterany", 123), item("afterany", 456)]),
    ("AFTEROK:4", "and", [item("afterok", 4)]),
], ids=lambda v: str(v))
def test_dependency_parse(text, op, items):
    assert dependency.parse(text) == {"op": op, "items": items}


@pytest.mark.parametrize("text", ["after_what:1", "afterok", "afterok:", "afterok:x", "afterok:1,afterany:2?after:3",
                                  "afterok:1+5", "bogus:1", "afterok:0", ""])
def test_dependency_invalid(text):
    with pytest.raises(dependency.DependencyError, match="^Job dependency problem$"):
        dependency.parse(text)


STATES = {1: "COMPLETED", 2: "FAILED", 3: "RUNNING", 4: "PENDING", 5: "CANCELLED", 6: "TIMEOUT",
          7: ["COMPLETED", "COMPLETED", "FAILED"], 8: ["COMPLETED", "RUNNING"]}


def look(jid, tid):
    v = STATES.get(jid)
    if isinstance(v, list) and tid is not None:
        return v[tid] if tid < len(v) else None
    return v


@pytest.mark.parametrize("text, want", [
    ("afterok:1", "satisfied"), ("afterok:2", "never"), ("afterok:3", "pending"), ("afterok:6", "never"),
    ("afternotok:2", "satisfied"), ("afternotok:5", "satisfied"), ("afternotok:1", "never"),
    ("afternotok:3", "pending"), ("afterany:2", "satisfied"), ("afterany:3", "pending"),
    ("after:3", "satisfied"), ("after:4", "pending"), ("after:5", "satisfied"),
    ("afterok:99", "satisfied"),                       # purged job: dependency lifted
    ("afterok:1,afterok:3", "pending"), ("afterok:1,afterok:2", "never"),
    ("afterok:2?afterok:3", "pending"), ("afterok:2?afternotok:1", "never"), ("afterok:2?afterany:1", "satisfied"),
    ("afterok:7", "never"), ("afterany:8", "pending"), ("afterok:7_0", "satisfied"), ("afterok:7_2", "never"),
], ids=lambda v: str(v))
def test_dependency_evaluate(text, want):
    assert dependency.evaluate(dependency.parse(text), look) == want


def test_aftercorr_uses_same_task_index():
    dep = dependency.parse("aftercorr:7")
    assert dependency.evaluate(dep, look, task_id=1) == "satisfied"
    assert dependency.evaluate(dep, look, task_id=2) == "never"


def test_after_delay():
    dep = dependency.parse("after:3+5")
    assert dependency.evaluate(dep, look, lookup_start=lambda j, t: 1000.0, now=1200.0) == "pending"
    assert dependency.evaluate(dep, look, lookup_start=lambda j, t: 1000.0, now=1300.0) == "satisfied"


def test_singleton_rule():
    dep = dependency.parse("singleton")
    assert dependency.evaluate(dep, look, job_id=70, singleton_jobs=[(69, "PENDING")]) == "pending"
    assert dependency.evaluate(dep, look, job_id=69, singleton_jobs=[(70, "PENDING")]) == "satisfied"
    assert dependency.evaluate(dep, look, job_id=69, singleton_jobs=[(75, "RUNNING")]) == "pending"
    assert dependency.evaluate(dep, look, job_id=70, singleton_jobs=[(69, "COMPLETED")]) == "satisfied"


def test_describe_as_squeue():
    dep = dependency.parse("afterany:63:65")
    res = dependency.item_results(dep, lambda j, t: "RUNNING")
    assert dependency.describe(dep, res) == "afterany:63(unfulfilled),afterany:65(unfulfilled)"
    dep = dependency.parse("afterok:65")
    assert dependency.describe(dep, dependency.item_results(dep, lambda j, t: "FAILED")) == "afterok:65(failed)"
    assert dependency.describe(dep, ["satisfied"]) == "(null)"
    dep = dependency.parse("singleton")
    assert dependency.describe(dep, ["pending"]) == "singleton(unfulfilled)"
    dep = dependency.parse("after:12+5?afterok:3_1")
    assert dependency.describe(dep, ["pending", "pending"]) == "after:12+5(unfulfilled)?afterok:3_1(unfulfilled)"


def test_check_known():
    known = lambda j, t: STATES.get(j)  # noqa: E731
    dependency.check_known(dependency.parse("afterany:99"), known)  # allowed (any)
    with pytest.raises(dependency.DependencyError):
        dependency.check_known(dependency.parse("afterok:99"), known)
    with pytest.raises(dependency.DependencyError):
        dependency.check_known(dependency.parse("afterany:3"), known, job_id=3)


def test_status_as_squeue_shows_it():
    st = {63: "RUNNING", 65: "FAILED", 1: "COMPLETED"}
    lookup = lambda j, t: st.get(j)  # noqa: E731
    assert dependency.status(dependency.parse("afterany:63:65"), lookup) == \
        ("pending", "afterany:63(unfulfilled)")
    assert dependency.status(dependency.parse("afterok:65"), lookup) == ("never", "afterok:65(failed)")
    assert dependency.status(dependency.parse("afterok:1"), lookup) == ("satisfied", "(null)")
    assert dependency.status(dependency.parse("afterok:65?afterok:1"), lookup) == ("satisfied", "(null)")
    assert dependency.status(None, lookup) == ("satisfied", "(null)")
    assert dependency.status(dependency.parse("singleton"), lookup, job_id=70,
                             singleton_jobs=[(69, "PENDING")]) == ("pending", "singleton(unfulfilled)")
