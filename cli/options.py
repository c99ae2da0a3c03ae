"""A small getopt_long-style option parser for the Slurm-named commands.

Slurm's commands parse their arguments with glibc's `getopt_long`, so users rely on its
grammar: `-xVAL`, `-x VAL`, bundled flags (`-Hv`), `--long=VAL`, `--long VAL`, long
names abbreviated to any unique prefix (`--part=gpu`), `--` to end the options. This
module reproduces that grammar and glibc's error wording, followed by the command's
`Try "<prog> --help" for more information` line as Slurm prints it.

Import cost matters (every `sbatch` call pays it): only builtins are used here.

Contract of `parse`:
- returns `(values, rest)`: `values` maps each `Opt.key` seen to its value, later
  occurrences replacing earlier ones; for `multi=True` options the value is a list of
  every occurrence in order (for flags: the number of occurrences); `rest` holds the
  non-option arguments in order.
- a flag (`arg="none"`) stores `Opt.const` (default True).
- `arg="optional"`: the value is taken only from `--long=VAL` or `-xVAL`; otherwise
  the option's value is None.
- with `stop_at_positional=True` parsing stops at the first non-option argument (as
  getopt with a leading `+`, which sbatch uses: the script's own arguments follow);
  otherwise non-options are collected and parsing goes on (glibc's permutation).
"""

import sys

from batchd.slurm.jobopts import OptionError  # noqa: F401 - the commands import it from here

__all__ = ["Opt", "OptionError", "parse", "try_help"]


class Opt:
    """One option of a command's table.

    short: one character or None; long: the name without `--` or None;
    arg: "none" | "required" | "optional"; key: the name under which `parse` stores
    the value; multi: keep every occurrence (a list, or a count for flags);
    const: the value a flag stores (e.g. False for `--no-requeue` under key `requeue`).
    """

    __slots__ = ("short", "long", "arg", "key", "multi", "const")

    def __init__(self, short, long, arg, key, multi=False, const=True):
        if arg not in ("none", "required", "optional"):
            raise ValueError(f"bad arg kind {arg!r}")
        self.short = short
        self.long = long
        self.arg = arg
        self.key = key
        self.multi = multi
        self.const = const

    def __repr__(self):
        return f"Opt({self.short!r}, {self.long!r}, {self.arg!r}, {self.key!r})"


def try_help(prog):
    """The line Slurm prints after a getopt error."""
    return f'Try "{prog} --help" for more information'


def _fail(prog, text, exit_code):
    raise OptionError(f"{prog}: {text}\n{try_help(prog)}", exit_code)


def _store(values, opt, value):
    if opt.multi:
        if opt.arg == "none":
            values[opt.key] = values.get(opt.key, 0) + 1
        else:
            values.setdefault(opt.key, []).append(value)
    else:
        values[opt.key] = value


def _same(a, b):
    return a.key == b.key and a.arg == b.arg and a.const == b.const and a.multi == b.multi


def _find_long(prog, name, shown, longs, exit_code):
    exact = longs.get(name)
    if exact is not None:
        return exact
    matches = [o for n, o in longs.items() if n.startswith(name)]
    if not matches:
        _fail(prog, f"unrecognized option '{shown}'", exit_code)
    first = matches[0]
    if all(_same(first, o) for o in matches[1:]):
        return first
    poss = " ".join(f"'--{o.long}'" for o in matches)
    _fail(prog, f"option '{shown}' is ambiguous; possibilities: {poss}", exit_code)
    return None  # unreachable


def parse(prog, argv, table, stop_at_positional=False, exit_code=1):
    """Parse `argv` (without the program name) against `table` (a list of `Opt`).

    Returns `(values, rest)` as described in the module docstring. Raises
    `OptionError` with glibc's message plus Slurm's "Try ... --help" line and
    `exit_code` (Slurm's commands exit 1 on a getopt error).
    """
    shorts = {}
    longs = {}
    for o in table:
        if o.short:
            shorts[o.short] = o
        if o.long:
            longs[o.long] = o
    values = {}
    rest = []
    i = 0
    n = len(argv)
    while i < n:
        a = argv[i]
        i += 1
        if a == "--":
            rest.extend(argv[i:])
            break
        if a.startswith("--"):
            body = a[2:]
            eq = body.find("=")
            name = body if eq < 0 else body[:eq]
            shown = "--" + name
            o = _find_long(prog, name, shown, longs, exit_code)
            if o.arg == "none":
                if eq >= 0:
                    _fail(prog, f"option '--{o.long}' doesn't allow an argument", exit_code)
                _store(values, o, o.const)
            elif o.arg == "required":
                if eq >= 0:
                    _store(values, o, body[eq + 1:])
                elif i < n:
                    _store(values, o, argv[i])
                    i += 1
                else:
                    _fail(prog, f"option '--{o.long}' requires an argument", exit_code)
            else:
                _store(values, o, body[eq + 1:] if eq >= 0 else None)
            continue
        if a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                c = a[j]
                j += 1
                o = shorts.get(c)
                if o is None:
                    _fail(prog, f"invalid option -- '{c}'", exit_code)
                if o.arg == "none":
                    _store(values, o, o.const)
                    continue
                if j < len(a):
                    _store(values, o, a[j:])
                elif o.arg == "optional":
                    _store(values, o, None)
                elif i < n:
                    _store(values, o, argv[i])
                    i += 1
                else:
                    _fail(prog, f"option requires an argument -- '{c}'", exit_code)
                break
            continue
        # a non-option argument ("-" alone is one, as in getopt)
        if stop_at_positional:
            rest.append(a)
            rest.extend(argv[i:])
            break
        rest.append(a)
    return values, rest


def die(err, stream=None):
    """Print an `OptionError` and exit with its code (for a command's `main`)."""
    (stream or sys.stderr).write(err.message + "\n")
    sys.exit(err.exit_code)
