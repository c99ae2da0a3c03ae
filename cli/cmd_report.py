"""`batchd report`: the bill of a period (see docs/report.md),
from the daemon's hourly rollups plus running jobs up to now. Periods are in --tz (default
the daemon's [report] timezone, else UTC); `--end` is exclusive; `--end now` counts the
current partial hour."""

from __future__ import annotations

import datetime as _dt
import json
import sys

import click

from batchd.cli import client
from batchd.slurm.digits import isdigits


def parse_day_or_time(text: str, what: str) -> int:
    """YYYY-MM-DD, YYYY-MM-DDTHH[:MM[:SS]] (UTC unless it carries an offset), `now`, or
    unix seconds -> unix seconds."""
    t = text.strip()
    if t == "now":
        return int(_dt.datetime.now(_dt.UTC).timestamp())
    if isdigits(t) and len(t) > 8:
        return int(t)
    try:
        d = _dt.datetime.fromisoformat(t)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a date (YYYY-MM-DD[THH:MM])", param_hint=what) from None
    return int(d.replace(tzinfo=d.tzinfo or _dt.UTC).timestamp())


def month_period(text: str) -> tuple[int, int]:
    """`2026-10` -> [2026-10-01, 2026-11-01) as unix seconds (UTC)."""
    try:
        y, m = (int(x) for x in text.split("-"))
        first = _dt.datetime(y, m, 1, tzinfo=_dt.UTC)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a month (YYYY-MM)", param_hint="--month") from None
    nxt = _dt.datetime(y + (m == 12), m % 12 + 1, 1, tzinfo=_dt.UTC)
    return int(first.timestamp()), int(nxt.timestamp())


def _local_time(text: str, what: str) -> str:
    """A --start/--end value as sent: unix seconds or the date text itself (the daemon
    reads it in the report's zone), after checking it is one."""
    t = text.strip()
    if t == "now" or (isdigits(t) and len(t) > 8):
        return str(parse_day_or_time(t, what))
    parse_day_or_time(t, what)  # the format check
    return t


def _csv_opt(values: tuple[str, ...]) -> str:
    return ",".join(x.strip() for v in values for x in v.split(",") if x.strip())


@click.command(short_help="Print the bill of a period, by account, user, GPU type or node: GPU- and CPU-hours, "
                          "billing, cost, quota use, idle capacity, GPU efficiency.",
               help="Print the bill of a period: GPU-hours per type, CPU-hours, billing, cost, quota use (%), "
                    "borrowed and lent GPU-hours, idle and down capacity and GPU efficiency (%), by account "
                    "(default), user, GPU type or node, and the rate card it was computed with (each price in "
                    "force in the period, its validity and the part of the period it priced). The period "
                    "defaults to the current month up to now.\n\n"
                    "Borrowed GPU-hours: the GPU-time an account held above its gres/gpu quota, to the "
                    "second. Lent GPU-hours: the GPU-time of its unused quota that others' borrowing used "
                    "(borrowing is served first from capacity no account is guaranteed, then from unused "
                    "quotas pro rata). Capacity, idle and quota count only from a node's first "
                    "registration; DOWN or drained node time is down, not idle. With --by user, Acct "
                    "share is the user's share of their account's cost. A user who is not an "
                    "administrator sees only the accounts they belong to, without idle capacity. See "
                    "docs/report.md.")
@click.option("--month", metavar="YYYY-MM", help="The calendar month, in the report's time zone (--tz).")
@click.option("--start", metavar="DATE",
              help="Start (inclusive): YYYY-MM-DD[THH:MM], local time of --tz unless it carries an offset.")
@click.option("--end", metavar="DATE",
              help="End (exclusive): YYYY-MM-DD[THH:MM] (as --start) or now. An end is rounded down to a "
                   "whole UTC hour, except now (or any time not yet passed): the current partial hour is "
                   "counted up to now.")
@click.option("--tz", metavar="ZONE",
              help="IANA time zone of --month, --start/--end dates and the daily breakdown (default: the "
                   "daemon's [report] timezone, else UTC). The rollup counts UTC hours: a zone with a "
                   "half-hour offset has its boundaries rounded down to the UTC hour.")
@click.option("--by", "by", multiple=True, metavar="KEYS",
              help="Group rows by account, user, gpu-type, node (comma list or repeated; combinable).")
@click.option("--account", "accounts", multiple=True, metavar="NAMES", help="Only these accounts.")
@click.option("--user", "users", multiple=True, metavar="NAMES", help="Only these users.")
@click.option("--spread-idle", is_flag=True,
              help="Spread idle GPU capacity (and its cost) over accounts by quota instead of "
                   "showing it unallocated.")
@click.option("--zero-gpu", "zero_gpu", default=None, metavar="HOURS", type=float,
              help="Flag runs that held GPUs at 0% for at least this many hours (default: daemon config).")
@click.option("--csv", "fmt", flag_value="csv",
              help="CSV, one line per row and a TOTAL line, each ending with period_start, period_end, "
                   "counted_up_to (ISO 8601 UTC) and currency; percentages as plain numbers under a "
                   "header ending in (%); after an empty line, the rate card.")
@click.option("--json", "fmt", flag_value="json",
              help="The stable JSON object (docs/report.md), with the rate card as rate_card.")
@click.option("--html", "fmt", flag_value="html", help="One self-contained HTML page with charts.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="Write to this file.")
def command(month, start, end, tz, by, accounts, users, spread_idle, zero_gpu, fmt, output):
    if month and (start or end):
        raise click.UsageError("give --month or --start/--end, not both")
    q: dict[str, str] = {}
    if tz:
        try:
            from batchd.accounting.zones import zone_of

            zone_of(tz)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--tz") from None
        q["tz"] = tz
    if month:
        month_period(month)  # the format check; the daemon cuts it in the report's zone
        q["month"] = month.strip()
    else:
        if start:
            q["start"] = _local_time(start, "--start")
        if end:
            # "now" goes as the word: the daemon reads its own clock and counts the
            # current partial hour (a second from this clock may already lie behind it)
            q["end"] = "now" if end.strip() == "now" else _local_time(end, "--end")
    groups = _csv_opt(by) or "account"
    for g in groups.split(","):
        if g not in ("account", "user", "gpu-type", "gpu_type", "node"):
            raise click.BadParameter(f"{g!r}: one of account, user, gpu-type, node", param_hint="--by")
    q["by"] = groups
    q["accounts"] = _csv_opt(accounts)
    q["users"] = _csv_opt(users)
    if spread_idle:
        q["spread_idle"] = "1"
    if zero_gpu is not None:
        q["zero_gpu_s"] = str(zero_gpu * 3600)
    if fmt == "html":
        q["daily"] = "1"
        q["by_user"] = "1"
    rep = client.call("batchd report", "GET", "/v1/report", query=q)
    text = render(rep, fmt)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if not rep.get("reconciled", True):
        sys.exit(3)


def render(rep: dict, fmt: str | None) -> str:
    """The report object in the chosen format (None = aligned table)."""
    if fmt == "json":
        return json.dumps(rep, indent=2, sort_keys=True) + "\n"
    if fmt == "csv":
        from batchd.accounting.render import render_csv

        return render_csv(rep)
    if fmt == "html":
        from batchd.accounting.html import render_html

        return render_html(rep)
    from batchd.accounting.render import render_table

    return render_table(rep)
