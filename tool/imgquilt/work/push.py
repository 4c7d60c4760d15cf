"""push: verify every base hash, apply in memory, verify every result hash, and only then write.

The writes go snapshot (object store + pc/<name>.json), the applied list, then the work files.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.apply import HunkError, apply_section
from ..errors import BaseDrift, MalformedPatch, Refused, ResultMismatch, UsageError
from ..queue.hunks import sha256_hex
from ..queue.patchfile import Patch, rehash_command
from ..store import remember
from .files import FileState
from .state import one_name_per_file

if TYPE_CHECKING:
    from .tree import WorkTree


@dataclass(frozen=True)
class Pushed:
    name: str
    files: tuple[str, ...]


def push(wt: WorkTree, target: str | None = None, *, all: bool = False, count: int | None = None) -> list[Pushed]:
    """Apply the next patch (or up to and including `target`, `count` patches, or all)."""
    with wt.locked():
        applied = wt.consistent()
        rest = wt.selected()[len(applied) :]
        if target is not None and target not in rest and target not in applied and target in wt.series():
            prof = wt.profile()
            raise UsageError(f"Patch {target} is guarded out of {'profile ' + prof if prof else 'the default selection'}.",
                             hint="`imgquilt guard --list` shows the guards; `imgquilt select NAME` follows another profile.")
        if not rest:
            if not applied and wt.series():
                prof = wt.profile()
                raise UsageError(f"{'Profile ' + prof if prof else 'The default selection (no guard selected)'} selects none of "
                                 f"the {len(wt.series())} patch(es) of series: each is guarded out.",
                                 hint="`imgquilt guard --list` shows the guards; `imgquilt select NAME` follows another profile.")
            raise UsageError(
                "The series is fully applied" + (f", ending at {applied[-1]}." if applied else " (it is empty)."),
                hint="Nothing to push.",
            )
        if target is not None:
            if target not in rest:
                where = "already applied" if target in applied else "not in series"
                raise UsageError(f"Patch {target} is {where}.")
            todo = rest[: rest.index(target) + 1]
        elif all:
            todo = rest
        else:
            todo = rest[: max(1, count or 1)]
        done: list[Pushed] = []
        for name in todo:
            try:
                done.append(_push_one(wt, name, applied))
            except Refused as exc:
                exc.pushed = done  # type: ignore[attr-defined]  # the CLI names what did go on
                raise
            applied = applied + [name]
        return done


def _push_one(wt: WorkTree, name: str, applied: list[str]) -> Pushed:
    patch, cur, results = _plan(wt, name, applied)
    _, where = wt.file_index(applied)
    snap = [wt.track(s.path, cur[s.path]) for s in patch.sections]
    remember(wt.root, [r.data for r in results.values()])
    wt.record.write_snapshot(name, snap)
    wt.record.write_applied(applied + [name])
    for s in patch.sections:
        r, before = results[s.path], cur[s.path]
        loc = where.get(before.resolved or s.path, s.path)
        if before.resolved not in where or (r.data, r.mode) != (before.data, before.mode):
            wt.files.write(loc, r.data, r.mode)
    return Pushed(name, tuple(patch.paths))


def _plan(wt: WorkTree, name: str, applied: list[str]) -> tuple[Patch, dict[str, FileState], dict[str, FileState]]:
    """(patch, each path's content now, each path's verified result); every problem at once, or nothing."""
    patch = wt.read_patch(name)
    links = [s.path for s in patch.sections if s.link]
    if links:
        raise UsageError(
            f"Patch {name} changes symlinks ({', '.join(links)}); the work tree holds regular files only, so it cannot be pushed.",
            hint="`imgquilt apply` writes it (a layer, an image, --root); keep it above the patches you push, or "
                 "`imgquilt move` it there.",
        )
    cur = wt.current(patch.paths, applied)
    one_name_per_file(name, [], cur)
    named, where = wt.file_index(applied)
    results: dict[str, FileState] = {}
    problems: list[str] = []
    kinds: set[type] = set()
    top = applied[-1] if applied else None
    for s in patch.sections:
        st = cur[s.path]
        actual = sha256_hex(st.data)
        if actual != s.base_sha256:
            if st.resolved in where:
                from .refresh import unrefreshed

                dirty = unrefreshed(wt, top) if top is not None else []
                if any(named.get(d) == st.resolved for d in dirty):
                    why = f"it has changes not refreshed into {top}: `imgquilt refresh` first"
                else:
                    below = next((n for n in reversed(applied) if any(t.resolved == st.resolved for t in wt.snapshot(n))), top)
                    why = (f"the work copy is what {below} left, so the series chain is broken here: "
                           f"{rehash_command([name])} re-chains {name} onto it")
            else:
                why = "the image differs from the patch's base: pass the right --image, or `imgquilt rebase --image REF`"
            where_txt = s.path if (st.resolved or s.path) == s.path else f"{s.path} (resolved: {st.resolved})"
            problems.append(f"{name}: {where_txt}: base drifted: expected sha256 {s.base_sha256}, found {actual} ({why}).")
            kinds.add(BaseDrift)
            continue
        try:
            new = apply_section(st.data, s)
        except HunkError as exc:
            problems.append(f"{name}: {s.path}: base matches ({actual}) but {exc}; regenerate the patch.")
            kinds.add(MalformedPatch)
            continue
        result = None if s.is_delete else new
        got = sha256_hex(new) if (s.is_delete and new) else sha256_hex(result)
        if got != s.patched_sha256:
            problems.append(f"{name}: {s.path}: the result is not the pinned one: expected sha256 {s.patched_sha256}, got {got}.")
            kinds.add(ResultMismatch)
            continue
        mode = s.mode if (s.is_new and s.mode is not None) else s.new_mode if s.new_mode is not None else (
            st.mode if st.mode is not None else 0o644)
        results[s.path] = FileState(result, None if result is None else mode & 0o777, st.resolved)
    if problems:
        cls = next(iter(kinds)) if len(kinds) == 1 else Refused
        hint = "Fix what is named above, then push again."
        if kinds & {ResultMismatch, MalformedPatch}:
            hint = (f"If {name} was edited by hand, {rehash_command([name])} re-pins it (and re-chains the patches after it); "
                    "then push again.")
        raise cls(
            f"Refused: cannot push {name}; nothing was changed.\n" + "\n".join(f"  - {p}" for p in problems),
            hint=hint,
        )
    return patch, cur, results
