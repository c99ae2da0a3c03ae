"""The CLI reference (docs/commands.md) and the completion scripts (completions/) are
generated from the commands themselves and must be up to date; every command prints
its help and exits 0."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from batchd.cli import completion

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
COMMANDS = ("batchd",) + completion.SLURM + completion.LSF


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", ROOT / "scripts" / "gen-cli-reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def generated():
    return {p.relative_to(ROOT).as_posix(): text for p, text in _generator().outputs().items()}


def test_committed_files_are_up_to_date(generated):
    assert set(generated) == {"docs/commands.md", "completions/batchd.bash", "completions/_batchd"}
    for rel, text in generated.items():
        path = ROOT / rel
        assert path.exists(), f"{rel} missing: run scripts/gen-cli-reference.py"
        assert path.read_text() == text, f"{rel} is stale: run scripts/gen-cli-reference.py"


def test_reference_lists_every_command_and_option(generated):
    doc = generated["docs/commands.md"]
    for name in COMMANDS:
        assert f"`{name}`" in doc
    ref = completion.reference()
    for cmd in ref[1:]:
        for opt in cmd["options"]:
            assert opt["help"], (cmd["name"], opt["names"])
            assert ", ".join(f"`{n}`" for n in opt["names"]) in doc
    from batchd.cli import bsub, sbatch_opts

    for o in sbatch_opts.TABLE:
        assert f"`--{o.long}`" in doc
    for name in bsub.OPTIONS:
        assert f"`{name}`" in doc
    subs = [s["name"] for s in ref[0]["subcommands"]]
    from batchd.cli.main import SUBCOMMANDS

    assert set(SUBCOMMANDS) <= set(subs) and "completion" in subs


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_prints_help_and_exits_0(name):
    r = subprocess.run([str(BIN / name), "--help"], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) >= 2 and "-" in r.stdout


def _walk(cmd: dict, path: tuple[str, ...]):
    yield path
    for sub in cmd["subcommands"]:
        yield from _walk(sub, path + (sub["name"],))


def test_every_batchd_subcommand_prints_help():
    from batchd.cli.main import main

    ref = completion.batchd_reference()
    paths = list(_walk(ref, ()))
    assert len(paths) > 10
    runner = CliRunner()
    for path in paths:
        r = runner.invoke(main, [*path, "--help"])
        assert r.exit_code == 0, (path, r.output)
        assert "Usage:" in r.output


def test_completion_command_prints_the_committed_scripts():
    from batchd.cli.cmd_completion import command

    runner = CliRunner()
    for shell, rel in (("bash", "completions/batchd.bash"), ("zsh", "completions/_batchd")):
        r = runner.invoke(command, [shell])
        assert r.exit_code == 0
        assert r.output == (ROOT / rel).read_text()
    assert runner.invoke(command, ["fish"]).exit_code == 2


def _bash_complete(words: list[str]) -> list[str]:
    cur = len(words) - 1
    fn = "_batchd" if words[0] == "batchd" else f"_batchd_cmd_{words[0]}"
    arr = " ".join(f"'{w}'" for w in words)
    script = (f"source {ROOT / 'completions' / 'batchd.bash'}; COMP_WORDS=({arr}); COMP_CWORD={cur}; "
              f"{fn}; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_completes_commands_and_options():
    assert _bash_complete(["bsub", "-gp"]) == ["-gpu"]
    assert set(_bash_complete(["sbatch", "--gpus-per-"])) == {"--gpus-per-node", "--gpus-per-socket",
                                                              "--gpus-per-task"}
    assert _bash_complete(["batchd", "acc"]) == ["account"]
    assert "add" in _bash_complete(["batchd", "account", ""])
    assert _bash_complete(["batchd", "completion", ""]) == ["bash", "zsh"]
    assert set(_bash_complete(["bjobs", "-no"])) == {"-noheader"}
    assert "--me" in _bash_complete(["squeue", "--m"])


def test_zsh_script_covers_every_command(generated):
    text = generated["completions/_batchd"]
    first = text.splitlines()[0]
    assert first.split()[1:] == list(COMMANDS) and first.startswith("#compdef ")
    for name in COMMANDS[1:]:
        assert f"    {name}) _batchd_cmd_{name} ;;" in text
    if shutil.which("zsh"):
        r = subprocess.run(["zsh", "-n", str(ROOT / "completions" / "_batchd")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("group", [(), ("account",), ("node",), ("price",), ("user",), ("controller",)],
                         ids=lambda g: " ".join(("batchd", *g)))
def test_help_lists_whole_summaries(group):
    """`batchd --help` (and each subgroup's) gives every command's summary whole, wrapped
    at a narrow terminal instead of cut with "...", the same text as docs/commands.md."""
    from batchd.cli.helpfmt import summary
    from batchd.cli.main import main

    r = CliRunner().invoke(main, [*group, "--help"], terminal_width=60)
    assert r.exit_code == 0, r.output
    listing = r.output.split("Commands:", 1)[1]
    assert "..." not in listing
    squeezed = "".join(listing.split())  # wrapped lines (and a wrap after a hyphen) joined
    cmd = main
    for name in group:
        cmd = cmd.get_command(None, name)
    for name in cmd.list_commands(None):
        text = summary(cmd.get_command(None, name))
        assert "".join(f"{name} {text}".split()) in squeezed, (name, text)
