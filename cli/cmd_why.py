"""`batchd why JOBID`: why a job waits, and what its priority is made of."""

import click

from batchd.cli.admin import call


@click.command("why")
@click.argument("job")
def command(job):
    """Explain in plain lines what JOB waits for and which factor dominates its priority."""
    for line in call("GET", "/v1/why", query={"job": job})["lines"]:
        click.echo(line)
