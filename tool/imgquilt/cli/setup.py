"""Starting out: `init` (make a queue here) and `completion` (a shell completion script)."""
from __future__ import annotations

from enum import Enum

import typer

from ..settings import COMPLETE_VAR, current
from .common import G, emit_json, say


def init_cmd() -> None:
    """Make a queue here (or in --queue DIR): series, patches/ and a .gitignore for .imgquilt/.

    The .gitignore keeps imgquilt's own .imgquilt/ (work tree, cache, object store) out of git.

    Existing files are kept; only what is missing is created.

    \b
    Example:
      mkdir my-fixes && cd my-fixes && imgquilt init && git init
    """
    from pathlib import Path

    from ..verbs.init import init_queue

    done = init_queue(Path(current().queue or "."))  # --queue, else IMGQUILT_QUEUE
    root, created = done.root, list(done.created)
    if G.json:
        from .documents import init_doc

        emit_json(init_doc(root, created))
        return
    if created:
        say(f"Initialized a queue in {root} ({', '.join(created)}).")
    else:
        say(f"{root} is already a queue; nothing to create.")
    say("Next: `imgquilt new NAME.patch`, then `imgquilt add PATH --image REF`.")


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def completion_cmd(shell: Shell = typer.Argument(..., metavar="bash|zsh|fish", help="The shell to complete in.")) -> None:
    """Print a shell completion script for commands and options.

    \b
    Examples:
      imgquilt completion bash > ~/.local/share/bash-completion/completions/imgquilt
      imgquilt completion zsh > "${fpath[1]}/_imgquilt"
      imgquilt completion fish > ~/.config/fish/completions/imgquilt.fish
    """
    from typer.completion import completion_init, get_completion_script

    completion_init()
    say(get_completion_script(prog_name="imgquilt", complete_var=COMPLETE_VAR, shell=shell.value))


COMMANDS = {"init": init_cmd, "completion": completion_cmd}
