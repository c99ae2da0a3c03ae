"""`batchd user add|remove|list`: account membership of users."""

import click

from batchd.cli.admin import call
from batchd.cli.helpfmt import SummaryGroup


@click.group("user", cls=SummaryGroup)
def command():
    """Users' memberships of accounts (Slurm associations)."""


@command.command("list")
def list_():
    """List every user association."""
    doc = call("GET", "/v1/accounts")
    click.echo(f"{'User':<16} {'Account':<16} {'Shares':>6}  Default")
    for u in doc["user"]:
        click.echo(f"{u['name']:<16} {u['account']:<16} {str(u['shares']):>6}  {'yes' if u['default'] else ''}")


@command.command("add")
@click.argument("name")
@click.option("--account", "-A", required=True, help="The account to join.")
@click.option("--default", is_flag=True, help="Make it the user's default account.")
@click.option("--shares", default="1", show_default=True, help='Fair-share shares, or "parent".')
def add(name, account, default, shares):
    """Make NAME a member of an account."""
    sh = shares if shares == "parent" else int(shares)
    res = call("POST", "/v1/accounts/modify", {"op": "user.add", "name": name, "account": account,
                                               "default": default, "shares": sh})
    for line in res["changes"] or ["no changes"]:
        click.echo(line)


@command.command("remove")
@click.argument("name")
@click.option("--account", "-A", required=True)
def remove(name, account):
    """Remove NAME from an account."""
    res = call("POST", "/v1/accounts/modify", {"op": "user.remove", "name": name, "account": account})
    for line in res["changes"] or ["no changes"]:
        click.echo(line)
