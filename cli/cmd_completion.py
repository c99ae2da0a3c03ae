"""`batchd completion bash|zsh`: print the shell completion script for batchd and its
Slurm/LSF commands (the same text as the committed completions/ files)."""

import click


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh"]))
def command(shell):
    """Print the bash or zsh completion script for batchd, the Slurm-named commands and
    bsub/bjobs/bkill.

    \b
    bash: eval "$(batchd completion bash)"  (or copy it to /usr/share/bash-completion/completions/)
    zsh:  batchd completion zsh > "${fpath[1]}/_batchd"; compinit
    """
    from batchd.cli import completion

    text = completion.bash_script() if shell == "bash" else completion.zsh_script()
    click.echo(text, nl=False)
