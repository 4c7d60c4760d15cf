"""`restore` and `apply --reverse`: put a root back as its image has it, journaled as an in-place apply
is (rootfs.inplace: all or nothing, kill -9 included).

The image's bytes come from `--image` when given (the image the root was extracted from), else from
the object store by the sha256 the queue pins (targets.lock, its sections' bases), else, for
`--reverse` of this very queue, from its patches taken off again (engine.undo), else from the image
the lock pins (read only then). The root's apply record is a file of the root: `restore` does not
read it, and `--reverse` obeys it only as far as the queue agrees (a version of this queue, every
base one the queue pins, every deletion a file the queue creates; verbs.versions, engine.undo).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..engine.record import parse_record
from ..engine.result import RECORD_PATH
from ..engine.undo import ImageFile, Pins, plan_restore, plan_reverse, queue_pins, record_problems
from ..errors import BadInput, ForeignRecord, ImgquiltError, UsageError
from ..fs.paths import check_member_path
from ..fs.types import Source, read_targets
from ..queue.hunks import sha256_hex
from ..queue.lock import Lock, LockFile, read_lock_file
from ..queue.queue import Queue
from ..rootfs.inplace import hold_root, write_in_place
from ..rootfs.source import RootfsSource
from ..store import ObjectStore
from .refs import Progress, load_queue, open_ref, pin_opener, pinned_image
from .versions import version_problem


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


def image_bytes(root: Path, lock: Lock | None, platform: str | None, progress: Progress | None) -> ImageBytes:
    """The image's bytes of a path by sha256, to show a hand edit of a root as a diff: the object store,
    else the image `lock` pins (read only on a refusal)."""
    return ImageBytes(ObjectStore(root), fallback=pin_opener(root, lock, platform, progress))


def _pins(queue: Queue) -> tuple[Pins, LockFile]:
    """What the queue pins (targets.lock's default and profiles, every selection's first sections)."""
    lf = read_lock_file(queue.lock_path)
    locks = ([lf.default] if lf.default is not None else []) + [p.lock for p in lf.profiles]
    return queue_pins([queue, *(queue.selection(p.select) for p in lf.profiles)], locks), lf


def restore(queue: Queue, root: Path, paths: Sequence[str], image: Source | None = None, pinned: Opener | None = None) -> Restored:
    """Put `paths` of `root` back as the image has them (what --image has, else what the queue pins:
    targets.lock, else the first section on the path). The root's apply record is not read."""
    paths = [check_member_path(p.strip("/"), what="path") for p in paths]
    pins, _ = _pins(queue)
    with hold_root(root) as held:
        src = RootfsSource(root)
        links = [p for p in paths if p in queue.link_paths()]  # a link section's path: the link itself
        current = src.read_targets(paths, links=links)
        known: dict[str, ImageFile] = {}
        if image is not None:
            for p, t in read_targets(image, paths, links).items():
                known[p] = ImageFile(sha256_hex(t.data), t.mode, t.uid, t.gid)
        for p in paths:
            if p not in known and p in pins.image:
                known[p] = pins.image[p]
        bytes_of = ImageBytes(ObjectStore(queue.root), image, pinned if image is None else None, paths)
        plan = plan_restore(src.info(), paths, current, known, bytes_of, links)
        written = write_in_place(root, plan, held=held)
        gone = {f.resolved for f in plan.files if f.final is None}
        return Restored(root, tuple(written), tuple(p for p in paths if current[p].resolved not in written),
                        tuple(w for w in written if w in gone))


