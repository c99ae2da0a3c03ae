"""The daemon's stderr under journald: syslog priorities as sd-daemon(3) `<N>` prefixes.

systemd connects a service's stderr to the journal and sets `JOURNAL_STREAM=DEV:INODE`
for it; with the default `SyslogLevelPrefix=yes` journald reads a leading `<N>` of each
line as its priority (0 emerg .. 7 debug) and strips it. Without the prefix every line is
stored at the stream's default, info (6), so an error would not stand out in
`journalctl -p err`. Contract: `stderr_is_journal()` is true only when fd 2 is the very
stream `JOURNAL_STREAM` names (a terminal or a redirected file inherits the variable but
is another file), and only then do `configure_logging` and `error_line` add prefixes
(every line of a multi-line record, a traceback included, gets the record's priority;
the journal stamps the time itself, so the prefixed format has no timestamp).
"""

from __future__ import annotations

import logging
import os
import sys

#: logging level -> syslog priority (sd-daemon(3) SD_ERR etc.)
_PRIORITY = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
DEBUG_PRIORITY = 7


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a logging level: CRITICAL 2, ERROR 3, WARNING 4, INFO 6, else 7."""
    for level, prio in _PRIORITY:
        if levelno >= level:
            return prio
    return DEBUG_PRIORITY


def stderr_is_journal(environ: dict[str, str] | None = None, fd: int = 2) -> bool:
    """True when `fd` is the journal stream named by `JOURNAL_STREAM` (DEV:INODE)."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def prefixed(text: str, priority: int) -> str:
    """`text` with `<priority>` before each of its lines."""
    return "\n".join(f"<{priority}>{line}" for line in text.split("\n"))


class JournalFormatter(logging.Formatter):
    """`LEVEL logger: message`, each line prefixed with the record's syslog priority."""

    def format(self, record: logging.LogRecord) -> str:
        return prefixed(super().format(record), syslog_priority(record.levelno))


def configure_logging(level: str | int, fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s") -> bool:
    """`logging.basicConfig` on stderr with `fmt`, or with priority prefixes (and no
    timestamp) when stderr is the journal. Returns whether it is the journal."""
    journal = stderr_is_journal()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JournalFormatter("%(levelname)s %(name)s: %(message)s") if journal
                         else logging.Formatter(fmt))
    logging.basicConfig(level=level, handlers=[handler])
    return journal


def error_line(text: str) -> str:
    """A one-line error for stderr (`batchd: error: ...`): priority 3 under journald."""
    return prefixed(text, 3) if stderr_is_journal() else text
