"""Helpers for the `batchd` admin subcommands: talk to the daemon, print errors the
Slurm way (`batchd: error: ...`, exit 1)."""

import sys

import click

from batchd.cli.client import DaemonError, Unreachable, request


def call(method, path, body=None, query=None):
    try:
        return request(method, path, body, query)
    except (Unreachable, DaemonError) as e:
        click.echo(f"batchd: error: {getattr(e, 'message', e)}", err=True)
        sys.exit(1)


def parse_resource_opts(values, field):
    """`gres/gpu=6` options -> {"gres/gpu": {field: 6}}."""
    out = {}
    for v in values:
        name, eq, num = v.partition("=")
        if not eq:
            raise click.BadParameter(f"{v!r}: expected TRES=NUMBER, e.g. gres/gpu=4")
        try:
            n = float(num)
        except ValueError:
            raise click.BadParameter(f"{v!r}: {num!r} is not a number") from None
        out.setdefault(name, {})[field] = int(n) if n.is_integer() else n
    return out
