"""Where bases come from: the content a path has in the image, before any applied patch.

From the object store by the sha256 targets.lock pins for the path, else from the image (`--image`,
else the lock's, else the last --image this work tree used: the opener decides). An explicit
--image wins over the lock. A base is never looked up by the hash a patch *wants*: that would
hide drift.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import UsageError
from ..queue.hunks import ABSENT
from ..store import ObjectStore, remember
from .files import FileState

if TYPE_CHECKING:  # the image side loads on use: `imgquilt top` opens no image
    from ..fs.types import Source

SourceOpener = Callable[[], "Source"]


class Bases:
    """Reads bases for one queue; the image is opened at most once, and only when needed."""

    def __init__(self, root: Path, store: ObjectStore, open_image: SourceOpener | None, *, image_explicit: bool) -> None:
        self.root = Path(root)
        self.store = store
        self._open_image = open_image
        self._image_explicit = image_explicit
        self._source: Source | None = None
        self._listing: list[str] | None = None

    def read(self, paths: list[str], *, keep: bool = True) -> dict[str, FileState]:
        """Each path's base; `keep=False` skips storing image bytes (import: a store write costs more than the read)."""
        out: dict[str, FileState] = {}
        need: list[str] = []
        from ..queue.lock import read_lock

        lock = None if self._image_explicit else read_lock(self.root / "targets.lock")
        for p in paths:
            t = lock.target(p) if lock is not None else None
            if t is not None:
                if t.base_sha256 == ABSENT:
                    out[p] = FileState(None, None, t.resolved)
                    continue
                data = self.store.get(t.base_sha256)
                if data is not None:
                    out[p] = FileState(data, t.mode & 0o777, t.resolved)
                    continue
            need.append(p)
        if need:
            targets = self._image().read_targets(need)
            for p in need:
                tf = targets[p]
                out[p] = FileState(tf.data, None if tf.data is None else tf.mode & 0o777, tf.resolved)
            if keep:
                remember(self.root, [targets[p].data for p in need])
        return out

    def ending_in(self, tail: str) -> list[str]:
        """Paths of the image ending in "/" + tail (for package-relative patch paths); [] if it cannot list."""
        if self._listing is None:
            src = self._image()
            from ..fs.types import ListsPaths

            self._listing = src.list_paths() if isinstance(src, ListsPaths) else []
        want = "/" + tail.strip("/")
        return [p for p in self._listing if ("/" + p.strip("/")).endswith(want)]

    def _image(self) -> Source:
        if self._source is None:
            if self._open_image is None:
                raise UsageError(
                    "A base must be read from the image, but no image is known.",
                    hint="Pass --image REF, or pin one with `imgquilt lock --image REF`.",
                )
            self._source = self._open_image()
        return self._source
