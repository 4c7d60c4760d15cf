"""Plans that put a root back as its image has it: `restore` (named files) and `apply --reverse` (the
whole queue imgquilt applied there, as its record says). Pure, as plan.py: the verb reads the root and
finds the image's bytes; this decides what to write, and refuses before anything is written.

Every byte planned is checked by hash: a file is put back only while it holds exactly what imgquilt
left there (the record's result), and only with bytes whose sha256 the queue pins as the image's (its
sections' bases, targets.lock's) or `--image` has: from the object store, from the image itself, or
the patches taken off again. The record is a file of the root, and a root can ship any file: it says
which files to look at, never which bytes go there or what may be deleted (record_problems).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Mapping, Sequence

from ..errors import BadInput, BaseDrift, UsageError
from ..fs.content import held_or_none
from ..fs.types import ImageInfo, TargetFile
from ..queue.hunks import ABSENT, sha256_hex
from ..queue.lock import Lock
from ..queue.queue import Queue
from .apply import HunkError, apply_hunks, reverse_hunks
from .record import Record
from .result import RECORD_PATH, ApplyResult, FileResult

BytesOf = Callable[[str, str], "tuple[bool, bytes | None]"]  # (named path, sha256) -> (found, bytes)


@dataclass(frozen=True)
class ImageFile:
    """What the image has at a path: its sha256 and, where known, its metadata (None: keep the root's)."""

    sha256: str
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class Pins:
    """What the queue itself says the image has: per named path, the base of the first section on it
    (in the whole series and in each profile's selection) and targets.lock's, and the paths whose first
    section creates them (base `absent`): the only files a reverse may delete."""

    image: Mapping[str, ImageFile]  # restore's answer per path: the lock's pin (mode, owner), else the first section's base
    bases: Mapping[str, frozenset[str]]
    created: frozenset[str]


def queue_pins(selections: Sequence[Queue], locks: Sequence[Lock]) -> Pins:
    image: dict[str, ImageFile] = {}
    bases: dict[str, set[str]] = {}
    for lock in locks:
        for t in lock.targets:
            image.setdefault(t.path, ImageFile(t.base_sha256, t.mode, t.uid, t.gid))
            bases.setdefault(t.path, set()).add(t.base_sha256)
    for q in selections:
        seen: set[str] = set()
        for p in q.patches:
            for s in p.sections:
                if s.path not in seen:  # a later section's base is an earlier one's result, not the image's
                    seen.add(s.path)
                    image.setdefault(s.path, ImageFile(s.base_sha256))
                    bases.setdefault(s.path, set()).add(s.base_sha256)
    return Pins(image, {k: frozenset(v) for k, v in bases.items()},
                frozenset(k for k, v in bases.items() if ABSENT in v))


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: k + 1]) for k in range(len(parts))]


def record_problems(record: Record, pins: Pins, current: Mapping[str, TargetFile], image_has: Mapping[str, str],
                    own: Queue | None) -> list[str]:
    """Why `record` may not be obeyed, one line per file: each base it names must be one the queue pins
    at that path (or the one `--image` has there, `image_has`), a file it says the series created must be
    one a section of the queue creates, and each directory it says that apply created must be a parent
    of such a file or of the record. `own`: the queue's selection whose series the record names (then the
    record must list exactly its patches and sections)."""
    out: list[str] = []
    made: set[str] = set(_parents(RECORD_PATH))
    for resolved, (named, base, _last) in sorted(record.first_and_last().items()):
        if base != ABSENT and image_has.get(named) == base:
            continue  # --image has exactly that there (a deletion is only ever of a file the queue creates)
        pinned = pins.bases.get(named)
        if base == ABSENT and named not in pins.created:
            out.append(f"{named}: the record says the series created it, but no section of this queue creates it")
        elif pinned is None:
            out.append(f"{named}: no pin of this queue names it (no section, not in targets.lock)")
        elif base not in pinned:
            out.append(f"{named}: the record's base sha256 {base} is not the one this queue pins there ({', '.join(sorted(pinned))})")
        if base == ABSENT and named in current:
            made.update(_parents(current[named].resolved))
    for d in record.created_dirs:
        if d not in made:
            out.append(f"{d}/: the record says that apply created the directory, but no file this queue creates is in it")
    if own is not None:
        want = [(p.name, [(s.path, s.base_sha256, s.patched_sha256) for s in p.sections]) for p in own.patches]
        got = [(n, [(f.path, f.base_sha256, f.patched_sha256) for f in files]) for n, files in record.patches]
        if want != got:
            out.append("the record names this queue's series, but not its patches and sections as the queue holds them")
    return out


