"""`batchd migrate`: bring the database schema to the current revision."""

import sys

import click


@click.command("migrate")
@click.option("--config", "config_path", metavar="FILE", help="Config file naming the database.")
@click.option("--database-url", metavar="URL", help="Database URL (overrides the config).")
@click.option("--check", is_flag=True, help="Only say whether the database is at the head revision.")
def command(config_path, database_url, check):
    """Upgrade the database to the head alembic revision (idempotent)."""
    from batchd.config import load_config
    from batchd.errors import BatchdError
    from batchd.journald import error_line
    from batchd.store import make_engine
    from batchd.store.migrate import check_at_head, current_revision, head_revision, upgrade

    try:
        url = database_url or load_config(config_path).db_url()
        engine = make_engine(url)
        if check:
            check_at_head(engine)
            click.echo(f"database at head ({head_revision()})")
            return
        before = current_revision(engine)
        upgrade(engine)
        after = current_revision(engine)
        click.echo(f"database migrated {before or 'empty'} -> {after}" if before != after
                   else f"database already at head ({after})")
    except BatchdError as e:
        click.echo(error_line(f"batchd: error: {e.message}"), err=True)  # priority 3 in ExecStartPre
        sys.exit(1)
