"""The command-line reference of every batchd command, read from the commands themselves,
and the shell completion scripts built from it.

`reference()` is the one source: for each Slurm-named and LSF-named command, its options
come from its option table (`TABLE`/`OPTIONS`, or the `-x`/`--long` words of its help
when it has no table) and each option's one-line description from its own `--help`
text; for `batchd` and its subcommands, from the click commands. `scripts/
gen-cli-reference.py` renders it as docs/commands.md; `bash_script()`/`zsh_script()`
render the completion scripts (`batchd completion bash|zsh`, committed under
completions/). Tests check both committed files are up to date.

Imported only by the generator, the completion command and tests: it imports every
command module (click included), which the commands themselves never do.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re

from batchd.cli.helpfmt import summary as command_summary

SLURM = ("sbatch", "srun", "salloc", "squeue", "scancel", "scontrol", "sacct", "sinfo", "sshare", "sprio", "sreport", "sacctmgr")
LSF = ("bsub", "bjobs", "bkill")
# command -> module under batchd.cli holding its option table (when not the command's own)
TABLE_MODULE = {"sbatch": "sbatch_opts"}
IGNORED = "accepted for compatibility, no effect"
UNDESCRIBED = "(not described by `{prog} --help`)"
_OPT_RE = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def help_text(prog: str) -> str:
    """What `prog --help` prints (run in-process, stdout captured)."""
    mod = importlib.import_module(f"batchd.cli.{prog}")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            mod.main(["--help"])
        except SystemExit:
            pass
    return buf.getvalue()


def _descriptions(text: str) -> dict[str, str]:
    """option word -> the first line of its description in a help text. A help line
    is `<option words and values><2+ spaces or ': '><description>`."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not line.startswith("-"):
            continue
        m = re.search(r"\s{2,}|: |(?<=\])\s", line)
        left, desc = (line[:m.start()], line[m.end():].strip()) if m else (line, "")
        if not desc and i + 1 < len(lines) and lines[i + 1].strip() and not lines[i + 1].strip().startswith("-"):
            desc = lines[i + 1].strip()
        for word in _OPT_RE.findall(left):
            out.setdefault(word, desc)
    return out


def _table(prog: str) -> list[tuple[list[str], bool, str]] | None:
    """(names, takes a value, key) per option of the command's table, or None."""
    mod = importlib.import_module(f"batchd.cli.{TABLE_MODULE.get(prog, prog)}")
    table = getattr(mod, "TABLE", None) or getattr(mod, "OPTIONS", None)
    if table is None:
        return None
    rows: list[tuple[list[str], bool, str]] = []
    if isinstance(table, dict):  # LSF commands: "-opt" -> (key, takes a value)
        by_key: dict[str, tuple[list[str], bool, str]] = {}
        for name, (key, takes) in table.items():
            if key not in by_key:
                by_key[key] = ([], takes, key)
                rows.append(by_key[key])
            by_key[key][0].append(name)
        return rows
    for o in table:
        names = ([f"-{o.short}"] if o.short else []) + ([f"--{o.long}"] if o.long else [])
        rows.append((names, o.arg != "none", o.key))
    return rows


def summary(prog: str) -> str:
    """The first line of the command module's docstring, without its "`prog`: " head."""
    doc = (importlib.import_module(f"batchd.cli.{prog}").__doc__ or "").strip()
    first = doc.split("\n\n")[0].replace("\n", " ")
    stripped = re.sub(r"^`?" + re.escape(prog) + r"`?\s*:\s*", "", first)
    return stripped if stripped == first else stripped[:1].upper() + stripped[1:]


def _plain_command(prog: str) -> dict:
    text = help_text(prog)
    desc = _descriptions(text)
    table = _table(prog)
    if table is None:
        words = sorted(set(_OPT_RE.findall(text)) | {"--help"}, key=lambda w: (w.lstrip("-").lower(), w))
        table = [([w], False, w) for w in words]
    options = []
    for names, takes, key in table:
        help_line = next((desc[n] for n in names if desc.get(n)), "")
        if not help_line:
            help_line = IGNORED if key.startswith("_") else UNDESCRIBED.format(prog=prog)
        options.append({"names": names, "value": takes, "help": help_line})
    return {"name": prog, "summary": summary(prog), "options": options, "subcommands": [], "args": [],
            "choices": []}


