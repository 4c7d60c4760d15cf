"""refresh --rehash: the one way back from a hand edit of patch files.

Each named patch's body (its hunk headers recounted first, as a hand edit that added a line needs)
is applied to the base the queue pins at that point: the lock's base (from the object store, else
the image the lock pins), carried through the earlier patches and verified against their pins,
never the edited file's own claim. A section whose Base-SHA256 is not that base is drift and stays
refused. Its Patched-SHA256 lines are re-pinned, and every later patch that touches the same files
is re-chained: its hunks go onto what the patches below now leave (at their lines, else where their
context matches exactly, renumbered), and its Base/Patched-SHA256 lines follow. A later hunk that
fits nowhere stops the command (ChainConflict) with nothing written.

The whole new series is then verified on the bases, the Python check included, as `lock` does, and
targets.lock (when there is one) is written from that verification. Applied patches at or above the
first named one are popped and pushed again, so the work tree follows: computed in memory
(work.staged) before anything is written.

All of it is one transaction (queue.interrupted.QueueJournal, `.imgquilt/rehash/`): the work copies
and snapshots that change, then the patch files, then targets.lock, whose write commits it (the last
patch file, when the queue has no lock). Killed at any point, the next imgquilt command leaves the
queue and the work tree exactly as they were before, or (past the commit) exactly rehashed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..fs.content import held
from ..engine.apply import HunkError, PlaceError, apply_placed, apply_section, place_hunks, renumbered
from ..errors import BaseDrift, ChainConflict, ImgquiltError, MalformedPatch, Refused, ResultMismatch, UsageError
from ..queue.difftext import recount_hunks, renumber_headers
from ..queue.hunks import ABSENT, sha256_hex, split_lines
from ..queue.interrupted import Change, QueueJournal
from ..queue.check import Bodies
from ..queue.lock import lock_with
from ..queue.patchfile import FileSection, Patch, build_patch, make_section, parse_patch, rehash_command
from ..queue.queue import Queue
from ..store import ObjectStore
from ..util.regular import read_regular_file
from .refresh import unrefreshed

if TYPE_CHECKING:
    from .tree import WorkTree


@dataclass(frozen=True)
class Repinned:
    """One section of a named patch: its path and the result hash before and after."""

    path: str
    old: str
    new: str
    patch: str = ""


@dataclass(frozen=True)
class Rechained:
    """One section of a later patch carried onto what the patches below it now leave."""

    patch: str
    path: str
    old_base: str
    base: str
    old_patched: str
    patched: str


@dataclass(frozen=True)
class Rehashed:
    """What `refresh --rehash` did: the named patches, every patch file it rewrote, and the lock."""

    names: tuple[str, ...]
    patches: tuple[Patch, ...]  # the named patches as they are now (rewritten or not)
    sections: tuple[Repinned, ...]
    rechained: tuple[Rechained, ...] = ()
    written: tuple[str, ...] = ()  # patch files rewritten, in series order
    lock: Path | None = None  # targets.lock, when it was written
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def patch(self) -> Patch:
        return self.patches[0]


def rehash(wt: WorkTree, names: list[str], *, python_check: bool = True) -> Rehashed:
    """Re-pin the named patches to what their bodies give and re-chain the patches after them."""
    with wt.locked():
        applied = wt.consistent()
        series = wt.selected()
        unknown = [n for n in names if n not in series]
        if unknown:
            if unknown[0] in wt.series():
                raise UsageError(f"Patch {unknown[0]} is guarded out of the work tree's selection.",
                                 hint="Re-pin it in a profile that selects it: `imgquilt select NAME`, then rehash again.")
            raise UsageError(f"Patch {unknown[0]} is not in series.")
        named = sorted(dict.fromkeys(names), key=series.index)
        lift = applied[series.index(named[0]):]  # popped before the rewrite, pushed again after
        patches, notes = _read(wt, series, set(named))
        for n in lift:
            dirty = unrefreshed(wt, n, patches[n])
            if dirty:
                raise Refused(
                    f"Refused: {n} has changes in .imgquilt/work/ not refreshed into it: {', '.join(dirty)}. Nothing was changed.",
                    hint=f"`imgquilt refresh` (or `imgquilt pop -f` to discard them), then {rehash_command(named)} again.",
                )
        chain = _Chain(wt, series, patches, named)
        new = chain.run()
        notes += chain.notes
        queue = wt.selected_queue(new)
        lock = _verify(wt, queue, named, python_check=python_check)
        written = [n for n in series if new[n].raw != _on_disk(wt, n)]
        changes = _follow(wt, lift, applied, new) if lift and written else []
        changes += [Change(f"patches/{n}", new[n].raw) for n in written]
        lock_path = None
        current = read_regular_file(wt.root / "targets.lock")
        if lock is not None and lock_with(current, lock, wt.profile()) != current:
            lock_path = wt.root / "targets.lock"
            changes.append(Change("targets.lock", lock_with(current, lock, wt.profile())))  # last: it commits the rehash
        QueueJournal(wt.root, "rehash").run(changes)
        return Rehashed(tuple(named), tuple(new[n] for n in named), tuple(chain.repinned), tuple(chain.rechained),
                        tuple(written), lock_path, tuple(notes))


def _follow(wt: WorkTree, lift: list[str], applied: list[str], new: dict[str, Patch]) -> list[Change]:
    """What popping `lift` and pushing it again with the new patches changes in the work tree, computed
    in memory (work.staged): written with the patch files, in the same transaction."""
    return follow_work(wt, lift, applied, lift, new)


def follow_work(wt: WorkTree, pop: list[str], applied: list[str], push: list[str], new: dict[str, Patch]) -> list[Change]:
    """What popping `pop` (the top of `applied`) and then pushing `push` with the patches `new` changes in
    the work tree, computed in memory (work.staged); the caller checked nothing unrefreshed is lost."""
    if not pop and not push:
        return []
    from .pop import pop_one
    from .push import _push_one
    from .staged import Staged

    staged = Staged(wt, new)
    down = list(applied)
    for _ in pop:
        pop_one(staged.tree, down, force=True)
        down = down[:-1]
    for n in push:
        _push_one(staged.tree, n, down)
        down = down + [n]
    return staged.changes()


def verified_lock(wt: WorkTree, queue: Queue, named: list[str], *, python_check: bool = True):
    """The queue verified on the bases as `lock` does (see _verify); the new lock, None when the queue has none."""
    return _verify(wt, queue, named, python_check=python_check)


def _on_disk(wt: WorkTree, name: str) -> bytes | None:
    return read_regular_file(wt.patches_dir / name)


def _read(wt: WorkTree, series: list[str], named: set[str]) -> tuple[dict[str, Patch], list[str]]:
    """Every patch of series; the named ones with their hunk headers recounted (a hand edit that added
    or removed a line leaves them wrong)."""
    from .patchtext import read_queue_patch

    out: dict[str, Patch] = {}
    notes: list[str] = []
    for n in series:
        if n not in named:
            out[n] = wt.read_patch(n)
            continue
        raw = _on_disk(wt, n)
        if raw is None:
            raise MalformedPatch(f"Patch file patches/{n} does not exist.", hint="Restore it, or `imgquilt delete` it from series.")
        fixed = recount_hunks(raw)
        out[n] = read_queue_patch(fixed, n)
        if fixed != raw:
            notes.append(f"{n}: hunk headers recounted to match the lines under them.")
        if not out[n].sections:
            raise UsageError(f"Patch {n} has no file sections yet: there is nothing to re-pin.",
                             hint="`imgquilt push` it, `imgquilt add` files and `imgquilt refresh`.")
    return out, notes


def rechain(wt: WorkTree, series: list[str], given: dict[str, Patch], named: list[str], *,
            carry: frozenset[str] = frozenset()) -> dict[str, Patch]:
    """Every patch of `series` (an order of the queue's patches; `given` ones instead of their files)
    with the patches after the `named` ones re-chained onto what those now leave, as `refresh --rehash`
    does; `carry`: patches that stand somewhere new (`move`) and are carried onto whatever is below them.
    Raises ChainConflict, with nothing written, where a hunk fits nowhere. Writes nothing."""
    patches = {n: given[n] if n in given else wt.read_patch(n) for n in series}
    return _Chain(wt, series, patches, named, carry).run()


class _Chain:
    """The series walked in order over the files the named patches touch, carrying each file's bytes."""

    def __init__(self, wt: WorkTree, series: list[str], patches: dict[str, Patch], named: list[str],
                 carry: frozenset[str] = frozenset()) -> None:
        self.series, self.patches, self.named, self.carry = series, patches, named, carry
        scope = sorted({s.path for n in named for s in patches[n].sections})
        links = {s.path for p in patches.values() for s in p.sections if s.link}
        self.data = {p: st.data for p, st in wt.bases.read(scope, links=[p for p in scope if p in links]).items()}
        self.last: dict[str, str] = {}  # path -> the last patch that touched it so far
        self.last_named: dict[str, str] = {}  # path -> the last named patch that touched it so far
        self.repinned: list[Repinned] = []
        self.rechained: list[Rechained] = []
        self.notes: list[str] = []

    def run(self) -> dict[str, Patch]:
        out: dict[str, Patch] = {}
        for n in self.series:
            p = self.patches[n]
            sections = [self._section(n, s) if s.path in self.data else s for s in p.sections]
            if all(a is b for a, b in zip(sections, p.sections)):
                out[n] = p
                continue
            out[n] = parse_patch(build_patch(n, p.header, sections).raw, n)  # what is written must read back
        return out

    def _section(self, name: str, s: FileSection) -> FileSection:
        data = self.data[s.path]
        here = f"{name}: {s.path}"
        prev = self.last.get(s.path)  # the patch before this one on the file
        changed = self.last_named.get(s.path)  # the last named patch on the file so far
        self.last[s.path] = name
        if name in self.named:
            self.last_named[s.path] = name
        if changed is None and name not in self.named:
            self.data[s.path] = self._as_pinned(name, s, data)  # below every named patch: as pinned
            return s
        if changed is None and sha256_hex(data) == s.base_sha256 and name not in self.carry:  # a named patch on its pinned base: its result re-pinned
            result = _exact(s, data, here)
            new = sha256_hex(result)
            self.repinned.append(Repinned(s.path, s.patched_sha256, new, name))
            self.data[s.path] = result
            return s if new == s.patched_sha256 else replace(s, raw=_pins(s, None, new), patched_sha256=new)
        if changed is None and prev is None and name not in self.carry:  # the image's bytes are not the ones the patch was made for
            raise BaseDrift(
                f"Refused: {here}: the patch says Base-SHA256 {s.base_sha256}, the queue pins {sha256_hex(data)} for the file at this point.",
                hint="Only a patch on the pinned base is re-pinned: a patch for other bytes is drift (`imgquilt rebase`, "
                     "or `imgquilt import` it anew).",
            )
        return self._onto(name, s, data, changed or prev or "the image")

    def _as_pinned(self, name: str, s: FileSection, data: bytes | None) -> bytes | None:
        here = f"{name}: {s.path}"
        if sha256_hex(data) != s.base_sha256:
            raise BaseDrift(f"Refused: {here}: pins base {s.base_sha256}, the file is {sha256_hex(data)} there.",
                            hint="The queue does not fit its pinned image: `imgquilt check`, or `imgquilt rebase`.")
        result = _exact(s, data, here)
        if sha256_hex(result) != s.patched_sha256:
            raise ResultMismatch(f"Refused: {here}: its body does not give its Patched-SHA256 {s.patched_sha256} (edited by hand too?).",
                                 hint=f"Re-pin it with the others: {rehash_command(sorted({name, *self.named}, key=self.series.index))}.")
        return result

    def _onto(self, name: str, s: FileSection, data: bytes | None, below: str) -> FileSection:
        """A section carried onto `data`, what the patches below it (`below` the one that matters) leave now."""
        here = f"{name}: {s.path}"

        def conflict(what: str) -> ChainConflict:
            return ChainConflict(
                f"Refused: {here}: {what}, on what {below} now leaves; nothing was written.",
                hint=f"Edit that part of patches/{name} by hand to fit, then run {rehash_command(self.named)} again "
                     f"(it re-chains {name} too); or push up to {below} and re-create {name}'s change with `imgquilt refresh`.",
            )

        if (data is None) != s.is_new:
            raise conflict("the section " + ("creates the file, which now exists" if s.is_new else "changes the file, which is now gone"))
        moved: list[str] = []
        hunks = None
        if s.binary is not None:
            try:
                result: bytes | None = apply_section(data, s)
            except HunkError:
                raise conflict("its binary patch no longer fits the file") from None
        else:
            src = split_lines(data or b"")
            try:
                placed = place_hunks(src, s.hunks)
            except PlaceError as exc:
                h = s.hunks[exc.index]
                raise conflict(f"hunk {exc.index + 1} (@@ -{h.old_start},{h.old_len} @@) no longer fits: its context and "
                               "removed lines are found nowhere in the file") from None
            result = apply_placed(src, placed)
            if any(p.start != p.named for p in placed):
                hunks = renumbered(placed)
                moved = [f"hunk {p.index + 1} moved {abs(p.start - p.named)} line(s) {'down' if p.start > p.named else 'up'}"
                         for p in placed if p.start != p.named]
        if s.is_delete:
            if result:
                raise conflict(f"the section deletes the file, but {len(result)} byte(s) remain after its hunks")
            result = None
        base, patched = sha256_hex(data), sha256_hex(result)
        self.data[s.path] = result
        if (base, patched) == (s.base_sha256, s.patched_sha256) and hunks is None:
            return s
        if name not in self.named or base != s.base_sha256:
            self.rechained.append(Rechained(name, s.path, s.base_sha256, base, s.patched_sha256, patched))
        else:
            self.repinned.append(Repinned(s.path, s.patched_sha256, patched, name))
        if moved:
            self.notes.append(f"{here}: " + ", ".join(moved) + f", to where its lines are in what {below} now leaves (@@ header renumbered).")
        if s.binary is not None:
            return make_section(s.path, data, result, s.mode, mode_change=s.mode_change, deleted_mode=s.deleted_mode)
        raw = _pins(s, base, patched)
        return replace(s, raw=renumber_headers(raw, hunks) if hunks is not None else raw, base_sha256=base,
                       patched_sha256=patched, hunks=hunks if hunks is not None else s.hunks)


def _exact(s: FileSection, base: bytes | None, where: str) -> bytes | None:
    """A section's result on its base, its hunks at their lines (a body that does not fit its own base is malformed)."""
    try:
        new = apply_section(base, s)
    except HunkError as exc:
        raise MalformedPatch(
            f"Refused: {where}: the body does not apply to its pinned base ({exc}).",
            hint="Fix the hunk text (its context and removed lines must match the base exactly), then run the command again.",
        ) from None
    if s.is_delete:
        if new:
            raise ResultMismatch(f"Refused: {where}: the section deletes the file, but {len(new)} byte(s) remain after its hunks.")
        return None
    return new


_PIN = {"Base-SHA256": rb"(?m)^(Base-SHA256:[ \t]?)(?:[0-9a-f]{64}|absent)", "Patched-SHA256": rb"(?m)^(Patched-SHA256:[ \t]?)(?:[0-9a-f]{64}|absent)"}


def _pins(s: FileSection, base: str | None, patched: str | None) -> bytes:
    """The section's bytes with only its hash lines changed (before its `---` line)."""
    raw = held(s.raw, s.path)
    head, sep, diff = raw.partition(b"\n--- ")
    if not sep:
        head, sep, diff = raw.partition(b"\ndiff --git ")
    for key, value in (("Base-SHA256", base), ("Patched-SHA256", patched)):
        if value is None:
            continue
        head, n = re.subn(_PIN[key], lambda m: m.group(1) + value.encode(), head, count=1)
        if n != 1:
            raise UsageError(f"{s.path}: no {key} line to re-pin.")
    return head + sep + diff


def _verify(wt: WorkTree, queue: Queue, named: list[str], *, python_check: bool):
    """The new series verified on the bases, as `lock` does it; the new lock (None: the queue has none)."""
    from ..verbs.lock import lock_queue

    lock = wt.bases.lock()
    try:
        new = lock_queue(queue, wt.bases.as_source(), lock.image.ref if lock else "", python_check=python_check)
    except ImgquiltError as exc:
        exc.message = exc.message.replace("nothing was written.", "nothing was written (the series after re-pinning, verified as `lock` does).", 1)
        others = {p.patch for p in getattr(exc, "problems", []) if p.kind in ("result", "hunk")} - set(named)
        if others:  # hand-edited too: one command re-pins them all, whichever was named first
            every = sorted({*named, *others}, key=queue.names.index)
            exc.hint = f"{', '.join(sorted(others, key=queue.names.index))} edited by hand too? Re-pin them together: {rehash_command(every)}."
        raise
    return new if lock is not None else None


def stale_results(root: Path, patches: list[Patch]) -> Bodies:
    """For `check`: sections whose body, applied to its base (from the object store), does not give its
    Patched-SHA256; and the patches with a section whose base is not stored (not tested)."""
    store = ObjectStore(root)
    out: list[tuple[str, str]] = []
    unchecked: set[str] = set()
    for p in patches:
        for s in p.sections:
            found, base = store.get_or_absent(s.base_sha256, spool=True)
            if not found:
                unchecked.add(p.name)
                continue  # the base's bytes are not here: nothing to test offline
            try:
                new = apply_section(base, s)
            except HunkError as exc:
                out.append((p.name, f"{p.name}: {s.path}: the body does not apply to its base {s.base_sha256} ({exc})."))
                continue
            got = ABSENT if s.is_delete and not new else sha256_hex(new)
            if got != s.patched_sha256:
                out.append((p.name,
                    f"{p.name}: {s.path}: Patched-SHA256 is stale: the body gives {got}, the line says {s.patched_sha256} "
                    f"(hand-edited?); run {rehash_command([p.name])}."
                ))
    return Bodies(tuple(out), frozenset(unchecked))
