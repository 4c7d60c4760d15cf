"""Where bases come from: the content a path has in the image, before any applied patch.

From the object store by the sha256 targets.lock pins for the path, else from the image (`--image`,
else the lock's, else the last --image this work tree used: the opener decides). An explicit
--image wins over the lock. A base is never looked up by the hash a patch *wants*: that would
hide drift.

Every base read from an image is also remembered as a fact about that image (its manifest digest):
the path, where it resolves, its sha256, mode, owner and layer, in `.imgquilt/state/bases.json`
(sealed with the user's key, as journals are: a cloned or planted file is never believed), and its
bytes in the object store. That is what lets a command that changes the queue write targets.lock in
the same transaction (work.relock) without opening the image again: a file the lock does not pin
yet was read when it was `add`ed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Sequence

from ..errors import ImgquiltError, UsageError
from ..fs.content import held_or_none
from ..fs.types import ImageInfo, Located, TargetFile, located_or_read, read_targets
from ..queue.hunks import ABSENT
from ..store import ObjectStore, remember
from ..util.statedir import StateDir
from .files import FileState

if TYPE_CHECKING:  # the image side loads on use: `imgquilt top` opens no image
    from ..fs.types import Source
    from ..queue.lock import Lock

SourceOpener = Callable[[], "Source"]


class Bases:
    """Reads bases for one queue; the image is opened at most once, and only when needed."""

    def __init__(self, root: Path, store: ObjectStore, open_image: SourceOpener | None, *, image_explicit: bool,
                 pin: Callable[[], str | None] | None = None) -> None:
        self.root = Path(root)
        self._pin = pin  # the profile whose pin the bases come from (None: the default pin)
        self.store = store
        self._open_image = open_image
        self._image_explicit = image_explicit
        self._source: Source | None = None
        self._listing: list[str] | None = None
        self.seen: dict[str, TargetFile] = {}  # this run's reads from the image, bytes included

    def read(self, paths: list[str], *, keep: bool = True, links: Collection[str] = ()) -> dict[str, FileState]:
        """Each path's base; `keep=False` skips storing image bytes (import: a store write costs more than the read).
        `links`: paths read as themselves (a symlink there is not followed: see fs.types.Source)."""
        return {p: FileState(held_or_none(t.data, p), None if t.data is None else t.mode & 0o777, t.resolved, t.link)
                for p, t in self.targets(paths, keep=keep, links=links).items()}

    def targets(self, paths: list[str], *, keep: bool = True, links: Collection[str] = ()) -> dict[str, TargetFile]:
        """Each path's base with its metadata: the lock's and the stored bytes where it pins them, else the image's."""
        out: dict[str, TargetFile] = {}
        need: list[str] = []
        lock = self.lock()
        as_link = set(links)
        for p in paths:
            t = lock.target(p) if lock is not None else None
            # the lock read the path as the series did: as itself for a symlink section, else followed;
            # a read the other way is the lock's only where no link was on the last step (resolved == path)
            if t is not None and t.link != (p in as_link) and not (p in as_link and t.resolved == p):
                t = None
            if t is not None:
                data = None if t.base_sha256 == ABSENT else self.store.get(t.base_sha256)
                if data is not None or t.base_sha256 == ABSENT:
                    out[p] = TargetFile(p, t.resolved, data, t.mode, t.uid, t.gid, t.layer, link=t.link and p in as_link)
                    continue
            need.append(p)
        if need:
            targets = read_targets(self._image(), need, [p for p in need if p in as_link])
            out.update((p, targets[p]) for p in need)
            if keep:
                remember(self.root, [targets[p].data for p in need])
            self.seen.update((p, targets[p]) for p in need)
            self._record(self._image().info().digest, [targets[p] for p in need])
        return out

    def locate(self, paths: list[str], *, read: Collection[str] = ()) -> dict[str, TargetFile | Located]:
        """`targets`, but a path outside `read` that the lock does not pin (an extension module the
        Python check looks for) is only located in an image that can (fs.types.LocatesFiles): its bytes
        are not read, stored or recorded."""
        lock = self.lock()
        reading = set(read)
        loose = [p for p in paths if p not in reading and (lock is None or lock.target(p) is None)]
        return located_or_read(paths, loose, self._image, self.targets)

    def lock(self) -> Lock | None:
        """The lock bases are taken from (none with an explicit --image, which wins over it): the pin
        of the profile the work tree follows, else the default pin."""
        from ..queue.lock import read_lock_file

        if self._image_explicit:
            return None
        lf = read_lock_file(self.root / "targets.lock")
        name = self._pin() if self._pin is not None else None
        if name is None:
            return lf.default
        found = lf.profile(name)
        return found.lock if found is not None else None

    def info(self) -> ImageInfo:
        """What the bases are the bases of: the image the lock pins, else the image."""
        lock = self.lock()
        if lock is None:
            return self._image().info()
        # a rootfs's digest is over its targets: recomputed from them when a lock is made again
        return lock.image if lock.image.kind != "rootfs" else replace(lock.image, digest=None)

    def ending_in(self, tail: str) -> list[str]:
        """Paths of the image ending in "/" + tail (for package-relative patch paths); [] if it cannot list."""
        if self._listing is None:
            src = self._image()
            from ..fs.types import ListsPaths

            self._listing = src.list_paths() if isinstance(src, ListsPaths) else []
        want = "/" + tail.strip("/")
        return [p for p in self._listing if ("/" + p.strip("/")).endswith(want)]

    def as_source(self) -> Source:
        """The pinned image as a Source: targets read as `targets` reads them (lock and store first)."""
        return _PinnedImage(self)

    def image(self) -> Source:
        """The image itself (opened now if it was not): for reads beyond the queue's targets."""
        return self._image()

    def _image(self) -> Source:
        if self._source is None:
            if self._open_image is None:
                raise UsageError(
                    "A base must be read from the image, but no image is known.",
                    hint="Pass --image REF, or pin one with `imgquilt lock --image REF`.",
                )
            self._source = self._open_image()
        return self._source

    # --- what was read from which image -------------------------------------------------
    def recorded(self, digest: str | None) -> dict[str, RecordedBase]:
        """The bases read from the image with manifest `digest`, in this run or an earlier one."""
        if not digest:
            return {}
        out = _read_records(self.root).get(digest, {})
        if self._source is not None and self._source.info().digest == digest:
            out.update((p, RecordedBase.of(t)) for p, t in self.seen.items())
        return out

    def _record(self, digest: str | None, targets: list[TargetFile]) -> None:
        """Remember `targets` as read from the image `digest` (best effort: a read-only queue skips it)."""
        if not digest:
            return
        try:
            records = _read_records(self.root)
            mine = records.pop(digest, {})
            mine.update((t.path, RecordedBase.of(t)) for t in targets)
            records[digest] = mine  # last used last: the oldest image goes first
            _write_records(self.root, dict(list(records.items())[-_KEEP_IMAGES:]))
        except (ImgquiltError, OSError):
            pass


