"""Finding the `git` executable, before any verb that needs it writes anything."""
from __future__ import annotations

import shutil

from ..errors import GitMissing


def require_git(what: str) -> str:
    """The path of `git`, or GitMissing (exit 6) naming the verb that needs it."""
    found = shutil.which("git")
    if found is None:
        raise GitMissing(
            f"{what} needs git, which is not on PATH; nothing was changed.",
            hint="Install git (e.g. `apt-get install git`) or put it on PATH, then run the command again.",
        )
    return found
