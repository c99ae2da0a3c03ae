"""LSF grammar -> Slurm terms (cli/lsf.py): pure functions, no daemon."""

import time

import pytest

from batchd.cli import bjobs, lsf
from batchd.cli.lsf import LsfError


@pytest.mark.parametrize("text,secs", [("30", 1800), ("90", 5400), ("1:30", 5400), ("0:05", 300),
                                       ("2:00/hostA", 7200), ("100:0", 360000)])
def test_runlimit(text, secs):
    assert lsf.runlimit_s(text) == secs


@pytest.mark.parametrize("text", ["", "abc", "1:2:3", "0", "-5", "1.5"])
def test_runlimit_bad(text):
    with pytest.raises(LsfError, match="Bad RUNLIMIT"):
        lsf.runlimit_s(text)


@pytest.mark.parametrize("text,unit,mb", [("4096", "MB", 4096), ("4G", "MB", 4096), ("4GB", "MB", 4096),
                                          ("1.5G", "MB", 1536), ("512mb", "MB", 512), ("1024", "KB", 1),
                                          ("1025", "KB", 2), ("2", "GB", 2048), ("1T", "MB", 1048576)])
def test_mem(text, unit, mb):
    assert lsf.mem_mb(text, unit) == mb


@pytest.mark.parametrize("text", ["", "G", "4X", "-1", "0"])
def test_mem_bad(text):
    with pytest.raises(LsfError):
        lsf.mem_mb(text)


@pytest.mark.parametrize("text,want", [
    ("num=2", {"type": None, "count": 2}),
    ("num=4:gmodel=h200", {"type": "h200", "count": 4}),
    ("num=1:gmodel=h200:mig=1g.24gb", {"type": "1g.24gb", "count": 1}),
    ("num=2:j_exclusive=yes:mode=exclusive_process", {"type": None, "count": 2}),
    ("-", {"type": None, "count": 1}),
    ("gmodel=rtxpro6000", {"type": "rtxpro6000", "count": 1}),
])
def test_gpu(text, want):
    assert lsf.parse_gpu(text) == dict(want, name="gpu")


@pytest.mark.parametrize("text,match", [("num=0", "num"), ("num=x", "num"), ("num", "Bad GPU"),
                                        ("num=1:mig=3/2", "MIG profile"), ("num=1:color=red", "unknown keyword")])
def test_gpu_bad(text, match):
    with pytest.raises(LsfError, match=match):
        lsf.parse_gpu(text)


def test_resreq_sections():
    got = lsf.parse_resreq(["select[mem>100] rusage[mem=8G:duration=10] span[hosts=1]",
                            "span[ptile=4] affinity[core(2)]"])
    assert got == {"mem_mb": 8192, "nodes": 1, "ntasks_per_node": 4, "cpus_per_task": 2}
    assert lsf.parse_resreq(["rusage[mem=100,ngpus_physical=2]"]) == {"mem_mb": 100, "gpus": 2}
    assert lsf.parse_resreq(["{rusage[mem=200]} || {rusage[mem=100] span[hosts=1]}"]) == {"mem_mb": 200}
    assert lsf.parse_resreq(["rusage[mem=300:duration=5 || mem=100]"]) == {"mem_mb": 300}
    assert lsf.parse_resreq(["rusage[mem=2048]"], "KB") == {"mem_mb": 2}
    assert lsf.parse_resreq(["mem>1000 && ncpus>2"]) == {}
    # later -R strings win
    assert lsf.parse_resreq(["rusage[mem=1]", "rusage[mem=2]"]) == {"mem_mb": 2}


def test_resreq_bad():
    with pytest.raises(LsfError):
        lsf.parse_resreq(["span[hosts=x]"])
    with pytest.raises(LsfError):
        lsf.parse_resreq(["rusage[mem=lots]"])


@pytest.mark.parametrize("text,want", [
    ("done(12)", "afterok:12"),
    ("ended(12)", "afterany:12"),
    ("exit(12)", "afternotok:12"),
    ("started(12)", "after:12"),
    ("12", "afterok:12"),
    ("done(12) && ended(13)", "afterok:12,afterany:13"),
    ("done(12)&&exit(13)&&started(14)", "afterok:12,afternotok:13,after:14"),
    ("done(12) || exit(13)", "afterok:12?afternotok:13"),
    ("(done(12) || exit(13)) || ended(14)", "afterok:12?afternotok:13?afterany:14"),
    ("DONE(12)", "afterok:12"),
    ("done(12[3])", "afterok:12_3"),
    ("done(\"12[3]\")", "afterok:12_3"),
    ("ended(12[*])", "afterany:12"),
    ("done(12[1-3,5])", "afterok:12_1:12_2:12_3:12_5"),
])
def test_dependency(text, want):
    assert lsf.convert_dependency(text) == want


def test_dependency_names():
    seen = []

    def resolve(name):
        seen.append(name)
        return {"prep": [7, 9], "other": []}.get(name, [])

    assert lsf.convert_dependency('done(prep) && ended("prep")', resolve) == "afterok:7:9,afterany:7:9"
    assert seen == ["prep", "prep"]
    with pytest.raises(LsfError, match="No matching job"):
        lsf.convert_dependency("done(other)", resolve)


