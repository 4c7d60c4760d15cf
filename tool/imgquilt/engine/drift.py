"""Why a base drifted, per file, and the way on that fits: the right advice instead of "rebase" for all.

A file whose bytes are not the base its patch pins is one of:

- `later`: it already holds the result of a patch of this series (the patch itself or a later one):
  the queue, or part of it, was applied to it already;
- `older`: the target runs an older version of this queue: its apply record names another series,
  and the file holds what that version left (which patches differ is read from the record);
- `hand`: the root was edited by hand: the file is not what the image has, and the root is known to
  be the image the queue is pinned to (its apply record names the lock's image or this queue, or the
  lock pins this very root); shown as a diff against the image's bytes (from the object store);
- `unsure`: a root not known to be that image, whose file is not what the lock pins: an edit in the
  root, or another image. The diff against the pinned bytes says which; both ways on are named;
- `image`: the image changed under the queue (the default): `rebase` carries the patches onto it.

Pure: bytes and hashes in, Problems out (the image's bytes come through `image_bytes`, a lookup by
sha256 that the verb backs with the object store).
"""
from __future__ import annotations

import difflib
import os
from dataclasses import replace
from typing import Callable, Mapping

from ..fs.content import Data, held_or_none
from ..fs.types import ImageInfo, TargetFile
from ..queue.lock import Lock
from ..queue.queue import Queue
from .record import Record

ImageBytes = Callable[[str, str], "tuple[bool, bytes | None]"]  # (path, sha256) -> (found, bytes): the image's bytes
DIFF_LINES = 40  # a diff in a refusal is cut after this many lines


def diagnose(problems: list, queue: Queue, targets: Mapping[str, TargetFile], info: ImageInfo, lock: Lock | None,
             record: Record | None, image_bytes: ImageBytes | None = None) -> list:
    """`problems` (plan.Problem) with each drift and missing file given its cause and detail."""
    results = _results(queue)
    same_image = _tied_to_lock(queue, info, lock, record)
    out = []
    for p in problems:
        if p.kind not in ("drift", "missing"):
            out.append(p)
            continue
        t = targets.get(p.path)
        cause, detail = _cause(p, t, queue, results, info, lock, record, same_image, targets, image_bytes)
        out.append(replace(p, cause=cause, detail=" ".join(x for x in (p.detail, detail) if x)))
    return out


def _results(queue: Queue) -> dict[tuple[str, str], list[str]]:
    """(named path, patched sha256) -> the patches that leave the file so, in series order."""
    out: dict[tuple[str, str], list[str]] = {}
    for p in queue.patches:
        for s in p.sections:
            out.setdefault((s.path, s.patched_sha256), []).append(p.name)
    return out


def _tied_to_lock(queue: Queue, info: ImageInfo, lock: Lock | None, record: Record | None) -> bool:
    """The root is known to be the image the lock pins: its apply record says so (the lock's image, or
    this very queue), or the lock was made from this very root."""
    if lock is None:
        return False
    if record is not None and ((record.image_digest and record.image_digest == lock.image.digest)
                               or record.series_sha256 == queue.series_sha256):
        return True
    if lock.image.kind == "rootfs" and info.kind == "rootfs":
        pinned = os.path.join(queue.root, lock.image.ref.removeprefix("rootfs:"))
        return os.path.realpath(pinned) == os.path.realpath(info.ref.removeprefix("rootfs:"))
    return False


def _cause(p, t: TargetFile | None, queue: Queue, results, info: ImageInfo, lock: Lock | None, record: Record | None,
           same_image: bool, targets: Mapping[str, TargetFile], image_bytes: ImageBytes | None) -> tuple[str, str]:
    found = p.actual
    order = queue.names
    if record is not None and record.series_sha256 != queue.series_sha256:
        left = {named: last for named, _base, last in record.first_and_last().values()}
        resolved_last = {r: last for r, (_n, _b, last) in record.first_and_last().items()}
        if left.get(p.path) == found or (t is not None and resolved_last.get(t.resolved) == found):
            return "older", "It holds what the older version of this queue applied here left."
    later = [n for n in results.get((p.path, found), []) if order.index(n) >= order.index(p.patch)]
    if later and found != "absent":
        own = later[0] == p.patch
        return "later", (f"It already holds {'this patch' if own else later[0]}'s result: "
                         f"{'the queue' if own else 'a later patch'} was applied here already.")
    if info.kind == "rootfs" and lock is not None and t is not None:
        pinned = lock.target(p.path)
        if pinned is not None and record is not None and record.series_sha256 == queue.series_sha256:
            return "hand", _edited_after(queue, t, pinned.base_sha256, image_bytes)
        if pinned is not None:
            return ("hand", _hand("The root was edited by hand", t, pinned.base_sha256, image_bytes)) if same_image else \
                ("unsure", _hand("Edited in this root, or the root is another image", t, pinned.base_sha256, image_bytes))
    return "image", ""


