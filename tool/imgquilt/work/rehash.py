"""refresh --rehash: re-pin an unapplied patch whose body was edited by hand.

The base comes from what the queue already pins (the lock's base, the object store, the image),
carried through the earlier patches in series order, never from the edited file's own claim. A
section whose Base-SHA256 is not that base is drift and stays refused. Only the Patched-SHA256
lines change; the lock follows (its series hash, and a final hash this patch now sets).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine.apply import HunkError, apply_section
from ..errors import BaseDrift, HunkMismatch, ImgquiltError, ResultMismatch, UsageError
from ..queue.hunks import ABSENT, sha256_hex
from ..queue.lock import read_lock, render_lock
from ..queue.patchfile import FileSection, Patch, build_patch, parse_patch
from ..queue.queue import series_sha256
from ..store import ObjectStore, remember
from ..util.atomic import atomic_write

if TYPE_CHECKING:
    from .tree import WorkTree


@dataclass(frozen=True)
class Repinned:
    """One section re-pinned: its path and the result hash before and after."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Rehashed:
    name: str
    patch: Patch
    sections: tuple[Repinned, ...]
    notes: tuple[str, ...] = ()


def _result(s: FileSection, base: bytes | None, where: str) -> bytes | None:
    try:
        new = apply_section(base, s)
    except HunkError as exc:
        raise HunkMismatch(
            f"Refused: {where}: the body does not apply to its pinned base ({exc}).",
            hint="Fix the hunk text (its lines must match the base exactly), then run the command again.",
        ) from None
    if s.is_delete:
        return None if not new else new
    return new


def rehash(wt: WorkTree, name: str) -> Rehashed:
    """Re-pin `name`'s Patched-SHA256 lines to what its body gives on the bases the queue pins."""
    with wt.locked():
        applied = wt.consistent()
        if name in applied:
            raise UsageError(f"Patch {name} is applied: its work tree, not its text, is what `imgquilt refresh` writes.",
                             hint=f"`imgquilt refresh {name}` to write the work tree's change, or pop it and run --rehash again.")
        names = wt.series()
        if name not in names:
            raise UsageError(f"Patch {name} is not in series.")
        idx = names.index(name)
        earlier = [wt.read_patch(n) for n in names[:idx]]
        patch = wt.read_patch(name)
        chain = wt.bases.read(sorted({s.path for s in patch.sections}))
        repinned: list[Repinned] = []
        results: list[bytes | None] = []
        raws: list[bytes] = []
        for s in patch.sections:
            data = chain[s.path].data
            for p in earlier:
                for e in p.sections:
                    if e.path != s.path:
                        continue
                    here = f"{p.name}: {e.path}"
                    if sha256_hex(data) != e.base_sha256:
                        raise BaseDrift(f"Refused: {here}: pins base {e.base_sha256}, the file is {sha256_hex(data)} there.",
                                        hint="The queue does not fit its pinned image: `imgquilt check`, or `imgquilt rebase`.")
                    data = _result(e, data, here)
                    if sha256_hex(data) != e.patched_sha256:
                        raise ResultMismatch(f"Refused: {here}: its body gives {sha256_hex(data)}, it pins {e.patched_sha256}.",
                                             hint=f"Re-pin {p.name} first: `imgquilt refresh --rehash {p.name}`.")
            where = f"{name}: {s.path}"
            have = sha256_hex(data)
            if have != s.base_sha256:
                raise BaseDrift(
                    f"Refused: {where}: the patch says Base-SHA256 {s.base_sha256}, the queue pins {have} for the file at this point.",
                    hint="Only the result hash is re-pinned: a patch for other bytes is drift (`imgquilt rebase`, or `imgquilt import` it anew).",
                )
            result = _result(s, data, where)
            if s.is_delete and result is not None:
                raise ResultMismatch(f"Refused: {where}: the section deletes the file, but {len(result)} byte(s) remain after its hunks.")
            new = sha256_hex(result)
            results.append(result)
            raws.append(_with_patched(s, new) if new != s.patched_sha256 else s.raw)
            repinned.append(Repinned(s.path, s.patched_sha256, new))
        fresh = build_patch(name, patch.header, [replace(s, raw=r) for s, r in zip(patch.sections, raws)])
        out = parse_patch(fresh.raw, name)  # what we write must read back
        notes = _later(wt, names[idx + 1 :], repinned)
        if out.raw != patch.raw:
            remember(wt.root, results)
            wt.queue.write_patch(out)
            _follow_lock(wt, names, name, out, repinned)
        return Rehashed(name, out, tuple(repinned), tuple(notes))


def _with_patched(s: FileSection, new: str) -> bytes:
    """The section's bytes with only its Patched-SHA256 line changed (before its `---` line)."""
    head, sep, diff = s.raw.partition(b"\n--- ")
    head2, n = re.subn(rb"(?m)^(Patched-SHA256:[ \t]?)[0-9a-f]{64}|^(Patched-SHA256:[ \t]?)absent", lambda m: (m.group(1) or m.group(2)) + new.encode(), head, count=1)
    if n != 1:
        raise UsageError(f"{s.path}: no Patched-SHA256 line to re-pin.")
    return head2 + sep + diff


def _later(wt: WorkTree, later: list[str], repinned: list[Repinned]) -> list[str]:
    moved = {r.path: r for r in repinned if r.old != r.new}
    notes = []
    for n in later:
        try:
            p = wt.read_patch(n)
        except ImgquiltError:
            continue
        for s in p.sections:
            if s.path in moved and s.base_sha256 == moved[s.path].old:
                notes.append(f"{n} starts {s.path} from the old result {moved[s.path].old}: it no longer continues the chain (refresh or rebase it).")
                del moved[s.path]
    return notes


def _follow_lock(wt: WorkTree, names: list[str], name: str, patch: Patch, repinned: list[Repinned]) -> None:
    """Keep targets.lock in step: the new series hash, and final hashes this patch now ends at."""
    path = Path(wt.root) / "targets.lock"
    lock = read_lock(path)
    if lock is None:
        return
    raw = [patch.raw if n == name else (wt.patches_dir / n).read_bytes() for n in names]
    last: dict[str, str] = {}
    for n in names:
        p = patch if n == name else wt.read_patch(n)
        for s in p.sections:
            last[s.path] = s.patched_sha256
    targets = tuple(replace(t, final_sha256=last.get(t.path, t.final_sha256)) for t in lock.targets)
    atomic_write(path, render_lock(replace(lock, series_sha256=series_sha256(wt.queue.series_bytes(), raw), targets=targets)))


def stale_results(root: Path, patches: list[Patch]) -> list[str]:
    """For `check`: sections whose body, applied to its base (from the object store), does not give its Patched-SHA256."""
    store = ObjectStore(root)
    out: list[str] = []
    for p in patches:
        for s in p.sections:
            found, base = store.get_or_absent(s.base_sha256)
            if not found:
                continue  # the base's bytes are not here: nothing to test offline
            try:
                new = apply_section(base, s)
            except HunkError as exc:
                out.append(f"{p.name}: {s.path}: the body does not apply to its base {s.base_sha256} ({exc}).")
                continue
            got = ABSENT if s.is_delete and not new else sha256_hex(new)
            if got != s.patched_sha256:
                out.append(
                    f"{p.name}: {s.path}: Patched-SHA256 is stale: the body gives {got}, the line says {s.patched_sha256} "
                    f"(hand-edited?); run `imgquilt refresh --rehash {p.name}`."
                )
    return out