@pytest.mark.parametrize("text,match", [
    ("done(1) && ended(2) || exit(3)", "cannot mix"),
    ("done(1) && (ended(2) || exit(3))", "cannot mix"),
    ("!done(1)", "negated"),
    ("exit(1, > 2)", "exit code"),
    ("post_done(1)", "not supported"),
    ("numdone(1, *)", "exit code|not supported"),
    ("done(1", "syntax"),
    ("done(1) &&", "syntax"),
    ("&& done(1)", "syntax"),
    ("done()", "syntax"),
])
def test_dependency_refused(text, match):
    with pytest.raises(LsfError, match=match):
        lsf.convert_dependency(text, lambda n: [1])


def _local(y, mo, d, h, mi):
    return time.mktime((y, mo, d, h, mi, 0, 0, 0, -1))


def test_begin_time_rolls_forward():
    now = _local(2026, 11, 30, 15, 0)
    assert lsf.begin_time("16:30", now) == _local(2026, 11, 30, 16, 30)
    assert lsf.begin_time("14:30", now) == _local(2026, 12, 1, 14, 30)        # past: next day
    assert lsf.begin_time("30:14:30", now) == _local(2026, 12, 30, 14, 30)    # past: next month
    assert lsf.begin_time("12:31:23:59", now) == _local(2026, 12, 31, 23, 59)
    assert lsf.begin_time("1:1:00:00", now) == _local(2027, 1, 1, 0, 0)       # past: next year
    assert lsf.begin_time("2027:2:3:4:5", now) == _local(2027, 2, 3, 4, 5)
    assert lsf.begin_time("27:2:3:4:5", now) == _local(2027, 2, 3, 4, 5)


@pytest.mark.parametrize("text", ["", "10", "25:00", "12:60", "a:b", "1:2:3:4:5:6", "13:1:00:00"])
def test_begin_time_bad(text):
    with pytest.raises(LsfError, match="begin time"):
        lsf.begin_time(text, 0)


@pytest.mark.parametrize("text,array,want", [
    ("out.%J", False, "out.%A"), ("out.%J.%I", True, "out.%A.%a"), ("out.%J.%I", False, "out.%A.0"),
    ("100%.%x", False, "100%%.%%x"), ("%%J", False, "%%%A"), ("plain", False, "plain"), ("end%", False, "end%%"),
])
def test_output_pattern(text, array, want):
    assert lsf.output_pattern(text, array) == want


@pytest.mark.parametrize("text,want", [("arr[1-10]", ("arr", "1-10")), ("arr[1-10:2]%3", ("arr", "1-10:2%3")),
                                       ("a[1,3,5]", ("a", "1,3,5")), ("plain", ("plain", None)),
                                       ("odd[x]", ("odd[x]", None))])
def test_split_array_name(text, want):
    assert lsf.split_array_name(text) == want


@pytest.mark.parametrize("text,want", [("123", "123"), ("123[4]", "123_4"), ('"123[4]"', "123_4"),
                                       ("abc", None), ("12[a]", None), ("", None)])
def test_job_id_arg(text, want):
    assert bjobs.job_id_arg(text) == want


@pytest.mark.parametrize("state,reason,want", [
    ("PENDING", "Priority", "PEND"), ("PENDING", "JobHeldUser", "PSUSP"), ("PENDING", "JobHeldAdmin", "PSUSP"),
    ("RUNNING", "None", "RUN"), ("COMPLETING", "None", "RUN"), ("SUSPENDED", "None", "USUSP"),
    ("COMPLETED", "None", "DONE"), ("FAILED", "NonZeroExitCode", "EXIT"), ("CANCELLED", "None", "EXIT"),
    ("TIMEOUT", "TimeLimit", "EXIT"), ("OUT_OF_MEMORY", "None", "EXIT"), ("REQUEUE_HOLD", "None", "PSUSP"),
])
def test_stat(state, reason, want):
    assert bjobs.stat({"state": state, "reason": reason}) == want


def test_pending_reason_wording():
    assert bjobs.pending_reason({"reason": "Dependency"}) == "Job dependency condition not satisfied"
    assert "queue has reached" in bjobs.pending_reason({"reason": "AssocGrpGRES"})
    assert bjobs.pending_reason({"reason": "SomethingNew"}) == "SomethingNew"


def test_truncate_and_ids():
    assert bjobs.truncate("short", 10) == "short"
    assert bjobs.truncate("a_very_long_name", 10) == "*long_name"
    assert len(bjobs.truncate("x" * 50, 7)) == 7
    assert bjobs.lsf_id("12_3") == "12[3]"
    assert bjobs.lsf_id("12") == "12"


def test_parse_args():
    table = {"-u": ("user", True), "-a": ("all", False), "-stat": ("stat", True)}
    vals, rest = bjobs.parse_args("x", ["12", "-u", "bob", "-a", "13[2]", "-stat", "run", "-ualice"], table)
    assert vals == {"user": "alice", "all": True, "stat": "run"}
    assert rest == ["12", "13[2]"]
    with pytest.raises(LsfError, match="illegal option -- z"):
        bjobs.parse_args("x", ["-z"], table)
    with pytest.raises(LsfError, match="requires an argument"):
        bjobs.parse_args("x", ["-u"], table)