class _PinnedImage:
    """A Source over Bases: `lock` and `refresh --rehash` verify a series on it without opening the image
    when the object store holds every base the lock pins."""

    def __init__(self, bases: Bases) -> None:
        self._bases = bases

    def info(self) -> ImageInfo:
        return self._bases.info()

    def read_targets(self, paths: Sequence[str], *, links: Collection[str] = ()) -> dict[str, TargetFile]:
        return self._bases.targets(list(paths), links=links)

    def locate(self, paths: Sequence[str], *, first: bool, read: Collection[str] = ()) -> dict[str, TargetFile | Located]:
        """fs.types.LocatesFiles: every path decided (`first` or not), an unpinned one only located."""
        return self._bases.locate(list(paths), read=read)


_RECORDS = "bases.json"
_KEEP_IMAGES = 4


@dataclass(frozen=True)
class RecordedBase:
    """A base as it was read from an image: everything targets.lock pins for it, and no bytes (those
    are in the object store, or in Bases.seen for this run)."""

    path: str
    resolved: str
    sha256: str
    mode: int
    uid: int
    gid: int
    layer: str | None
    link: bool = False  # read as the symlink itself (a symlink section's path); its sha256 is over its target

    @classmethod
    def of(cls, t: TargetFile) -> RecordedBase:
        from ..queue.hunks import sha256_hex

        return cls(t.path, t.resolved, sha256_hex(t.data), t.mode, t.uid, t.gid, t.layer, t.link)


def _read_records(root: Path) -> dict[str, dict[str, RecordedBase]]:
    """digest -> path -> the recorded base; {} for anything not sealed here (planted, copied, damaged)."""
    from ..util.sealing import sealed_here

    try:
        raw = StateDir(root, "state").read(_RECORDS)
        doc = json.loads(raw) if raw is not None else None
        if not isinstance(doc, dict) or doc.get("version") != 1 or not sealed_here(doc):
            return {}
        return {str(digest): {str(p): RecordedBase(str(p), str(f["resolved"]), str(f["sha256"]), int(f["mode"]), int(f["uid"]),
                                                   int(f["gid"]), None if f["layer"] is None else str(f["layer"]),
                                                   f.get("link") is True)
                              for p, f in files.items()}
                for digest, files in doc["images"].items()}
    except (ImgquiltError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # a damaged record is no record: the image is read again


def _write_records(root: Path, records: dict[str, dict[str, RecordedBase]]) -> None:
    from ..util.sealing import seal

    doc: dict = {"version": 1, "images": {
        digest: {p: {"resolved": t.resolved, "sha256": t.sha256, "mode": t.mode, "uid": t.uid, "gid": t.gid, "layer": t.layer,
                     **({"link": True} if t.link else {})}
                 for p, t in sorted(files.items())}
        for digest, files in records.items()}}
    doc["seal"] = seal(doc)
    StateDir(root, "state").write(_RECORDS, json.dumps(doc, sort_keys=True).encode())