def reverse(queue: Queue, root: Path, image: Source | None = None, pinned: Opener | None = None,
            profile: str | None = None) -> Restored:
    """Take off what imgquilt applied to `root` (its record says what): every file back as the image has
    it, the files the series created gone, the record and the directories that apply made too.
    `profile` (apply --reverse --profile NAME, the apply line repeated): a record written by another
    pin's apply is refused (UsageError, naming that pin) before anything is written."""
    with hold_root(root) as held:
        src = RootfsSource(root)
        record_file = src.read_targets([RECORD_PATH])[RECORD_PATH]
        record = parse_record(record_file.data)
        if record is None:
            what = "holds no apply record" if record_file.data is None else "has an apply record imgquilt cannot read"
            raise BadInput(f"{root} {what} ({RECORD_PATH}): imgquilt applied nothing there it could take off.",
                           hint="`imgquilt restore PATH... --root ROOT` puts single files back as the image has them.")
        pins, lf = _pins(queue)
        if profile is not None:
            _same_profile(queue, lf, profile, record.series_sha256, root)
        why = version_problem(queue, lf, record.series_sha256)
        if why is not None:
            raise _foreign(root, why)
        named = [n for n, _base, _last in record.first_and_last().values()]
        links = [n for n in named if n in queue.link_paths()]  # taken off as links, never followed
        current = src.read_targets(named, links=links)
        bytes_of = ImageBytes(ObjectStore(queue.root), image, pinned if image is None else None, named)
        own = next((s for s in (queue, *(queue.selection(p.select) for p in lf.profiles))
                    if s.series_sha256 == record.series_sha256), None)
        image_has = {p: sha256_hex(t.data) for p, t in bytes_of.read.items()}
        problems = record_problems(record, pins, current, image_has, own)
        if problems:
            raise _foreign(root, "it does not match this queue: " + "; ".join(problems))
        modes = {p: f.mode for p, f in pins.image.items() if f.mode is not None}  # targets.lock's pins
        modes.update({p: t.mode for p, t in bytes_of.read.items() if t.data is not None and not t.link})  # --image's
        plan, already = plan_reverse(src.info(), record, record_file, current, bytes_of, queue, links, modes)
        written = write_in_place(root, plan, held=held, remove_dirs=record.created_dirs)
        gone = {f.resolved for f in plan.files if f.final is None}
        return Restored(root, tuple(w for w in written if w != RECORD_PATH), tuple(already),
                        tuple(w for w in written if w in gone and w != RECORD_PATH), record.bytecode, record.series_sha256)


def _same_profile(queue: Queue, lf: LockFile, profile: str, series: str | None, root: Path) -> None:
    """The root's record was written by an apply of `profile`'s selection, or of none of the other pins'
    current selections (an older version of it: the checks below judge that)."""
    sel = {None: queue.selection(()), **{p.name: queue.selection(p.select) for p in lf.profiles}}
    if series is None or sel[profile].series_sha256 == series:
        return
    owners = [n for n, s in sel.items() if n != profile and s.series_sha256 == series and (n is not None or lf.default is not None)]
    if owners:
        who = "the default (no --profile)" if owners[0] is None else f"profile {owners[0]}"
        flag = "without --profile" if owners[0] is None else f"with --profile {owners[0]}"
        raise UsageError(f"{root} was applied as {who}, not profile {profile}: its apply record names that selection. "
                         "Nothing was written.", hint=f"Take it off {flag} (repeat the apply line that wrote it, with --reverse).")


def _foreign(root: Path, why: str) -> ForeignRecord:
    return ForeignRecord(
        f"Refused: the apply record in {root} ({RECORD_PATH}) is not one this queue can take off: {why}. "
        "imgquilt did not act on it. Nothing was written.",
        hint="A root or an image can ship any record, so the record only says where to look: every byte put back is "
             "one this queue pins, and only files its own sections create are deleted. Take off the version that was "
             "applied with that version of the queue (a commit of it), or put files back one by one with "
             f"`imgquilt restore PATH... --root {root}` (or --image REF, the image the root came from).")


# --- the verbs, as api.restore() and api.reverse() take them -------------------------------------
def restore_queue(queue: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str],
                  paths: Sequence[str], image: str | None = None, platform: str | None = None,
                  progress: Progress | None = None) -> Restored:
    """Put files of a root back as the image has them (api.restore() says the rest)."""
    q = load_queue(queue)
    src = open_ref(image, platform, root=q.root, progress=progress) if image else None
    return restore(q, Path(root), paths, src, pinned_image(q, platform, progress))


def reverse_queue(queue: str | os.PathLike[str] | None = None, *, root: str | os.PathLike[str],
                  image: str | None = None, platform: str | None = None, progress: Progress | None = None,
                  profile: str | None = None) -> Restored:
    """`apply --reverse --root ROOT` (api.reverse() says the rest)."""
    q = load_queue(queue)
    if profile is not None:
        from .profiles import ALL, lock_file, resolve

        if profile == ALL:
            raise UsageError("A root holds one deployment: `apply --reverse` takes one --profile NAME, not all.",
                             hint="Give the --profile the root was applied with (its apply record names it; "
                                  "`imgquilt audit --root ROOT` says which).")
        chosen = resolve(q, profile, lock_file(q.root))
        src = open_ref(image, platform, root=q.root, progress=progress) if image else None
        return reverse(q, Path(root), src, pin_opener(q.root, chosen.lock, platform, progress), profile=profile)
    src = open_ref(image, platform, root=q.root, progress=progress) if image else None
    return reverse(q, Path(root), src, pinned_image(q, platform, progress))
