"""`cache`: the shared cache's size (`imgquilt cache`) and emptying it (`imgquilt cache prune`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from .common import G, emit_json, say
from .documents import cache_doc, cache_pruned_doc

if TYPE_CHECKING:  # the cache package loads on use, as every core module does (see common.py)
    pass

cache_app = typer.Typer(no_args_is_help=False, add_completion=False, rich_markup_mode=None,
                        context_settings={"help_option_names": ["-h", "--help"]},
                        help="The shared cache of manifests, configs and layer indexes (IMGQUILT_CACHE_DIR, "
                             "else $XDG_CACHE_HOME/imgquilt, else ~/.cache/imgquilt).")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


@cache_app.callback(invoke_without_command=True)
def cache_cmd(ctx: typer.Context) -> None:
    """Show where the cache is, how big it is (per part) and its cap (IMGQUILT_CACHE_MAX, default 20G).

    Examples:

      imgquilt cache

      imgquilt cache prune
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..cache.usage import report

    r = report()
    if G.json:
        emit_json(cache_doc(r))
        return
    cap = _size(r.cap) if r.cap else "no cap"
    say(f"{r.root}: {_size(r.total.bytes)} in {r.total.entries} entries (cap {cap}).")
    for name, u in r.parts.items():
        say(f"  {name}: {_size(u.bytes)} in {u.entries} entries")


@cache_app.command("prune")
def prune_cmd() -> None:
    """Empty the cache of imgquilt's entries (everything in it can be fetched or computed again); other files in it stay."""
    from ..cache.usage import prune, report

    removed = prune()
    if G.json:
        emit_json(cache_pruned_doc(removed, report().root))
        return
    say(f"Removed {removed.entries} entries ({_size(removed.bytes)}).")


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
