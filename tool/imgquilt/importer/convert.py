"""Applying a foreign patch to real bases: placement (offset, fuzz, anchors), paths, every pin checked."""
from __future__ import annotations

import re
from typing import Callable

from ..engine.apply import PlaceError, Placed, apply_placed, place_hunks, renumbered
from ..errors import BadInput, BaseDrift, HunkMismatch, MalformedPatch, MissingTarget, ResultMismatch
from ..fs.paths import check_member_path
from ..queue.binarypatch import BinaryPatchError, DeltaBaseMismatch, apply_binary, git_blob_sha1
from ..queue.hunks import ABSENT, Hunk, sha256_hex, split_lines
from .names import strip_path
from .values import Converted, FileChange, ForeignFile, ForeignPatch, Pin
from .values import bad as _bad

_ZERO_SHA1 = re.compile(r"^0+$")


def file_paths(f: ForeignFile, strip: int, source: str, prefix: str = "") -> tuple[str, str]:
    """(path read, path written) inside the image for one file diff; `prefix` as `patch -d DIR`."""
    if f.pin is not None and f.pin.target:
        target = f.pin.target if f.pin.target.startswith("/") else _under(prefix, f.pin.target)
        target = check_member_path(target.lstrip("/"), what=f"TARGET in {source}")
        return target, target
    def one(name: str | None) -> str | None:
        if name is None:
            return None
        return check_member_path(_under(prefix, strip_path(name, strip, source=source, line=f.line)), what=f"path in {source}")

    old, new = one(f.old_name), one(f.new_name)
    if f.rename or f.copy:
        if old is None or new is None:
            raise _bad(source, f.line, "a rename or copy names no source or destination.")
        return old, new
    name = new if (new is not None and not f.new_absent) else (old if old is not None else new)
    if name is None:
        raise _bad(source, f.line, "both sides of the diff are /dev/null.")
    return name, name


def _under(prefix: str, path: str) -> str:
    return f"{prefix.strip('/')}/{path}" if prefix.strip("/") else path


BaseReader = Callable[[str, str | None], bytes | None]
# every path of the image ending in "/" + the given tail (for package-relative paths)
TailFinder = Callable[[str], list[str]]


def _by_tail(path: str, pinned: str, read_base: BaseReader, find_tail: TailFinder | None, where: str) -> str | None:
    """The one image file whose path ends in `path` and whose bytes have the pinned base hash."""
    if find_tail is None:
        return None
    candidates = sorted(find_tail(path))
    hits = [c for c in candidates if sha256_hex(read_base(c, pinned)) == pinned]
    if len(hits) == 1:
        return hits[0]
    named = ", ".join(candidates[:8]) + (" ..." if len(candidates) > 8 else "") if candidates else "none"
    what = "none has" if not hits else f"{len(hits)} have"
    raise MissingTarget(
        f"Cannot import {where}: {path} is not in the image; files ending in it: {named}; {what} the pinned base sha256 {pinned}.",
        hint="Say where the patch's paths start with --prefix DIR (as `patch -d DIR`).",
    )


def _placement_notes(where: str, placed: list[Placed]) -> list[str]:
    notes = []
    for p in placed:
        if p.hunk.anchor is not None or (p.start == p.named and not p.fuzz):
            continue
        d = p.start - p.named
        moved = f"{abs(d)} line{'s' if abs(d) != 1 else ''} {'below' if d > 0 else 'above'} its header" if d else "at its header's line"
        fuzz = f", with fuzz {p.fuzz}" if p.fuzz else ""
        notes.append(f"{where} hunk {p.index + 1} at line {p.start + 1}, {moved}{fuzz}")
    return notes


