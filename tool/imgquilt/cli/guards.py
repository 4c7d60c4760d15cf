"""Profiles in the work tree: `guard` (MQ's qguard: which profiles a patch is in) and `select`
(MQ's qselect: the profile push and pop follow). Parse, call imgquilt.work, render."""
from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import UsageError
from . import documents
from .common import G, emit_json, patch_names, say, say_lock, shown, tree


def _shown(guards: tuple[str, ...] | list[str]) -> str:
    return " ".join(guards) if guards else "unguarded"


def guard_cmd(
    args: Optional[List[str]] = typer.Argument(None, metavar="PATCH|+G|-G", help="The patch (default: the top) and its new guards: +G puts it only in profiles that select G, -G keeps it out of them.",
                                               autocompletion=patch_names("series")),
    list_: bool = typer.Option(False, "--list", "-l", help="List every patch with its guards."),
    none: bool = typer.Option(False, "--none", "-n", help="Remove every guard of the patch."),
    new_guard: bool = typer.Option(False, "--new-guard", help="Accept a guard no profile of targets.lock selects yet (else refused: a typo would drop the fix)."),
) -> None:
    """Show or set a patch's guards in series (as `hg qguard`): `name.patch #+glm53 #-rocm`.

    A patch without guards is in every profile; +G only in profiles that select G; -G in none that
    select G (a negative guard wins). The guards replace the patch's old ones; the rest of its line
    and every other line of series are kept. A guard no declared profile selects is refused (exit 2,
    naming the nearest one) unless --new-guard.

    \b
    Examples:
      imgquilt guard 0007-prep-fused.patch +glm53 -rocm
      imgquilt guard --list
      imgquilt guard --none 0007-prep-fused.patch
      imgquilt guard              (the top patch's guards)
    """
    args = list(args or [])
    wt = tree(guard=False) if list_ or (not none and not [a for a in args if a[:1] in "+-"]) else tree()
    if list_:
        if args or none:
            raise UsageError("--list takes no patch and no guard.")
        entries = wt.queue.entries()
        if G.json:
            emit_json(documents.guard_list_doc(entries))
            return
        for e in entries:
            say(f"{e.name}: {_shown(e.guards)}")
        return
    name = args.pop(0) if args and args[0][:1] not in "+-" else None
    if none and args:
        raise UsageError("--none removes every guard; give no guard with it.")
    if not args and not none:
        name = name or wt.need_top()
        entry = next((e for e in wt.queue.entries() if e.name == name), None)
        if entry is None:
            raise UsageError(f"Patch {name} is not in series.", hint="`imgquilt series` lists the patches.")
        if G.json:
            emit_json(documents.guard_doc(name, entry.guards, False))
            return
        say(f"{name}: {_shown(entry.guards)}")
        return
    from ..work.series_edit import set_guards

    name, old, new = set_guards(wt, name, args, new_guard=new_guard)
    if G.json:
        emit_json(documents.guard_doc(name, new, old != new, wt.lock_update, set_=True))
        return
    say(f"{name}: {_shown(new)}" + ("" if old != new else " (unchanged)"))
    say_lock(wt.lock_update)


def select_cmd(
    name: Optional[str] = typer.Argument(None, metavar="[PROFILE]", help="The profile push and pop follow (declared in targets.lock)."),
    none: bool = typer.Option(False, "--none", "-n", help="Follow the default (no profile: no guard selected)."),
    pop: bool = typer.Option(False, "--pop", help="Pop every applied patch first (else a change with patches applied is refused)."),
) -> None:
    """Show or change the profile the work tree follows (as `hg qselect`), kept in .imgquilt/state.

    push, pop, next and unapplied then walk the patches that profile's guards select, and bases
    come from that profile's pin of targets.lock. Changing it with patches applied is refused (their
    bases may be another image's): `imgquilt pop -a` first, or --pop.

    \b
    Examples:
      imgquilt select glm53
      imgquilt select             (which profile, and the patches it selects)
      imgquilt select --none --pop
    """
    if name is not None and none:
        raise UsageError("Give a profile or --none, not both.")
    wt = tree(guard=bool(name or none))
    popped: list[str] = []
    if name is not None or none:
        from ..work.series_edit import select_profile

        popped = select_profile(wt, name, pop=pop)
    elif pop:
        raise UsageError("--pop goes with a change of profile: `imgquilt select NAME --pop`.")
    current, guards, chosen, every = wt.profile(), wt.guards(), wt.selected(), wt.series()
    if G.json:
        emit_json(documents.select_doc(current, guards, chosen, every, popped))
        return
    for p in popped:
        say(f"Removing patch {p}")
    who = f"profile {current} (selects {shown(', '.join(guards)) or 'no guard'})" if current else "the default (no profile: no guard selected)"
    say(f"The work tree follows {who}: {len(chosen)} of {len(every)} patch(es).")
    for n in every:
        if n not in chosen:
            say(f"  guarded out: {n}")


COMMANDS = {"guard": guard_cmd, "select": select_cmd}
_GUARD_OPTIONS = {"--list", "-l", "--none", "-n", "--new-guard", "--help", "-h"}


def guard_argv(args: list[str]) -> list[str]:
    """`guard PATCH -rocm`: a -GUARD is a guard, not an option (MQ makes you write `--` first; here
    every word but guard's own options is an argument: click would read `-qwen` as `-q -w -e -n`)."""
    rest = args[1:]
    before, after = (rest[: rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
    words = [a for a in before if a not in _GUARD_OPTIONS] + after
    return [args[0], *[a for a in before if a in _GUARD_OPTIONS], *(["--", *words] if words else [])]
