"""new, delete and rename: the commands that change which patches series lists.

`new` (like import) inserts after the top patch, at the start of series when none is applied, as
quilt does. Each writes what it changes (patch files, series, the work tree's state) and the
targets.lock that follows as one transaction (work.relock.commit): all or nothing under kill -9.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import BadInput, UsageError
from ..queue.interrupted import Change
from ..queue.patchfile import Header, Patch, renamed, with_header
from .patchtext import check_header, check_patch_name
from .pop import pop_one
from .relock import commit
from .staged import Staged

if TYPE_CHECKING:
    from .tree import WorkTree


def new(wt: WorkTree, name: str, header: Header) -> Patch:
    """Create patches/NAME (header only), insert it after the top patch and make it the top."""
    check_patch_name(name)
    with wt.locked():
        applied = wt.consistent()
        if name in wt.series():
            raise UsageError(f"Patch {name} is already in series.", hint="Pick another name.")
        if wt.queue.exists(name):
            raise UsageError(f"patches/{name} already exists (not in series).", hint="Import it with `imgquilt import`, or pick another name.")
        raw = check_header(header.raw, name).raw
        patch = Patch(name, Header(raw), (), raw)
        series = wt.queue.inserted([name], applied[-1] if applied else None)
        staged = Staged(wt, {name: patch})
        staged.tree.record.write_snapshot(name, [])
        staged.tree.record.write_applied(applied + [name])
        changes = [Change(f"patches/{name}", raw), *staged.changes(), Change("series", series)]
        commit(wt, "new", changes, series=series, patches={name: patch})
        return patch


def delete(wt: WorkTree, name: str | None = None, *, remove: bool = False, force: bool = False) -> str:
    """Remove a patch (the top by default) from series, popping it first when it is the applied top."""
    with wt.locked():
        applied = wt.consistent()
        name = name or wt.need_top()
        if name not in wt.series():
            raise UsageError(f"Patch {name} is not in series.")
        staged = Staged(wt, {})
        if name in applied:
            if name != applied[-1]:
                raise UsageError(f"Patch {name} is applied below the top.", hint=f"Pop to it first: `imgquilt pop {name}`, then `imgquilt pop`.")
            pop_one(staged.tree, applied, force)
        series = wt.queue.removed(name)
        changes = [*staged.changes(), *([Change(f"patches/{name}", None)] if remove else []), Change("series", series)]
        commit(wt, "delete", changes, series=series, patches={name: None})
        return name


def rename(wt: WorkTree, new: str, old: str | None = None) -> tuple[str, list[str]]:
    """Rename a patch everywhere: patches/, series, the applied state and other patches' Requires."""
    check_patch_name(new)
    with wt.locked():
        applied = wt.consistent()
        old = old or wt.need_top()
        names = wt.series()
        if old not in names:
            raise UsageError(f"Patch {old} is not in series.")
        if new in names or wt.queue.exists(new):
            raise UsageError(f"Patch {new} already exists.", hint="Pick another name.")
        moved = renamed(wt.read_patch(old), new)
        series = wt.queue.renamed(old, new)
        staged = Staged(wt, {})
        if old in applied:
            staged.tree.record.write_snapshot(new, wt.snapshot(old))
            staged.tree.record.drop_snapshot(old)
            staged.tree.record.write_applied([new if n == old else n for n in applied])
        rewritten: dict[str, Patch | None] = {new: moved, old: None}
        touched = []
        token = re.compile(r"(?<![^\s,])" + re.escape(old) + r"(?![^\s,])")
        for other in names:
            if other == old:
                continue
            try:
                p = wt.read_patch(other)
            except BadInput:
                continue
            if old in p.header.requires:
                value = token.sub(new, p.header.get("Requires") or "")
                rewritten[other] = with_header(p, p.header.with_field("Requires", value))
                touched.append(other)
        # the new file first, the old one gone, the Requires: lines, the state, then series (and the lock)
        changes = [Change(f"patches/{new}", moved.raw), Change(f"patches/{old}", None),
                   *(Change(f"patches/{n}", rewritten[n].raw) for n in touched),  # type: ignore[union-attr]
                   *staged.changes(), Change("series", series)]
        commit(wt, "rename", changes, series=series, patches=rewritten)
        return old, touched


def set_guards(wt: WorkTree, name: str | None, guards: list[str]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """Replace the guards of a patch (the top by default) in series, as `hg qguard` does: (name, old
    guards, new guards). The rest of its line and every other line are kept. Refused when the change
    would take an applied patch out of the work tree's selection (pop it first)."""
    from ..queue.series import check_guard, parse_series, selected_entries

    for g in guards:
        check_guard(g)
    with wt.locked():
        applied = wt.consistent()
        name = name or wt.need_top()
        entries = wt.queue.entries()
        entry = next((e for e in entries if e.name == name), None)
        if entry is None:
            raise UsageError(f"Patch {name} is not in series.", hint="`imgquilt series` lists the patches.")
        new_guards = tuple(dict.fromkeys(guards))
        if new_guards == entry.guards:
            return name, entry.guards, new_guards
        data = wt.queue.guarded(name, list(new_guards))
        after = [e.name for e in selected_entries(parse_series(data), wt.guards())]
        if after[: len(applied)] != applied:
            raise UsageError(f"Patch {name} is applied (or an applied patch follows it): these guards would change which "
                             "patches the work tree's selection applies under it.",
                             hint=f"`imgquilt pop {name}` and `imgquilt pop` first, then set the guards.")
        commit(wt, "guard", [Change("series", data)], series=data)  # series and the pins that follow, as one
        return name, entry.guards, new_guards


def select_profile(wt: WorkTree, name: str | None, *, pop: bool = False) -> list[str]:
    """Make the work tree follow profile `name` (None: the default): push and pop walk the patches its
    guards select, and bases come from its pin. With patches applied it is refused (their bases may
    be another image's), unless `pop`: then they are popped first (refused, as pop is, when the top
    has changes not refreshed). Returns the patches popped."""
    with wt.locked():
        if name is not None:
            _declared(wt, name)
        applied = wt.consistent() if wt.applied() else []
        if applied and name != wt.profile():
            if not pop:
                raise UsageError(f"{len(applied)} patch(es) are applied ({', '.join(applied)}); their bases are "
                                 f"{'profile ' + wt.profile() if wt.profile() else 'the default pin'}'s.",
                                 hint="`imgquilt pop -a` first (refresh what you want to keep), or `imgquilt select NAME --pop`.")
        popped: list[str] = []
        if name != wt.profile():
            while applied:
                popped.append(pop_one(wt, applied, False))
                applied = applied[:-1]
        wt.record.write_profile(name)
        return popped


def _declared(wt: WorkTree, name: str) -> None:
    from ..queue.lock import read_lock_file

    lf = read_lock_file(wt.root / "targets.lock")
    if lf.profile(name) is None:
        known = ", ".join(lf.names) or "none"
        raise UsageError(f"Unknown profile {name!r}: targets.lock declares {known}.",
                         hint=f"Declare it with `imgquilt lock --profile {name} --image REF [--select GUARD,...]`.")