def _click_command(name: str, cmd) -> dict:
    import click

    options: list[dict] = []
    args: list[str] = []
    choices: list[str] = []
    for p in cmd.params:
        if isinstance(p, click.Option):
            if p.hidden:
                continue
            options.append({"names": list(p.opts) + list(p.secondary_opts),
                            "value": not p.is_flag and not p.count,
                            "help": (p.help or "").split("\n")[0] or "(no help text)"})
        elif isinstance(p, click.Argument):
            args.append(p.human_readable_name)
            if isinstance(p.type, click.Choice):
                choices.extend(str(c) for c in p.type.choices)
    options.append({"names": ["--help"], "value": False, "help": "Show this message and exit."})
    subs = []
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for sub in cmd.list_commands(ctx):
            subs.append(_click_command(sub, cmd.get_command(ctx, sub)))
    return {"name": name, "summary": command_summary(cmd), "options": options,
            "subcommands": subs, "args": args, "choices": choices}


def batchd_reference() -> dict:
    """`batchd` and every subcommand (those of cli/main.py's SUBCOMMANDS plus `completion`)."""
    from batchd.cli import main as main_mod

    if "completion" not in main_mod.SUBCOMMANDS:
        main_mod.SUBCOMMANDS["completion"] = "cmd_completion"
    return _click_command("batchd", main_mod.main)


def reference() -> list[dict]:
    """Every command: `{"name", "summary", "options": [{"names", "value", "help"}],
    "subcommands": [same shape], "args": [str], "choices": [str]}` (choices: the values
    its positional argument takes, when they are a fixed set), batchd first, then the Slurm-named
    commands, then the LSF-named ones (the order of SLURM and LSF)."""
    return [batchd_reference()] + [_plain_command(p) for p in SLURM + LSF]


# ----------------------------------------------------------------------------- shells
def _words(cmd: dict) -> str:
    return " ".join(n for o in cmd["options"] for n in o["names"])


def _fn(name: str) -> str:
    return re.sub(r"\W", "_", name)


def bash_script(ref: list[dict] | None = None) -> str:
    """A bash completion script for every command of `reference()`."""
    ref = reference() if ref is None else ref
    out = ["# bash completion for batchd and its Slurm/LSF commands.",
           "# Generated by `batchd completion bash`; do not edit. Install: source this file, or copy",
           "# it to /usr/share/bash-completion/completions/batchd (and link the other names to it).",
           "",
           "_batchd_simple() {",
           "    # $1: the options; $2: the values of a positional argument (files when empty)",
           '    local cur="${COMP_WORDS[COMP_CWORD]}"',
           '    if [[ "$cur" == -* ]]; then',
           '        COMPREPLY=( $(compgen -W "$1" -- "$cur") )',
           '    elif [[ -n "$2" ]]; then',
           '        COMPREPLY=( $(compgen -W "$2" -- "$cur") )',
           "    else",
           '        COMPREPLY=( $(compgen -f -- "$cur") )',
           "    fi",
           "}",
           ""]
    batchd, plain = ref[0], ref[1:]
    for cmd in plain:
        out += [f"_batchd_cmd_{_fn(cmd['name'])}() {{", f'    _batchd_simple "{_words(cmd)}"', "}",
                f"complete -o default -F _batchd_cmd_{_fn(cmd['name'])} {cmd['name']}", ""]
    out += ["_batchd() {",
            '    local cur="${COMP_WORDS[COMP_CWORD]}"',
            "    if (( COMP_CWORD == 1 )); then",
            f'        COMPREPLY=( $(compgen -W "{" ".join(s["name"] for s in batchd["subcommands"])} '
            f'{_words(batchd)}" -- "$cur") )',
            "        return",
            "    fi",
            '    case "${COMP_WORDS[1]}" in']
    for sub in batchd["subcommands"]:
        out.append(f"        {sub['name']})")
        if sub["subcommands"]:
            out += ["            if (( COMP_CWORD == 2 )); then",
                    f'                COMPREPLY=( $(compgen -W "{" ".join(s["name"] for s in sub["subcommands"])} '
                    f'{_words(sub)}" -- "$cur") )',
                    "                return",
                    "            fi",
                    '            case "${COMP_WORDS[2]}" in']
            for leaf in sub["subcommands"]:
                out.append(f'                {leaf["name"]}) _batchd_simple "{_words(leaf)}" "{" ".join(leaf["choices"])}" ;;')
            out += ["            esac", "            ;;"]
        else:
            out += [f'            _batchd_simple "{_words(sub)}" "{" ".join(sub["choices"])}"', "            ;;"]
    out += ["    esac", "}", "complete -o default -F _batchd batchd", ""]
    return "\n".join(out)