def apply_foreign(
    fp: ForeignPatch,
    strip: int,
    read_base: BaseReader,
    *,
    label: str | None = None,
    check_git_index: bool = True,
    fuzz: int = 0,
    prefix: str = "",
    find_tail: TailFinder | None = None,
) -> Converted:
    """Apply every file diff of `fp` to real bases; verify every pin. Nothing is written here.

    `read_base(path, pinned_base)` returns the file's current bytes (None: absent).
    """
    label = label or fp.source
    state: dict[str, bytes | None] = {}
    first: dict[str, bytes | None] = {}
    modes: dict[str, int | None] = {}
    order: list[str] = []
    notes: list[str] = []
    kept: dict[str, tuple[Hunk, ...] | None] = {}

    def get(path: str, want: str | None) -> bytes | None:
        if path not in state:
            state[path] = read_base(path, want)
            first[path] = state[path]
            order.append(path)
        return state[path]

    for f in fp.files:
        src, dst = file_paths(f, strip, fp.source, prefix)
        where = f"{label}: {dst}" + (f" (from {src})" if src != dst else "")
        if f.binary and f.binary_patch is None:
            raise BadInput(
                f"Cannot import {where}: the diff says only that the binary file differs (no content).",
                hint="Make the diff with `git diff --binary` (or `git format-patch --binary`), which carries the bytes.",
            )
        pin = f.pin or Pin()
        base = get(src, pin.base)
        if base is None and src == dst and src not in kept and pin.base not in (None, ABSENT) and not f.old_absent:
            found = _by_tail(src, pin.base, read_base, find_tail, where)  # type: ignore[arg-type]
            if found is not None:
                notes.append(f"{src} is not in the image; took {found}, the one file ending in it with the pinned base.")
                order.remove(src)
                del state[src], first[src]
                src = dst = found
                where = f"{label}: {dst}"
                base = get(src, pin.base)
        actual = sha256_hex(base)
        if pin.base is not None and pin.base != actual:
            raise BaseDrift(
                f"Refused: {where}: the patch pins base sha256 {pin.base}, the file here is {actual}.",
                hint="Import onto the image the patch was made for (--image REF), or drop the stale pin line.",
            )
        if check_git_index and f.git_index is not None:
            want = f.git_index[0]
            have = git_blob_sha1(base)
            if not (have.startswith(want) or (base is None and _ZERO_SHA1.match(want))):
                raise BaseDrift(
                    f"Refused: {where}: the git diff was made against blob {want}, the file here is blob {have[:len(want)]} (sha256 {actual}).",
                    hint="Import onto the image the diff was made for (--image REF), or pass --ignore-git-index to trust the hunks alone.",
                )
        if f.old_absent and base is not None and not (f.rename or f.copy):
            raise BaseDrift(
                f"Refused: {where}: the patch creates the file, but it exists here (sha256 {actual}).",
                hint="The file is already there: drop this part of the patch, or import onto another image.",
            )
        if base is None and not f.old_absent and any(h.old_len for h in f.hunks):
            raise MissingTarget(
                f"Cannot import {where}: the file does not exist here, and the patch changes its lines.",
                hint="Check the path (-p level, TARGET line) and the image (--image REF).",
            )
        placed: list[Placed] = []
        if f.binary_patch is not None:
            try:
                new = apply_binary(base, f.binary_patch)
            except DeltaBaseMismatch as exc:  # made for another file: refused, as a hunk that does not fit
                raise HunkMismatch(f"Refused: {where}: the binary patch does not apply: {exc.message} (base sha256 {actual}).") from None
            except BinaryPatchError as exc:  # the delta itself is broken or hostile
                raise MalformedPatch(f"Cannot import {where}: the binary patch is malformed: {exc.message}",
                                     hint="Make the diff again with `git diff --binary`.") from None
        else:
            src_lines = split_lines(base or b"")
            if base and not base.endswith(b"\n") and any(h.anchor == "append" for h in f.hunks):
                raise HunkMismatch(
                    f"Refused: {where}: the file does not end with a newline, so an `@@ append` hunk has no line to follow (base sha256 {actual}).",
                    hint="Write the hunk as a numbered diff that also changes the last line.",
                )
            try:
                placed = place_hunks(src_lines, f.hunks, fuzz=fuzz)
            except PlaceError as exc:
                raise _no_fit(where, exc, actual, fuzz) from None
            new = apply_placed(src_lines, placed)
            notes += _placement_notes(f"{dst}", placed)
        result: bytes | None = new
        if f.new_absent:
            if new:
                raise ResultMismatch(f"Refused: {where}: the patch deletes the file, but {len(new)} byte(s) remain after its hunks.")
            result = None
        elif base is None and not new and not f.old_absent and not f.hunks:
            result = None  # nothing created
        got = sha256_hex(result)
        if pin.patched is not None and pin.patched != got:
            raise ResultMismatch(
                f"Refused: {where}: the patch pins patched sha256 {pin.patched}, applying it gives {got}.",
                hint="The pin and the diff disagree: fix the pin line, or regenerate the patch.",
            )
        if check_git_index and f.git_index is not None and not (f.rename or f.copy):
            want = f.git_index[1]
            have = git_blob_sha1(result)
            if not (have.startswith(want) or (result is None and _ZERO_SHA1.match(want))):
                raise ResultMismatch(f"Refused: {where}: git names the result blob {want}, applying the hunks gives {have[:len(want)]}.")
        if f.mode_change is not None and f.mode_change[0] != f.mode_change[1]:
            notes.append(f"{dst}: mode change {f.mode_change[0]:04o} -> {f.mode_change[1]:04o} ignored (imgquilt keeps the image's mode).")
        if dst != src:
            get(dst, None)
            if f.rename:
                state[src] = None
        state[dst] = result
        exact = f.hunks and all(h.anchor is None for h in f.hunks) and all(p.fuzz == 0 for p in placed) and src == dst
        kept[dst] = renumbered(placed) if exact and dst not in kept else None
        mode = f.new_file_mode if f.new_file_mode is not None else pin.mode
        if mode is not None and mode != 0o644:
            modes[dst] = mode
    changes: list[FileChange] = []
    for path in order:
        base, result = first[path], state[path]
        if base == result:
            continue
        hunks = kept.get(path)
        if result is None or base is None and not result:
            hunks = None  # deletions and empty files: the writer's own form
        changes.append(FileChange(path, base, result, modes.get(path) if base is None else None, hunks))
    return Converted(changes, notes)


def _no_fit(where: str, exc: PlaceError, actual: str, fuzz: int) -> HunkMismatch:
    if exc.would is not None:
        line, need = exc.would
        detail = f"hunk {exc.index + 1} (header line {exc.named + 1}) matches nowhere exactly; with --fuzz {need} it would apply at line {line}"
        hint = f"Check the change at line {line}, then pass --fuzz {need} to accept it, or regenerate the diff against this file."
    else:
        detail = f"hunk {exc.index + 1} (header line {exc.named + 1}) matches nowhere, not even with 2 context lines dropped (fuzz 2)"
        hint = "The diff was made against other bytes: import onto the right image, or regenerate the diff against this file."
    return HunkMismatch(f"Refused: {where}: {detail} (base sha256 {actual}).", hint=hint)
