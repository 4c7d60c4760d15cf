"""What the top patch has not refreshed yet, and the verbs that act on single files of it:
`diff -z` (shows it), `revert FILE` (discards it), `remove FILE` (untracks the file altogether).

"Refreshed" content is what the patch file says: the snapshot with the patch's section applied.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..engine.apply import HunkError, apply_hunks
from ..errors import MalformedPatch, UsageError
from ..fs.paths import check_member_path
from ..queue.hunks import sha256_hex
from ..queue.patchfile import FileSection, Patch, build_patch, make_section
from .files import FileState
from .refresh import after
from .state import Tracked

if TYPE_CHECKING:
    from .tree import WorkTree


def refreshed(wt: WorkTree, name: str, t: Tracked, section: FileSection | None) -> FileState:
    """The content of t's file as patch `name`'s file says it is after the patch."""
    before = wt.blob(t.sha256, what=f"{t.path} before {name}")
    if section is None:
        return FileState(before, t.mode, t.resolved)
    if sha256_hex(before) != section.base_sha256:
        raise MalformedPatch(
            f"patches/{name}: the section for {t.path} has base {section.base_sha256[:12]}, but the work tree's "
            f"snapshot is {sha256_hex(before)[:12]} (was the patch file edited while applied?).",
            hint="Pop it with `imgquilt pop -f` and push it again.",
        )
    try:
        data = None if section.is_delete else apply_hunks(before or b"", section.hunks)
    except HunkError as exc:
        raise MalformedPatch(f"patches/{name}: the section for {t.path} does not apply to its snapshot: {exc}.") from None
    mode = section.mode if section.is_new and section.mode is not None else (t.mode if t.mode is not None else 0o644)
    return FileState(data, mode, t.resolved)


def _tracked(wt: WorkTree, name: str, paths: list[str]) -> list[Tracked]:
    by_path = {t.path: t for t in wt.snapshot(name)}
    norm = list(dict.fromkeys(check_member_path(p, what="file") for p in paths))
    missing = [p for p in norm if p not in by_path]
    if missing:
        raise UsageError(f"Patch {name} does not track {', '.join(missing)}.", hint=f"`imgquilt files {name}` lists what it tracks.")
    return [by_path[p] for p in norm]


def diff_unrefreshed(wt: WorkTree, name: str | None = None) -> Patch:
    """The changes not refreshed into the patch (the top by default): refreshed -> current bytes."""
    applied = wt.consistent()
    name = name or wt.need_top()
    if name not in applied:
        raise UsageError(f"Patch {name} is not applied.", hint=f"`imgquilt push {name}` first.")
    patch = wt.read_patch(name)
    by_section = {s.path: s for s in patch.sections}
    index = applied.index(name)
    sections = []
    for t in wt.snapshot(name):
        want = refreshed(wt, name, t, by_section.get(t.path))
        now = after(wt, applied, index, t)
        if sha256_hex(want.data) != sha256_hex(now.data):
            sections.append(make_section(t.path, want.data, now.data))
    return build_patch(name, patch.header, sections)


def revert(wt: WorkTree, paths: list[str]) -> tuple[str, list[str]]:
    """Put the top patch's files back to what its patch file says. Returns (top, paths reverted)."""
    with wt.locked():
        wt.consistent()
        top = wt.need_top()
        by_section = {s.path: s for s in wt.read_patch(top).sections}
        changed = []
        for t in _tracked(wt, top, paths):
            want = refreshed(wt, top, t, by_section.get(t.path))
            loc = wt.location(t.path)
            now = wt.read_work(loc)
            if now.data != want.data or (want.data is not None and now.mode != want.mode):
                wt.files.write(loc, want.data, want.mode)
                changed.append(t.path)
        return top, changed


def remove(wt: WorkTree, paths: list[str]) -> tuple[str, list[str]]:
    """Untrack files from the top patch: restore them as they were before it, drop their sections.

    Returns (top, the paths whose section left the patch file).
    """
    from ..queue.interrupted import Change
    from .relock import commit
    from .staged import Staged

    with wt.locked():
        applied = wt.consistent()
        top = wt.need_top()
        gone = _tracked(wt, top, paths)
        _, where = wt.file_index(applied)
        _, below = wt.file_index(applied[:-1])
        staged = Staged(wt, {})  # the work copies, the snapshot, the patch file and the lock: one transaction
        for t in gone:
            loc = where.get(t.resolved, t.path)
            if t.resolved in below:  # a lower patch tracks the file: its content before the top comes back
                staged.tree.files.write(loc, wt.blob(t.sha256, what=f"{t.path} before {top}"), t.mode)
            else:
                staged.tree.files.write(loc, None, None)
        names = {t.path for t in gone}
        staged.tree.record.write_snapshot(top, [t for t in wt.snapshot(top) if t.path not in names])
        patch = wt.read_patch(top)
        kept = [s for s in patch.sections if s.path not in names]
        changes = staged.changes()
        if len(kept) != len(patch.sections):
            new = build_patch(top, patch.header, kept)
            commit(wt, "remove", changes + [Change(f"patches/{top}", new.raw)], patches={top: new})
        else:
            commit(wt, "remove", changes)
        return top, sorted(names & {s.path for s in patch.sections})


def files(wt: WorkTree, name: str | None = None) -> tuple[str, list[str]]:
    """The files a patch touches: its snapshot while applied (added files included), else its sections."""
    applied = wt.applied()
    name = name or wt.need_top()
    if name in applied:
        return name, [t.path for t in wt.snapshot(name)]
    if name not in wt.series():
        raise UsageError(f"Patch {name} is not in series.", hint="`imgquilt series` lists the patches.")
    return name, [s.path for s in wt.read_patch(name).sections]


def neighbour(wt: WorkTree, step: int) -> str | None:
    """The patch after the top (step 1: the next to push) or below it (step -1); None at either end."""
    applied, names = wt.applied(), wt.selected()
    i = len(applied) - 1 + step
    if step < 0:
        return applied[i] if 0 <= i < len(applied) else None
    return names[len(applied)] if len(applied) < len(names) else None
