"""Whether a rebase owns the queue, and the refusal of a verb that would change it meanwhile.

Here, below the rebase package (which imports the verbs), so that a verb, the work tree's import
included, can refuse to work during a rebase without importing the rebase back (rebase.state
re-exports `rebase_in_progress`)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError


def rebase_in_progress(root: Path) -> bool:
    """Is a rebase stopped (or interrupted) in the queue at `root`: is its journal, .imgquilt/rebase/state.json, there?"""
    from ..util.statedir import StateDir

    return StateDir(root, "rebase").is_file("state.json")


def refuse_during_rebase(root: Path) -> None:
    """A stopped rebase owns series, patches/ and the work tree until --continue or --abort."""
    if rebase_in_progress(root):
        raise UsageError(
            "A rebase is in progress in this queue.",
            hint="See the conflicts with `imgquilt rebase --status`; resolve them, then `imgquilt rebase --continue`, "
            "or give up with `imgquilt rebase --abort`.",
        )
