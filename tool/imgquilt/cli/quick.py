"""The quick commands, straight from argv without typer (importing typer alone takes ~0.1 s, most of
the 0.12 s start-up goal): only the exact plain forms below. Anything else, help and errors
included, goes through the typer app, so what those print stays typer's."""
from __future__ import annotations

from typing import Any, Callable


def quick(args: list[str]) -> Callable[[], Any] | None:
    """The call that runs args (global options already hoisted out), or None for typer."""
    if args == ["--version"]:
        return _version
    from . import listing

    plain: dict[tuple[str, ...], Callable[[], Any]] = {
        ("top",): listing.top_cmd, ("applied",): listing.applied_cmd, ("unapplied",): listing.unapplied_cmd,
        ("next",): listing.next_cmd, ("previous",): listing.previous_cmd,
        ("series",): lambda: listing.series(False), ("series", "-v"): lambda: listing.series(True),
        ("series", "--verbose"): lambda: listing.series(True),
        ("check",): lambda: listing.check(None, None, listing.Format.text),
    }
    if args[:1] == ["header"] and len(args) <= 2 and not any(a.startswith("-") for a in args[1:]):
        return lambda: listing.show_header(args[1] if len(args) == 2 else None)
    return plain.get(tuple(args))


def _version() -> None:
    from .. import __version__

    print(f"imgquilt {__version__}")
