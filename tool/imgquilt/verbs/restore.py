"""`restore` and `apply --reverse`: put a root back as its image has it, journaled as an in-place apply
is (rootfs.inplace: all or nothing, kill -9 included).

The image's bytes come from `--image` when given (the image the root was extracted from), else from
the object store by the sha256 the queue's lock pins (or the root's apply record names), else, for
`--reverse` of this very queue, from its patches taken off again (engine.undo), else from the image
the lock pins (read only then).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..engine.record import parse_record
from ..engine.result import RECORD_PATH
from ..engine.undo import ImageFile, plan_restore, plan_reverse
from ..errors import BadInput, ImgquiltError
from ..fs.paths import check_member_path
from ..fs.types import Source
from ..queue.hunks import sha256_hex
from ..queue.queue import Queue
from ..rootfs.inplace import hold_root, write_in_place
from ..rootfs.source import RootfsSource
from ..store import ObjectStore


@dataclass(frozen=True)
class Restored:
    """What a restore or a reverse did: the files written (resolved), those already as the image has them."""

    root: Path
    written: tuple[str, ...]
    already: tuple[str, ...]
    removed: tuple[str, ...] = ()  # of `written`: the files the image does not have (removed)
    bytecode: tuple[str, ...] = ()  # reverse: bytecode the apply removed, not brought back
    series_sha256: str = ""


Opener = Callable[[], Source]


class ImageBytes:
    """The image's bytes of a path, by the sha256 they must have: from the image given (`source`, every
    path read at once), else the object store, else the image the lock pins (`fallback`: opened only
    when a file is not stored, and never an error: not found is the answer then)."""

    def __init__(self, store: ObjectStore, source: Source | None = None, fallback: Opener | None = None,
                 paths: Sequence[str] = ()) -> None:
        self.store = store
        self.read = dict(source.read_targets(list(paths))) if source is not None and paths else {}
        self.fallback: Opener | None = fallback
        self.opened: Source | None = None

    def __call__(self, path: str, sha: str) -> tuple[bool, bytes | None]:
        t = self.read.get(path)
        if t is not None and sha256_hex(t.data) == sha:
            return True, t.data
        found = self.store.get_or_absent(sha)
        if found[0] or self.fallback is None or path in self.read:
            return found
        try:
            if self.opened is None:
                self.opened = self.fallback()
            self.read.update(self.opened.read_targets([path]))
        except ImgquiltError:
            self.fallback = None  # not readable here: the refusal names --image
            return found
        return self(path, sha)


def restore(queue: Queue, root: Path, paths: Sequence[str], image: Source | None = None, pinned: Opener | None = None) -> Restored:
    """Put `paths` of `root` back as the image has them (what --image has, else what the lock pins,
    else what the root's record says the image had)."""
    paths = [check_member_path(p.strip("/"), what="path") for p in paths]
    with hold_root(root) as held:
        src = RootfsSource(root)
        current = src.read_targets(paths)
        record = parse_record(src.read_targets([RECORD_PATH])[RECORD_PATH].data)
        known: dict[str, ImageFile] = {}
        if image is not None:
            for p, t in image.read_targets(paths).items():
                known[p] = ImageFile(sha256_hex(t.data), t.mode, t.uid, t.gid)
        lock = queue.lock()
        firsts = {named: base for named, base, _ in record.first_and_last().values()} if record is not None else {}
        for p in paths:
            lt = lock.target(p) if lock is not None else None
            if p in known:
                continue
            if lt is not None:
                known[p] = ImageFile(lt.base_sha256, lt.mode, lt.uid, lt.gid)
            elif p in firsts:
                known[p] = ImageFile(firsts[p])
        bytes_of = ImageBytes(ObjectStore(queue.root), image, pinned if image is None else None, paths)
        plan = plan_restore(src.info(), paths, current, known, bytes_of)
        written = write_in_place(root, plan, held=held)
        gone = {f.resolved for f in plan.files if f.final is None}
        return Restored(root, tuple(written), tuple(p for p in paths if current[p].resolved not in written),
                        tuple(w for w in written if w in gone))


def reverse(queue: Queue, root: Path, image: Source | None = None, pinned: Opener | None = None) -> Restored:
    """Take off what imgquilt applied to `root` (its record says what): every file back as the image has
    it, the files the series created gone, the record and the directories that apply made too."""
    with hold_root(root) as held:
        src = RootfsSource(root)
        record_file = src.read_targets([RECORD_PATH])[RECORD_PATH]
        record = parse_record(record_file.data)
        if record is None:
            what = "holds no apply record" if record_file.data is None else "has an apply record imgquilt cannot read"
            raise BadInput(f"{root} {what} ({RECORD_PATH}): imgquilt applied nothing there it could take off.",
                           hint="`imgquilt restore PATH... --root ROOT` puts single files back as the image has them.")
        named = [n for n, _base, _last in record.first_and_last().values()]
        current = src.read_targets(named)
        bytes_of = ImageBytes(ObjectStore(queue.root), image, pinned if image is None else None, named)
        plan, already = plan_reverse(src.info(), record, record_file, current, bytes_of, queue)
        written = write_in_place(root, plan, held=held, remove_dirs=record.created_dirs)
        gone = {f.resolved for f in plan.files if f.final is None}
        return Restored(root, tuple(w for w in written if w != RECORD_PATH), tuple(already),
                        tuple(w for w in written if w in gone and w != RECORD_PATH), record.bytecode, record.series_sha256)