def plan_restore(info: ImageInfo, paths: Sequence[str], current: Mapping[str, TargetFile], image: Mapping[str, ImageFile],
                 bytes_of: BytesOf, links: Collection[str] = ()) -> ApplyResult:
    """Each of `paths` (as the root resolves it, `current`) back to what the image has (`image`);
    `links`: the paths that are symlinks (read, and put back, as themselves)."""
    missing = [p for p in paths if p not in image]
    if missing:
        raise UsageError(f"What the image has at {', '.join(missing)} is not known here: no pin of this queue names it "
                         "(no section, not in targets.lock); a root's apply record is never a source of bytes.",
                         hint="Pass --image REF (the image the root was extracted from): its files are read from it.")
    files, unknown = [], []
    for p in dict.fromkeys(paths):
        if p == RECORD_PATH or current[p].resolved == RECORD_PATH:
            raise UsageError(f"{RECORD_PATH} is imgquilt's own record, not a file of the image.",
                             hint="`imgquilt apply --reverse --root ROOT` takes the queue off, record included.")
        want = image[p]
        found, data = bytes_of(p, want.sha256)
        if not found:
            unknown.append(f"{p} (sha256 {want.sha256})")
            continue
        t = current[p]
        mode = want.mode if want.mode is not None else (t.mode if t.data is not None else 0o644)
        files.append(FileResult(t, data, mode, t.uid if want.uid is None else want.uid, t.gid if want.gid is None else want.gid, (),
                                link=p in links and data is not None))
    if unknown:
        raise _not_at_hand(unknown)
    return ApplyResult(info, "", (), tuple(sorted(files, key=lambda f: f.resolved)), False)


def plan_reverse(info: ImageInfo, record: Record, record_file: TargetFile, current: Mapping[str, TargetFile],
                 bytes_of: BytesOf, queue: Queue | None, links: Collection[str] = (),
                 modes: Mapping[str, int] | None = None) -> tuple[ApplyResult, list[str]]:
    """Take off what `record` says was applied: each file that holds the series' result goes back to
    the image's bytes, each file the series created goes, and so does the record. Returns the plan and
    the files already as the image has them. `queue`: this queue, when the record names it (its patches
    are then taken off again where the image's bytes are not stored). `links`: the paths symlink
    sections name (read, and put back, as links). `modes`: the image's permission bits where known
    (--image, targets.lock); else a mode the series changed goes back to its first section's old mode."""
    files: list[FileResult] = []
    edited, unknown, already = [], [], []
    for resolved, (named, base, last) in sorted(record.first_and_last().items()):
        t = current[named]
        now = sha256_hex(t.data)
        if t.resolved != resolved:
            edited.append(f"{named} (it resolves to {t.resolved} in the root now, the record says {resolved})")
            continue
        mode = _image_mode(queue, named, resolved, current, modes or {})
        if base == last and now == base and t.data is not None and mode is not None and (t.mode & 0o7777) != mode:
            files.append(FileResult(t, t.data, mode, t.uid, t.gid, ()))  # a mode change alone: the mode goes back
            continue
        if now == base or base == last:
            already.append(named)
            continue
        if now != last:
            edited.append(f"{named} (sha256 {now}: neither the image's {base} nor what the queue left, {last})")
            continue
        found, data = bytes_of(named, base)
        if not found and queue is not None and queue.series_sha256 == record.series_sha256:
            found, data = _taken_off(queue, named, resolved, held_or_none(t.data, named), base, current)
        if not found:
            unknown.append(f"{named} (sha256 {base})")
            continue
        keep = t.mode if t.data is not None else 0o644
        files.append(FileResult(t, data, keep if mode is None else mode, t.uid, t.gid, (), link=named in links and data is not None))
    if edited:
        raise BaseDrift(
            f"Refused: {len(edited)} file(s) changed since imgquilt applied the queue: {'; '.join(edited)}. Nothing was written.",
            hint=f"Put the image's back first (`imgquilt restore PATH... --root {info.ref.removeprefix('rootfs:')}`), then "
                 "take the queue off again.")
    if unknown:
        raise _not_at_hand(unknown)
    files.append(FileResult(record_file, None, record_file.mode, record_file.uid, record_file.gid, ()))
    return ApplyResult(info, record.series_sha256, tuple(record.names), tuple(sorted(files, key=lambda f: f.resolved)), False), already


def _image_mode(queue: Queue | None, named: str, resolved: str, current: Mapping[str, TargetFile],
                modes: Mapping[str, int]) -> int | None:
    """The permission bits the image has at `named`: `modes`' (the image's, the lock's), else the old
    mode of the first section on the file that changes it; None: the series left the mode alone."""
    if named in modes:
        return modes[named] & 0o7777
    for s in (s for p in (queue.patches if queue is not None else ()) for s in p.sections
              if s.path == named or (s.path in current and current[s.path].resolved == resolved)):
        if s.mode_change is not None:
            return s.mode_change[0]
    return None


def _taken_off(queue: Queue, named: str, resolved: str, data: bytes | None, base: str,
               current: Mapping[str, TargetFile]) -> tuple[bool, bytes | None]:
    """The file's base from its result: the queue's sections on it undone, last first, each step checked
    against the hashes the section pins."""
    sections = [s for p in queue.patches for s in p.sections
                if s.path == named or (s.path in current and current[s.path].resolved == resolved)]
    for s in reversed(sections):
        if s.binary is not None or sha256_hex(data) != s.patched_sha256:
            return False, None
        try:
            data = None if s.is_new else apply_hunks(data or b"", reverse_hunks(s.hunks))
        except HunkError:
            return False, None
        if sha256_hex(data) != s.base_sha256:
            return False, None
    return (True, data) if sha256_hex(data) == base else (False, None)


def _not_at_hand(unknown: list[str]) -> BadInput:
    return BadInput(f"The image's bytes of {', '.join(unknown)} are not in .imgquilt/objects, and the queue's patches do "
                    "not give them back; nothing was written.",
                    hint="Pass --image REF (the image the root was extracted from): the bytes are read from it.")
