"""A patch's name, header and place in series: header, rename, delete. Parse, call imgquilt.work, render."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError
from ..util.regular import read_regular_file
from . import listing
from . import documents
from .common import G, editor, emit_json, field_pairs, one_patch, patch_names, run_editor, say, say_lock, tree


def header_cmd(
    name: Optional[str] = typer.Argument(None, metavar="PATCH", help="A patch in series (default: the top).",
                                         autocompletion=patch_names("series")),
    patch: Optional[str] = typer.Option(None, "-P", "--patch", metavar="PATCH", help="The same as the PATCH argument.",
                                        autocompletion=patch_names("series")),
    edit: bool = typer.Option(False, "--edit", "-e", help="Edit the header in $EDITOR (or $IMGQUILT_EDITOR)."),
    set_: List[str] = typer.Option([], "--set", metavar="FIELD=VALUE", help="Set one field (repeatable); other fields are kept."),
    unset: List[str] = typer.Option([], "--unset", metavar="FIELD", help="Remove one field (repeatable)."),
) -> None:
    """Print a patch's header, or change it (the diff is left byte for byte).

    \b
    Examples:
      imgquilt header
      imgquilt header --set Status=merged 0001-port.patch
      imgquilt header -e
    """
    from ..queue.patchfile import Header
    from ..work.header import header as read_header, set_fields, set_header

    wt = tree()
    name, header = read_header(wt, one_patch(name, patch))
    before = header.raw
    if set_ or unset:
        header = set_fields(wt, name, field_pairs(set_, unset)).header
    if edit:
        cmd = editor()
        if not cmd:
            raise UsageError("No editor: set EDITOR (on a terminal) or IMGQUILT_EDITOR.", hint="Or change one field with --set FIELD=VALUE.")
        fd, tmp = tempfile.mkstemp(prefix="header-", suffix=".txt", dir=wt.scratch_dir())
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header.raw)
            run_editor(cmd, [Path(tmp)])
            edited = read_regular_file(Path(tmp), follow=False)  # a directory or a link in its place: exit 6
            if edited is None:
                raise UsageError(f"The editor ({cmd}) removed the header file it was given; nothing more was changed.",
                                 hint="Save the header in the file the editor opens, or change one field with --set FIELD=VALUE.")
            header = set_header(wt, name, Header(edited)).header
        finally:
            _remove_scratch(Path(tmp))
    listing.render_header(name, header, header.raw != before, asked=bool(set_ or unset or edit), lock=wt.lock_update)
    if not G.json:
        say_lock(wt.lock_update)


def delete_cmd(
    name: Optional[str] = typer.Argument(None, metavar="PATCH", help="The patch (default: the top; an applied top patch is popped first).",
                                         autocompletion=patch_names("series")),
    patch: Optional[str] = typer.Option(None, "-P", "--patch", metavar="PATCH", help="The same as the PATCH argument.",
                                        autocompletion=patch_names("series")),
    remove: bool = typer.Option(False, "--remove", "-r", help="Also remove patches/NAME."),
    force: bool = typer.Option(False, "--force", "-f", help="Pop even with changes not refreshed."),
) -> None:
    """Remove a patch from series (the file stays unless -r).

    \b
    Example:
      imgquilt delete -r 0004-experiment.patch
    """
    from ..work.series_edit import delete

    wt = tree()
    gone = delete(wt, one_patch(name, patch), remove=remove, force=force)
    if G.json:
        emit_json(documents.delete_doc(gone, remove, wt.top(), wt.lock_update))
        return
    say(f"Removed patch {gone} from series" + (" and deleted its file." if remove else f" (patches/{gone} is kept; -r removes it)."))
    say_lock(wt.lock_update)


def rename_cmd(
    names: List[str] = typer.Argument(..., metavar="[PATCH] NEW_NAME", help="The patch to rename (default: the top) and its new name.",
                                      autocompletion=patch_names("series")),
    patch: Optional[str] = typer.Option(None, "-P", "--patch", metavar="PATCH", help="The same as the PATCH argument.",
                                        autocompletion=patch_names("series")),
) -> None:
    """Rename a patch: its file, its series line, its work-tree state and Requires: in other patches.

    targets.lock follows in the same transaction.

    \b
    Examples:
      imgquilt rename 0003-x.patch 0003-fix-port.patch
      imgquilt rename 0003-fix-port.patch            (the top patch)
    """
    if len(names) > 2:
        raise UsageError(f"rename takes PATCH and NEW_NAME, not {len(names)} names.", hint="imgquilt rename OLD.patch NEW.patch")
    new_name = names[-1]
    patch = one_patch(names[0] if len(names) == 2 else None, patch)
    from ..work.series_edit import rename

    wt = tree()
    old, touched = rename(wt, new_name, patch)
    if G.json:
        emit_json(documents.rename_doc(old, new_name, touched, wt.lock_update))
        return
    say(f"Patch {old} renamed to {new_name}.")
    for t in touched:
        say(f"  updated Requires: in {t}")
    say_lock(wt.lock_update)


def move_cmd(
    name: str = typer.Argument(..., metavar="PATCH", help="The patch to move.", autocompletion=patch_names("series")),
    after: Optional[str] = typer.Option(None, "--after", metavar="PATCH", help="Put it right after this patch.",
                                        autocompletion=patch_names("series")),
    before: Optional[str] = typer.Option(None, "--before", metavar="PATCH", help="Put it right before this patch.",
                                         autocompletion=patch_names("series")),
    top: bool = typer.Option(False, "--top", help="Put it right after the top patch and push it: it becomes the top."),
    no_python_check: bool = typer.Option(False, "--no-python-check", help="Skip the Python check of the reordered series."),
) -> None:
    """Move a patch in series, re-chaining hashes as `refresh --rehash` does (MQ's qpush --move, StGit's float/sink).

    The patches that change order against it are carried onto what is below them now (hunks placed
    where their lines are, hashes re-pinned), the patches after them re-chained; the new series is
    verified as `lock` does and targets.lock rewritten. A hunk that fits nowhere stops it (exit 3)
    with nothing written. Applied patches stay applied up to the old top (the moved patch too when it
    lands below it, or with --top); the work tree follows. All one transaction.

    \b
    Examples:
      imgquilt move 0005-hotfix.patch --before 0002-feature.patch
      imgquilt move 0002-feature.patch --top
    """
    from ..work.series_edit import move
    from .apply import python_check_named

    wt = tree()
    with python_check_named(f"move {name}"):
        m = move(wt, name, after=after, before=before, top=top, python_check=not no_python_check)
    if G.json:
        emit_json(documents.move_doc(m, wt.root / "targets.lock", wt.top()))
        return
    say(f"Moved {m.name} " + (f"after {m.after}." if m.after else "to the start of series."))
    for n in m.rechained:
        say(f"  re-chained {n}")
    if m.lock:
        say(f"Wrote {wt.root / 'targets.lock'}.")
    say(f"Now at {m.applied[-1]}." if m.applied else "No patch is applied.")


COMMANDS = {"header": header_cmd, "delete": delete_cmd, "rename": rename_cmd, "move": move_cmd}


def _remove_scratch(path: Path) -> None:
    """The editor's temp file, or whatever the editor left in its place (in .imgquilt/state: ours)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
