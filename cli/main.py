"""`batchd`: the admin and daemon command (click). Subcommands live one per module,
`cli/cmd_<name>.py`, each exposing a click command named `command`; they are imported
only when invoked so that `batchd --help` stays fast."""

import importlib

import click

from batchd.cli.helpfmt import CONTEXT_SETTINGS, SummaryGroup

# name -> module under batchd.cli that defines `command`
SUBCOMMANDS = {
    "serve": "cmd_serve",
    "migrate": "cmd_migrate",
    "plan": "cmd_plan",
    "simulate": "cmd_simulate",
    "node": "cmd_node",
    "why": "cmd_why",
    "apply": "cmd_apply",
    "account": "cmd_account",
    "user": "cmd_user",
    "report": "cmd_report",
    "price": "cmd_price",
    "eff": "cmd_eff",
    "controller": "cmd_controller",
    "completion": "cmd_completion",
}


class LazyGroup(SummaryGroup):
    def list_commands(self, ctx):
        return sorted(n for n in SUBCOMMANDS if self._find(n) is not None)

    def _find(self, name):
        mod = SUBCOMMANDS.get(name)
        if mod is None:
            return None
        try:
            return importlib.import_module(f"batchd.cli.{mod}")
        except ModuleNotFoundError as e:
            if e.name == f"batchd.cli.{mod}":
                return None
            raise

    def get_command(self, ctx, name):
        m = self._find(name)
        return None if m is None else m.command


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS, help="batchd: Slurm-compatible batch scheduling and GPU accounting.")
@click.version_option(package_name="batchd")
def main():
    pass