def _edited_after(queue: Queue, t: TargetFile, image_sha: str, image_bytes: ImageBytes | None) -> str:
    """A file of a root this queue was applied to, edited since: the diff against what the queue left there."""
    from .apply import HunkError, apply_section

    data: Data | None
    found, data = image_bytes(t.path, image_sha) if image_bytes is not None else (False, None)
    sections = [s for p in queue.patches for s in p.sections if s.path == t.path]
    if not found or not sections:
        return _hand("The root was edited by hand after imgquilt applied the queue", t, image_sha, image_bytes)
    try:
        for s in sections:
            data = None if s.is_delete else apply_section(data, s)
    except HunkError:
        return _hand("The root was edited by hand after imgquilt applied the queue", t, image_sha, image_bytes)
    return (f"The root was edited by hand after imgquilt applied the queue, which left sha256 {sections[-1].patched_sha256} "
            "there:\n" + show_diff(t.path, data, t.data))


def _hand(head: str, t: TargetFile, image_sha: str, image_bytes: ImageBytes | None) -> str:
    head = f"{head}: the image the lock pins has sha256 {image_sha} there."
    found, before = image_bytes(t.path, image_sha) if image_bytes is not None else (False, None)
    if not found:
        return head + " (Its bytes are not at hand to show the difference: not in .imgquilt/objects, nor readable from that image.)"
    return head + "\n" + show_diff(t.path, before, t.data)


def show_diff(path: str, before: Data | None, after: Data | None) -> str:
    """A unified diff of a file, image -> root, cut after DIFF_LINES lines; a binary file in one line."""
    before, after = held_or_none(before, path), held_or_none(after, path)  # a spooled file is diffed as bytes
    if before is not None and after is not None and (b"\0" in before[:8192] or b"\0" in after[:8192]):
        return f"    (binary: {len(before)} bytes in the image, {len(after)} here)"
    lines = list(difflib.diff_bytes(difflib.unified_diff, (before or b"").splitlines(keepends=True),
                                    (after or b"").splitlines(keepends=True),
                                    b"a/" + path.encode("utf-8", "surrogateescape") if before is not None else b"/dev/null",
                                    b"b/" + path.encode("utf-8", "surrogateescape") if after is not None else b"/dev/null", n=2))
    text = [ln.decode("utf-8", "replace").rstrip("\r\n") for ln in lines]
    cut = text[:DIFF_LINES] + ([f"... ({len(text) - DIFF_LINES} more lines)"] if len(text) > DIFF_LINES else [])
    return "\n".join("    " + ln for ln in cut)


def older_versions(queue: Queue, record: Record) -> str:
    """Which queue the record names and how its patches differ from this one's."""
    mine = {p.name: tuple((s.path, s.base_sha256, s.patched_sha256) for s in p.sections) for p in queue.patches}
    theirs = {n: tuple((f.path, f.base_sha256, f.patched_sha256) for f in files) for n, files in record.patches}
    changed = [n for n in queue.names if n in theirs and theirs[n] != mine.get(n)]
    new = [n for n in queue.names if n not in theirs]
    gone = [n for n in record.names if n not in mine]
    parts = [f"{', '.join(w)} {how}" for w, how in ((changed, "changed"), (new, "new"), (gone, "gone")) if w]
    by = f" by imgquilt {record.imgquilt_version}" if record.imgquilt_version else ""
    return (f"its record names series {record.series_sha256[:12]} (applied{by})"
            + (f"; since then: {'; '.join(parts)}" if parts else "; its patches are the same, series is not"))