def _zsh_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "'\\''").replace(":", "\\:")


def _zsh_specs(cmd: dict) -> list[str]:
    specs = []
    for o in cmd["options"]:
        for n in o["names"]:
            specs.append(f"'{_zsh_quote(n)}:{_zsh_quote(o['help'][:70])}'")
    return specs


def zsh_script(ref: list[dict] | None = None) -> str:
    """A zsh completion function (`_batchd`) for every command of `reference()`."""
    ref = reference() if ref is None else ref
    batchd, plain = ref[0], ref[1:]
    names = " ".join(c["name"] for c in ref)
    out = [f"#compdef {names}",
           "# zsh completion for batchd and its Slurm/LSF commands.",
           "# Generated by `batchd completion zsh`; do not edit. Install: put this file, named _batchd,",
           "# in a directory of $fpath (e.g. /usr/share/zsh/site-functions) and run compinit.",
           "",
           "_batchd_opts() {",
           "    # $1: the name of an array of 'option:description' items; $2: the values of a",
           "    # positional argument (files when empty)",
           "    if [[ $PREFIX == -* ]]; then",
           "        _describe -t options option $1",
           "    elif [[ -n $2 ]]; then",
           "        compadd -- ${=2}",
           "    else",
           "        _files",
           "    fi",
           "}",
           ""]
    for cmd in plain:
        out += [f"_batchd_cmd_{_fn(cmd['name'])}() {{", "    local -a o", "    o=(", *("        " + s for s in _zsh_specs(cmd)),
                "    )", "    _batchd_opts o", "}", ""]
    out += ["_batchd_main() {", "    local -a o subs"]
    out += ["    if (( CURRENT == 2 )); then",
            "        subs=(", *(f"            '{_zsh_quote(s['name'])}:{_zsh_quote(s['summary'][:70])}'"
                                for s in batchd["subcommands"]),
            "        )",
            "        _describe -t commands 'batchd command' subs",
            "        return",
            "    fi",
            "    case $words[2] in"]
    for sub in batchd["subcommands"]:
        out.append(f"        {sub['name']})")
        if sub["subcommands"]:
            out += ["            if (( CURRENT == 3 )); then",
                    "                subs=(", *(f"                    '{_zsh_quote(s['name'])}:{_zsh_quote(s['summary'][:70])}'"
                                                for s in sub["subcommands"]),
                    "                )",
                    "                _describe -t commands 'subcommand' subs",
                    "                return",
                    "            fi",
                    "            case $words[3] in"]
            for leaf in sub["subcommands"]:
                out += [f"                {leaf['name']})", "                    o=(",
                        *("                        " + s for s in _zsh_specs(leaf)),
                        "                    )", f"                    _batchd_opts o '{' '.join(leaf['choices'])}'",
                        "                    ;;"]
            out += ["            esac", "            ;;"]
        else:
            out += ["            o=(", *("                " + s for s in _zsh_specs(sub)), "            )",
                    f"            _batchd_opts o '{' '.join(sub['choices'])}'", "            ;;"]
    out += ["    esac", "}", "", "case $service in", "    batchd) _batchd_main ;;"]
    for cmd in plain:
        out.append(f"    {cmd['name']}) _batchd_cmd_{_fn(cmd['name'])} ;;")
    out += ["esac", ""]
    return "\n".join(out)
