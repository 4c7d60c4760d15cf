"""pop: restore the top patch's snapshots, removing files no applied patch tracks any more.

Refused while the top patch has changes not refreshed into it; `force` discards them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import Refused, UsageError

if TYPE_CHECKING:
    from .tree import WorkTree


def pop(wt: WorkTree, target: str | None = None, *, all: bool = False, count: int | None = None, force: bool = False) -> list[str]:
    """Unapply the top patch (or until `target` is the top, `count` patches, or all)."""
    with wt.locked():
        applied = wt.consistent()
        if not applied:
            raise UsageError("No patch is applied.", hint="Nothing to pop.")
        if target is not None:
            if target not in applied:
                raise UsageError(f"Patch {target} is not applied.")
            n = len(applied) - applied.index(target) - 1
        elif all:
            n = len(applied)
        else:
            n = max(1, count or 1)
        popped: list[str] = []
        for _ in range(min(n, len(applied))):
            popped.append(pop_one(wt, applied, force))
            applied = applied[:-1]
        return popped


def pop_one(wt: WorkTree, applied: list[str], force: bool) -> str:
    """Pop applied[-1] (the caller holds the lock); returns its name."""
    top = applied[-1]
    if not force:
        from .refresh import unrefreshed

        dirty = unrefreshed(wt, top)
        if dirty:
            raise Refused(
                f"Refused: {top} has changes not refreshed into it: {', '.join(dirty)}. Nothing was changed.",
                hint="`imgquilt refresh` to keep them, or `imgquilt pop -f` to discard them.",
            )
    _, where = wt.file_index(applied)
    _, below = wt.file_index(applied[:-1])
    for t in wt.snapshot(top):
        loc = where.get(t.resolved, t.path)
        if t.resolved in below:
            data = wt.blob(t.sha256, what=f"{t.path} before {top}")
            now = wt.read_work(loc)
            if now.data != data or (data is not None and now.mode != t.mode):
                wt.files.write(loc, data, t.mode)
        else:
            wt.files.write(loc, None, None)
    wt.record.write_applied(applied[:-1])
    wt.record.drop_snapshot(top)
    return top
