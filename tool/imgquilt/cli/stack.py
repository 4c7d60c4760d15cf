"""The applied stack: push, pop, top, applied, unapplied, series. Parse, call imgquilt.work, render."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import typer

from ..errors import ImgquiltError, UsageError
from .common import G, ImageOpt, PlatformOpt, emit_json, emit_outcome, note, say, tree

if TYPE_CHECKING:
    from ..work import WorkTree


def _target(arg: str | None, wt: WorkTree) -> tuple[str | None, int | None]:
    if arg is None:
        return None, None
    if arg.isdigit() and arg not in wt.series():
        return None, int(arg)
    return arg, None


def push_cmd(
    target: Optional[str] = typer.Argument(None, metavar="PATCH|N", help="Push up to and including this patch, or this many patches."),
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
    wt = tree(image, platform)
    name, count = _target(target, wt)
    try:
        done = wt.push(name, all=all, count=count)
    except ImgquiltError as exc:
        pushed = getattr(exc, "pushed", [])
        if G.json:  # the patches before the refused one stay applied: say which
            emit_outcome({"pushed": [p.name for p in pushed], "files": {p.name: list(p.files) for p in pushed}, "top": wt.top()}, exc)
        for p in pushed:
            note(f"Applied patch {p.name}.")
        raise
    if G.json:
        emit_json({"pushed": [p.name for p in done], "files": {p.name: list(p.files) for p in done}, "top": wt.top()})
        return
    for p in done:
        say(f"Applying patch {p.name}")
        for f in p.files:
            say(f"  patched {f}")
    say(f"Now at patch {wt.top()}")


def pop_cmd(
    target: Optional[str] = typer.Argument(None, metavar="PATCH|N", help="Pop until this patch is the top, or this many patches."),
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
    wt = tree()
    name, count = _target(target, wt)
    popped = wt.pop(name, all=all, count=count, force=force)
    top = wt.top()
    if G.json:
        emit_json({"popped": popped, "top": top})
        return
    for p in popped:
        say(f"Removing patch {p}")
    say(f"Now at patch {top}" if top else "No patches applied")


def top_cmd() -> None:
    """Print the top applied patch.

    \b
    Example:
      imgquilt top
    """
    wt = tree(guard=False)
    top = wt.top()
    if G.json:
        emit_json({"top": top})
        return
    if top is None:
        raise UsageError("No patches applied.")
    say(top)


def _neighbour(key: str, name: str | None, none: str) -> None:
    if G.json:
        emit_json({key: name})
        return
    if name is None:
        raise UsageError(none)
    say(name)


def next_cmd() -> None:
    """Print the next patch to push.

    \b
    Example:
      imgquilt next
    """
    _neighbour("next", tree(guard=False).next(), "No next patch: every patch is applied.")


def previous_cmd() -> None:
    """Print the patch below the top one.

    \b
    Example:
      imgquilt previous
    """
    _neighbour("previous", tree(guard=False).previous(), "No previous patch: fewer than two patches are applied.")


def _names(key: str, names: list[str]) -> None:
    if G.json:
        emit_json({key: names})
        return
    for n in names:
        say(n)


def applied_cmd() -> None:
    """List the applied patches, bottom first.

    \b
    Example:
      imgquilt applied --json
    """
    _names("applied", tree(guard=False).applied())


def unapplied_cmd() -> None:
    """List the patches not applied yet, next first.

    \b
    Example:
      imgquilt unapplied
    """
    _names("unapplied", tree(guard=False).unapplied())


def series_cmd(verbose: bool = typer.Option(False, "--verbose", "-v", help="Mark applied patches (+) and the top (=).")) -> None:
    """List the series.

    \b
    Example:
      imgquilt series -v
    """
    wt = tree(guard=False)
    names, applied = wt.series(), wt.applied()
    if G.json:
        emit_json({"series": names, "applied": applied, "top": applied[-1] if applied else None})
        return
    for n in names:
        if not verbose:
            say(n)
            continue
        mark = "=" if applied and n == applied[-1] else ("+" if n in applied else " ")
        say(f"{mark} {n}")


COMMANDS = {"push": push_cmd, "pop": pop_cmd, "top": top_cmd, "applied": applied_cmd, "unapplied": unapplied_cmd, "series": series_cmd, "next": next_cmd,
            "previous": previous_cmd}
