"""`batchd apply FILE.toml`: make the accounts in the database match a file."""

import tomllib

import click

from batchd.cli.admin import call


@click.command("apply")
@click.argument("file", type=click.File("rb"))
@click.option("--dry-run", is_flag=True, help="Print the changes without making them.")
def command(file, dry_run):
    """Make the database's accounts, users (and prices) match FILE. Prints the changes
    first; applying the same file twice changes nothing. Every change is audited."""
    try:
        doc = tomllib.load(file)
    except tomllib.TOMLDecodeError as e:
        raise click.ClickException(f"{file.name}: not valid TOML: {e}") from None
    res = call("POST", "/v1/accounts/apply", {"doc": doc, "dry_run": dry_run})
    for line in res["changes"]:
        click.echo(line)
    if not res["changes"]:
        click.echo("no changes")
    elif dry_run:
        click.echo("(dry run: nothing changed)")
