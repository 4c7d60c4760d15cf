"""One run's downloaded layer blobs, so a layer several images share is fetched from the registry once.

A fleet audit reads many images at once, and images of one family share their base layers. While a
memo is active, the first reader of a blob tees its download into a private temp directory; readers
of the same digest wait for that download and then read the local copy (hashed again, as any local
blob is). A download that fails is forgotten, and the next reader fetches the blob itself. The
directory goes when the memo is closed.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator


@dataclass
class _Entry:
    done: threading.Event = field(default_factory=threading.Event)
    path: Path | None = None  # set once the download verified


@dataclass(frozen=True)
class Claim:
    """What a reader of one digest does: read `ready` (a verified copy), or download into `spool`."""

    ready: Path | None = None
    spool: BinaryIO | None = None


class BlobMemo:
    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="imgquilt-blobs-"))
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def claim(self, digest: str) -> Claim:
        """A verified local copy of `digest`, or a file to spool the download into (this reader owns it)."""
        while True:
            with self._lock:
                entry = self._entries.get(digest)
                if entry is None:
                    self._entries[digest] = _Entry()
                    name = digest.replace(":", "-")
                    return Claim(spool=open(os.path.join(self._dir, name + ".part"), "wb"))
            entry.done.wait()
            if entry.path is not None:
                return Claim(ready=entry.path)
            # the owner's download failed: it was forgotten, so claim again

    def finished(self, digest: str, spool: BinaryIO, ok: bool) -> None:
        """The owner's download ended: verified (`ok`), or not (forgotten; a waiter downloads it itself)."""
        spool.close()
        part = Path(spool.name)
        with self._lock:
            entry = self._entries.pop(digest) if not ok else self._entries[digest]
            if ok:
                entry.path = part.with_suffix("")
                part.rename(entry.path)
            else:
                part.unlink(missing_ok=True)
        entry.done.set()

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


_active: BlobMemo | None = None


def active() -> BlobMemo | None:
    return _active


@contextmanager
def shared_downloads() -> Iterator[BlobMemo]:
    """Within this block every registry layer download of the process goes through one memo."""
    global _active
    memo = BlobMemo()
    previous, _active = _active, memo
    try:
        yield memo
    finally:
        _active = previous
        memo.close()
