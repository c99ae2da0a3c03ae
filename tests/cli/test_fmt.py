"""cli/fmt.py: Slurm's value formats, host lists, columns; and the commands' start-up cost."""

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchd.cli import fmt
from tests.cli.conftest import ts


@pytest.mark.parametrize("s,elapsed,hms", [
    (0, "0:00", "00:00:00"), (6, "0:06", "00:00:06"), (600, "10:00", "00:10:00"),
    (3600, "1:00:00", "01:00:00"), (3599, "59:59", "00:59:59"), (89, "1:29", "00:01:29"),
    (86400 + 3 * 3600 + 4 * 60 + 5, "1-03:04:05", "1-03:04:05"), (365 * 86400, "365-00:00:00", "365-00:00:00"),
    (-1, "UNLIMITED", "UNLIMITED"),
])
def test_durations(s, elapsed, hms):
    assert fmt.fmt_elapsed(s) == elapsed and fmt.fmt_hms(s) == hms


@pytest.mark.parametrize("text,s", [
    ("10", 600), ("1:30", 90), ("1:02:03", 3723), ("2-3", 2 * 86400 + 3 * 3600), ("2-3:04", 183840),
    ("2-3:04:05", 183845), ("UNLIMITED", -1), ("infinite", -1),
])
def test_parse_time_limit(text, s):
    assert fmt.parse_time_limit(text) == s


@pytest.mark.parametrize("bad", ["", "abc", "1:2:3:4", "1-", "-5"])
def test_parse_time_limit_rejects(bad):
    with pytest.raises(ValueError):
        fmt.parse_time_limit(bad)


@given(st.integers(min_value=0, max_value=10 ** 8))
def test_hms_round_trip(s):
    assert fmt.parse_time_limit(fmt.fmt_hms(s) if s < 86400 else fmt.fmt_hms(s)) == s


@pytest.mark.parametrize("mb,text", [(0, "0"), (1024, "1G"), (1500, "1500M"), (4096, "4G"),
                                     (100 * 1024 * 1024, "100T"), (None, ""), ("2G", "2G")])
def test_mem(mb, text):
    assert fmt.fmt_mem(mb) == text


def test_hostlists():
    assert fmt.compress_hostlist(["gpu01", "gpu02", "gpu04", "vm"]) == "gpu[01-02,04],vm"
    assert fmt.compress_hostlist(["node9", "node10", "node11"]) == "node[9-11]"
    assert fmt.compress_hostlist(["gpu1"]) == "gpu1"
    assert fmt.expand_hostlist("gpu[01-02,04],vm") == ["gpu01", "gpu02", "gpu04", "vm"]
    assert fmt.expand_hostlist("") == []


@given(st.sets(st.integers(min_value=0, max_value=300), min_size=1, max_size=40),
       st.sampled_from(["gpu", "n", "rack1-node"]), st.integers(min_value=1, max_value=3))
def test_hostlist_round_trip(nums, prefix, width):
    names = [f"{prefix}{str(n).zfill(width)}" for n in sorted(nums)]
    if any(len(str(n)) > width for n in nums):
        names = [f"{prefix}{n}" for n in sorted(nums)]
    assert fmt.expand_hostlist(fmt.compress_hostlist(names)) == names


@given(st.sets(st.integers(min_value=0, max_value=500), max_size=50))
def test_ranges_round_trip(nums):
    assert fmt.expand_ranges(fmt.compress_ranges(nums)) == sorted(nums)


def test_ranges_with_step_and_throttle():
    assert fmt.expand_ranges("0-15:4%2") == [0, 4, 8, 12]


def test_percent_format_and_cells():
    items = fmt.parse_percent_format("%.5i|%-3j %%%8P")
    assert items == [("i", 5, True), "|", "%", "-3j ", "%", ("P", 8, False)]
    assert fmt.render_percent(items, lambda c: {"i": "1234567", "P": "gpu"}[c]) == "12345|%-3j %gpu     "
    assert fmt.cell("abcdef", 3, False) == "abc" and fmt.cell("ab", 4, True) == "  ab"
    assert fmt.truncate_plus("CANCELLED by 0", 10) == "CANCELLED+"
    assert fmt.truncate_plus("short", -10) == "short"
    assert fmt.parse_field_list("JobID:10,Name,State:.8") == [("JobID", 10, False), ("Name", 20, False),
                                                               ("State", 8, True)]


def test_parse_when(utc):
    now = ts("2026-11-30T14:43:48")
    assert fmt.parse_when("2020-01-01", now) == ts("2020-01-01T00:00:00")
    assert fmt.parse_when("2026-11-30T10:05", now) == ts("2026-11-30T10:05:00")
    assert fmt.parse_when("now-1hour", now) == now - 3600
    assert fmt.parse_when("now+30", now) == now + 30
    assert fmt.parse_when("midnight", now) == ts("2026-11-30T00:00:00")
    assert fmt.parse_when("12:30", now) == ts("2026-11-30T12:30:00")
    assert fmt.parse_when("11/29", now) == ts("2026-11-29T00:00:00")
    assert fmt.parse_when("11/29/25-08:30", now) == ts("2025-11-29T08:30:00")
    assert fmt.parse_when("112925", now) == fmt.parse_when("11.29.25", now) == ts("2025-11-29T00:00:00")
    with pytest.raises(ValueError):
        fmt.parse_when("someday", now)


def test_ts_is_local_time(utc):
    assert fmt.fmt_ts(ts("2026-11-30T15:26:24")) == "2026-11-30T15:26:24"
    assert fmt.fmt_ts(None) == "N/A" and fmt.fmt_ts(0, "Unknown") == "Unknown"


CMDS = ["squeue", "scancel", "sacct", "sinfo", "scontrol"]


def test_commands_import_nothing_heavy():
    code = ("import sys\n"
            + "".join(f"import batchd.cli.{c}\n" for c in CMDS)
            + "bad = [m for m in ('click', 'sqlalchemy', 'http.client', 'dataclasses', 'batchd.store')"
              " if m in sys.modules]\nprint(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


@pytest.mark.parametrize("cmd", CMDS)
def test_daemon_not_running_is_one_line(tmp_path, cmd):
    env = dict(os.environ, BATCHD_SOCKET=str(tmp_path / "none.sock"))
    args = {"scancel": ["5"], "scontrol": ["show", "job"]}.get(cmd, [])
    p = subprocess.run([sys.executable, "-m", f"batchd.cli.{cmd}", *args], capture_output=True, text=True,
                       env=env, cwd=tmp_path)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "cannot reach the batchd daemon" in p.stderr
