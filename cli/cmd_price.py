"""`batchd price list|set`: chargeback prices per TRES-hour with validity periods."""

from __future__ import annotations

import datetime as _dt

import click

from batchd.cli import client
from batchd.cli.helpfmt import SummaryGroup


def _day(ts: float | None) -> str:
    if ts is None:
        return "-"
    d = _dt.datetime.fromtimestamp(ts, _dt.UTC)
    return d.strftime("%Y-%m-%d") if d.hour == 0 else d.strftime("%Y-%m-%dT%H:%M")


@click.group(cls=SummaryGroup, help="Chargeback prices: per TRES-hour (mem: per GiB-hour), per GPU type and MIG profile, "
                  "with validity periods, in one currency.")
def command():
    pass


@command.command("list", help="List prices (valid_to is exclusive).")
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
def list_(as_json):
    r = client.call("batchd price", "GET", "/v1/prices")
    if as_json:
        import json

        click.echo(json.dumps(r, indent=2, sort_keys=True))
        return
    rows = [["TRES", "PER_HOUR", "CURRENCY", "VALID_FROM", "VALID_TO"]]
    rows += [[p["tres"], p["per_hour"], p["currency"], _day(p["valid_from"]), _day(p["valid_to"])]
             for p in r["prices"]]
    widths = [max(len(x[i]) for x in rows) for i in range(5)]
    for x in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(x, widths, strict=True)).rstrip())


@command.command("set", help="Add a price: TRES (e.g. gres/gpu:h200, gres/gpu:1g.24gb, cpu, mem) and its "
                             "price per hour as a decimal (e.g. 1.20). A later valid_from supersedes "
                             "earlier prices of the same TRES from that date on.")
@click.argument("tres")
@click.argument("per_hour")
@click.option("--currency", required=True, help="Currency code, e.g. EUR (one currency for all prices).")
@click.option("--from", "valid_from", required=True, metavar="DATE", help="First day (UTC), YYYY-MM-DD.")
@click.option("--to", "valid_to", metavar="DATE", help="Last day (UTC, inclusive), YYYY-MM-DD.")
def set_(tres, per_hour, currency, valid_from, valid_to):
    body = {"prices": [{"tres": tres, "per_hour": per_hour, "currency": currency, "valid_from": valid_from,
                        "valid_to": valid_to}]}
    client.call("batchd price", "POST", "/v1/prices", body=body)
    click.echo(f"price set: {tres.lower()} {per_hour} {currency.upper()}/h from {valid_from}"
               + (f" to {valid_to}" if valid_to else ""))
