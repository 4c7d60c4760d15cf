"""The files of a patch: files, remove, revert. Parse, call imgquilt.work, render."""
from __future__ import annotations

from typing import List, Optional

import typer

from ..queue.pathquote import quote_name
from . import documents
from .common import G, emit_json, one_patch, patch_names, say, say_lock, shown, tree


def files_cmd(name: Optional[str] = typer.Argument(None, metavar="PATCH", help="A patch in series (default: the top).",
                                                  autocompletion=patch_names("series")),
              patch: Optional[str] = typer.Option(None, "-P", "--patch", metavar="PATCH", help="The same as the PATCH argument.",
                                                  autocompletion=patch_names("series"))) -> None:
    """List the files a patch touches (while applied: every file it tracks).

    \b
    Examples:
      imgquilt files
      imgquilt files 0003-app-config-longer-timeouts.patch
    """
    from ..work.unrefreshed import files

    name, paths = files(tree(guard=False), one_patch(name, patch))
    if G.json:
        emit_json(documents.files_doc(name, paths))
        return
    for p in paths:  # one per line: a name holding a newline or tab is C-quoted, as `git ls-files` does
        say(quote_name(p).decode("utf-8", "surrogateescape"))


def _each(paths: list[str], top: str, hit: list[str], doc: dict, yes: str, no: str) -> None:
    """One line per named file: `yes` for the ones the verb acted on, `no` for the others (`doc`: the --json document)."""
    if G.json:
        emit_json(doc)
        return
    for p in dict.fromkeys(paths):
        say((yes if p in hit else no).format(path=shown(p), top=top))


def remove_cmd(paths: List[str] = typer.Argument(..., metavar="FILE", help="Image paths the top patch tracks.")) -> None:
    """Untrack files from the top patch: restore them as they were before it and drop their sections.

    \b
    Example:
      imgquilt remove etc/svc.conf
    """
    from ..work.unrefreshed import remove

    wt = tree()
    top, dropped = remove(wt, paths)
    _each(paths, top, dropped, documents.remove_doc(top, paths, dropped, wt.lock_update),
          "File {path} removed from patch {top} (its section left the patch file).", "File {path} removed from patch {top}.")
    if not G.json:
        say_lock(wt.lock_update)


def revert_cmd(paths: List[str] = typer.Argument(..., metavar="FILE", help="Image paths the top patch tracks.")) -> None:
    """Discard changes not refreshed into the top patch: put the files back to what the patch file says.

    \b
    Example:
      imgquilt revert etc/svc.conf
    """
    from ..work.unrefreshed import revert

    top, changed = revert(tree(), paths)
    _each(paths, top, changed, documents.revert_doc(top, changed),
          "Changes to {path} in patch {top} reverted.", "File {path} in patch {top} has no changes to revert.")


COMMANDS = {"files": files_cmd, "remove": remove_cmd, "revert": revert_cmd}
