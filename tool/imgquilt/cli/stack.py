"""The applied stack: push, pop, top, applied, unapplied, series. Parse, call imgquilt.work, render."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import typer

from ..errors import ImgquiltError
from . import listing
from . import documents
from .common import G, ImageOpt, PlatformOpt, emit_json, emit_outcome, note, one_patch, patch_names, say, shown, tree

if TYPE_CHECKING:
    from ..work import WorkTree


def _target(arg: str | None, wt: WorkTree) -> tuple[str | None, int | None]:
    if arg is None:
        return None, None
    if arg.isdigit() and arg not in wt.series():
        return None, int(arg)
    return arg, None


def push_cmd(
    target: Optional[str] = typer.Argument(None, metavar="PATCH|N", help="Push up to and including this patch, or this many patches.",
                                           autocompletion=patch_names("unapplied")),
    patch: Optional[str] = typer.Option(None, "-P", "--patch", metavar="PATCH", help="The same as the PATCH argument.",
                                        autocompletion=patch_names("unapplied")),
    all: bool = typer.Option(False, "--all", "-a", help="Push every patch."),
    image: Optional[str] = ImageOpt,
    platform: Optional[str] = PlatformOpt,
) -> None:
    """Apply the next patch(es) onto the work tree, verifying every base and result sha256.

    A base that drifted is refused (exit 3); nothing is written for that patch.

    \b
    Examples:
      imgquilt push
      imgquilt push -a
      imgquilt push 0003-fix-port.patch
      imgquilt push 2
    """
    from ..work.push import push

    wt = tree(image, platform)
    name, count = _target(one_patch(target, patch), wt)
    try:
        done = push(wt, name, all=all, count=count)
    except ImgquiltError as exc:
        pushed = getattr(exc, "pushed", [])
        if G.json:  # the patches before the refused one stay applied: say which
            emit_outcome(documents.push_doc(pushed, wt.top()), exc)
        for p in pushed:
            note(f"Applied patch {p.name}.")
        raise
    if G.json:
        emit_json(documents.push_doc(done, wt.top()))
        return
    for p in done:
        say(f"Applying patch {p.name}")
        for f in p.files:
            say(f"  patched {shown(f)}")
    say(f"Now at patch {wt.top()}")


def pop_cmd(
    target: Optional[str] = typer.Argument(None, metavar="PATCH|N", help="Pop until this patch is the top, or this many patches.",
                                           autocompletion=patch_names("applied")),
    patch: Optional[str] = typer.Option(None, "-P", "--patch", metavar="PATCH", help="The same as the PATCH argument.",
                                        autocompletion=patch_names("applied")),
    all: bool = typer.Option(False, "--all", "-a", help="Pop every patch."),
    force: bool = typer.Option(False, "--force", "-f", help="Discard changes not refreshed into the top patch."),
) -> None:
    """Unapply the top patch(es): restore the snapshots in the work tree.

    Refused while the top patch has changes not refreshed into it (exit 3), unless -f.

    \b
    Examples:
      imgquilt pop
      imgquilt pop -a
      imgquilt pop 0001-port.patch
    """
    from ..work.pop import pop

    wt = tree()
    name, count = _target(one_patch(target, patch), wt)
    popped = pop(wt, name, all=all, count=count, force=force)
    top = wt.top()
    if G.json:
        emit_json(documents.pop_doc(popped, top))
        return
    for p in popped:
        say(f"Removing patch {p}")
    say(f"Now at patch {top}" if top else "No patches applied")


def series_cmd(verbose: bool = typer.Option(False, "--verbose", "-v", help="Mark applied patches (+), the top (=) and the patches guards keep out of the selection (G).")) -> None:
    """List the series.

    \b
    Example:
      imgquilt series -v
    """
    listing.series(verbose)


top_cmd, applied_cmd, unapplied_cmd = listing.top_cmd, listing.applied_cmd, listing.unapplied_cmd
next_cmd, previous_cmd = listing.next_cmd, listing.previous_cmd

COMMANDS = {"push": push_cmd, "pop": pop_cmd, "top": top_cmd, "applied": applied_cmd, "unapplied": unapplied_cmd, "series": series_cmd, "next": next_cmd,
            "previous": previous_cmd}
