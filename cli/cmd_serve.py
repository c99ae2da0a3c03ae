"""`batchd serve`: run the daemon (under systemd, or `--dev` in a terminal)."""

import logging
import sys

import click


@click.command("serve")
@click.option("--config", "config_path", metavar="FILE", help="Config file (default $BATCHD_CONFIG or "
              "/etc/batchd/batchd.toml; in --dev mode the bundled 16-GPU example).")
@click.option("--dev", is_flag=True, help="Developer mode: state, socket and spool under ./.batchd, run as "
              "the invoking user, every node of the config in this process with its GPUs faked, and the "
              "database migrated automatically.")
@click.option("--node", "nodes", multiple=True, metavar="NAME", help="The node(s) this daemon is the agent "
              "of (default: every node of the config).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def command(config_path, dev, nodes, log_level):
    """Run the batchd daemon until SIGTERM or Ctrl-C. Running jobs survive a stop or a
    restart of the daemon."""
    from batchd.config import load_config
    from batchd.daemon import Daemon
    from batchd.errors import BatchdError, StoreError
    from batchd.journald import configure_logging, error_line

    configure_logging(log_level.upper())  # under journald: <N> priority prefixes
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    cfg = None
    try:
        cfg = load_config(config_path, dev=dev)
        d = Daemon(cfg, list(nodes) or None)

        def listening() -> None:  # after the migrations, once the socket answers
            click.echo(f"batchd (dev) listening on {cfg.socket}; cluster {cfg.cluster_name}, "
                       f"{len(cfg.nodes)} node(s). Submit from this directory with sbatch.", err=True)

        d.run_forever(on_ready=listening if dev else None)
    except BatchdError as e:
        # a database error (the store's StoreError, the driver's error its cause) is named
        # by its cause on this node, as any other environmental failure below
        if not (isinstance(e, StoreError) and e.__cause__ is not None and _fault_line(e.__cause__, cfg)):
            click.echo(error_line(f"batchd: error: {e.message}"), err=True)
        sys.exit(1)
    except KeyError as e:
        click.echo(error_line(f"batchd: error: unknown node {e.args[0]!r} (not in the config)"), err=True)
        sys.exit(1)
    except Exception as e:
        if not _fault_line(e, cfg):
            raise
        sys.exit(1)


def _fault_line(e, cfg):
    """The environment, not a bug: print one line naming the cause of `e` (a full disk, a
    database lock held too long, a database that does not answer) instead of a traceback;
    False when `e` has no such cause."""
    from batchd.faults import cause
    from batchd.journald import error_line

    why = cause(e, (cfg.state_dir,) if cfg is not None else ())
    if why is None:
        return False
    detail = str(getattr(e, "orig", None) or e).strip().splitlines()[0][:300]
    click.echo(error_line(f"batchd: error: cannot start: {why} ({detail})"), err=True)
    return True
