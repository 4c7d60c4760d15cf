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
