"""batchd/journald.py: `<N>` syslog priority prefixes only when stderr is the journal stream."""

from __future__ import annotations

import logging
import os

from batchd.journald import JournalFormatter, error_line, stderr_is_journal, syslog_priority


def test_levels_map_to_syslog_priorities():
    assert [syslog_priority(lv) for lv in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO,
                                           logging.DEBUG, 5)] == [2, 3, 4, 6, 7, 7]


def test_only_the_stream_journal_stream_names_counts(tmp_path):
    f = tmp_path / "log"
    with open(f, "w") as fh:
        st = os.fstat(fh.fileno())
        assert stderr_is_journal({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, fd=fh.fileno())
        # inherited by a child whose stderr went elsewhere: another inode
        assert not stderr_is_journal({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"}, fd=fh.fileno())
        for bad in ("", "12", "a:b", ":"):
            assert not stderr_is_journal({"JOURNAL_STREAM": bad}, fd=fh.fileno())
        assert not stderr_is_journal({}, fd=fh.fileno())


def test_every_line_of_a_record_gets_its_priority():
    rec = logging.LogRecord("batchd.x", logging.ERROR, __file__, 1, "boom\nsecond line", None, None)
    assert JournalFormatter("%(levelname)s %(name)s: %(message)s").format(rec) == \
        "<3>ERROR batchd.x: boom\n<3>second line"
    rec = logging.LogRecord("batchd.x", logging.INFO, __file__, 1, "job started job_id=1", None, None)
    assert JournalFormatter("%(message)s").format(rec) == "<6>job started job_id=1"


def test_error_line_is_plain_off_the_journal(monkeypatch):
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    assert error_line("batchd: error: x") == "batchd: error: x"
