"""`batchd controller status`: which daemon holds the controller role."""

import time

import click

from batchd.cli.admin import call
from batchd.cli.helpfmt import SummaryGroup


@click.group("controller", cls=SummaryGroup)
def command():
    """The controller role (the daemon that schedules for the whole cluster)."""


@command.command("status")
def status():
    """Print the node holding the controller role and since when."""
    h = call("GET", "/v1/controller")
    if not h.get("node"):
        click.echo("no controller: no daemon holds the role right now")
        raise SystemExit(1)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(h["since"])) if h.get("since") else "unknown"
    click.echo(f"controller: {h['node']} (pid {h.get('pid')}) since {since}")
    if "this_node" in h:
        click.echo(f"this daemon: {h['this_node']} ({'controller' if h.get('this_is_controller') else 'agent'})")
