"""add and fold: bring files into the top patch's snapshot; their changes then need a refresh.

The first time a path is needed its current content is its base: the work copy when an applied
patch tracks the file (under any name), else the image's (see bases.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import MissingTarget, UsageError
from ..fs.paths import check_member_path
from ..importer import Base, apply_foreign, parse_foreign
from .files import FileState
from .state import one_name_per_file

if TYPE_CHECKING:
    from .tree import WorkTree


def add(wt: WorkTree, paths: list[str], *, new: bool = False) -> tuple[str, list[str], list[str]]:
    """Track files in the top patch: snapshot their current content. Returns (top, added, already).

    A path that is neither in the image nor made by an applied patch is most often a typo: it is
    refused unless `new` says the patch creates that file."""
    with wt.locked():
        applied = wt.consistent()
        top = wt.need_top()
        norm = list(dict.fromkeys(check_member_path(p, what="file to add") for p in paths))
        snap = wt.snapshot(top)
        have = {t.path for t in snap}
        fresh = [p for p in norm if p not in have]
        cur = wt.current(fresh, applied)
        absent = [p for p in fresh if cur[p].data is None]
        if absent and not new:
            raise MissingTarget(
                f"{', '.join(absent)}: not in the image, and no applied patch creates {'it' if len(absent) == 1 else 'them'}; "
                "nothing was added.",
                hint="Check the path (the one inside the image, as the patches name it); to create a new file there, "
                     f"`imgquilt add --new {' '.join(absent)}`.",
            )
        one_name_per_file(top, snap, {p: cur[p] for p in fresh})
        _, where = wt.file_index(applied)
        for p in fresh:
            st = cur[p]
            snap.append(wt.track(p, st))
            if st.resolved in where:
                continue  # an applied patch tracks this file already: its work copy is in place
            if st.data is not None:
                wt.files.write(p, st.data, st.mode)
            else:
                wt.files.make_parents(p)  # so the new file can be created right there
        wt.record.write_snapshot(top, snap)
        return top, fresh, [p for p in norm if p in have]


def fold(wt: WorkTree, data: bytes, *, strip: int = 1, source: str = "<stdin>", check_git_index: bool = True) -> tuple[str, list[str], list[str]]:
    """Apply a plain patch to the top patch's files (adding them); the patch then needs a refresh."""
    with wt.locked():
        applied = wt.consistent()
        top = wt.need_top()
        fp = parse_foreign(data, source)
        cache: dict[str, FileState] = {}

        def read(path: str, _follow: bool) -> Base:
            # the work tree's view: a path through a link is the file it leads to, as the queue's own sections read it
            if path not in cache:
                cache.update(wt.current([path], applied))
            return Base(cache[path].data, cache[path].mode)

        if any(f.link for f in fp.files):
            raise UsageError(f"{source} changes a symlink (git mode 120000); the work tree holds regular files only.",
                             hint="Bring it in with `imgquilt import` (then `imgquilt apply` writes the link).")
        conv = apply_foreign(fp, strip, read, label=source, git_index="check" if check_git_index else "ignore")
        snap = wt.snapshot(top)
        have = {t.path for t in snap}
        changed = {c.path for c in conv.changes}
        fresh = {p: st for p, st in cache.items() if p in changed and p not in have}
        one_name_per_file(top, snap, fresh)
        snap += [wt.track(path, st) for path, st in fresh.items()]
        _, where = wt.file_index(applied)
        wt.record.write_snapshot(top, snap)
        for c in conv.changes:
            st = cache[c.path]
            mode = c.mode_change[1] if c.mode_change else st.mode if st.mode is not None else (c.mode or 0o644)
            wt.files.write(where.get(st.resolved or c.path, c.path), c.result, mode)
        return top, [c.path for c in conv.changes], conv.notes
