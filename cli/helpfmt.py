"""Command summaries in `--help` lists, whole: click shortens a command's help to what
fits the terminal and ends it with "...", which cut most of batchd's summaries mid-phrase.
`summary` is a command's own `short_help`, else the first sentence of its help, in full;
`SummaryGroup` lists its commands with it (long summaries wrap onto further lines), and
the generated CLI reference (`batchd.cli.completion`) uses the same text."""

from __future__ import annotations

import inspect
import re

import click

#: help lines may use up to this many columns where the terminal is that wide (click's
#: default is 80)
MAX_WIDTH = 100
CONTEXT_SETTINGS = {"max_content_width": MAX_WIDTH}

# the end of a sentence: a full stop before a space or the end, not the one of "e.g."/"i.e."
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)")


def summary(cmd: click.Command) -> str:
    """`cmd`'s one-line summary: its short_help, else the first sentence of its help."""
    if cmd.short_help:
        return " ".join(inspect.cleandoc(cmd.short_help).split())
    para = " ".join(inspect.cleandoc(cmd.help or "").split("\n\n")[0].split())
    m = _SENTENCE_END.search(para)
    return para[: m.end()] if m else para


class SummaryGroup(click.Group):
    """A click group whose command list shows each command's whole `summary`."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, summary(cmd)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
