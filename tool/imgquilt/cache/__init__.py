"""The shared content-addressed cache: `$XDG_CACHE_HOME/imgquilt` (else `~/.cache/imgquilt`).

Shared by every queue of a user: blobs are named by their digest, so an entry never goes stale and
two queues (or two transports of one image) find the same bytes. Nothing read from here is trusted:
every read checks the digest again, and a damaged entry is dropped and counts as missing.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..util.atomic import atomic_write

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def cache_root() -> Path:
    """Where the shared cache lives: `$IMGQUILT_CACHE_DIR`, else `$XDG_CACHE_HOME/imgquilt`, else `~/.cache/imgquilt`."""
    explicit = os.environ.get("IMGQUILT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "imgquilt"


@dataclass(frozen=True)
class Usage:
    """What one part of the cache holds."""

    entries: int
    bytes: int


class DigestStore:
    """sha256-named files below `<cache>/<kind>/ab/ab12…`, written once and atomically, checked on every read."""

    def __init__(self, kind: str, root: Path | None = None) -> None:
        self.dir = (root or cache_root()) / kind

    def path(self, hexdigest: str) -> Path:
        if not _HEX64.match(hexdigest):
            raise ValueError(f"not a sha256: {hexdigest!r}")
        return self.dir / hexdigest[:2] / hexdigest

    def put(self, data: bytes) -> str:
        """Store `data` (once) and return its sha256 hex; a cache that cannot be written is not an error."""
        hexdigest = hashlib.sha256(data).hexdigest()
        dest = self.path(hexdigest)
        if self.get(hexdigest) is not None:
            return hexdigest
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, data, mode=0o444)
        except OSError:
            pass
        return hexdigest

    def get(self, hexdigest: str) -> bytes | None:
        """The bytes named `hexdigest`, or None when absent; a damaged entry is removed and reads as absent."""
        if not _HEX64.match(hexdigest or ""):
            return None
        path = self.path(hexdigest)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        if hashlib.sha256(data).hexdigest() != hexdigest:
            try:
                path.unlink()
            except OSError:
                pass
            return None
        try:
            os.utime(path)  # last use, for LRU eviction
        except OSError:
            pass
        return data

    def usage(self) -> Usage:
        entries = size = 0
        for path in self.dir.glob("??/*"):
            try:
                size += path.lstat().st_size
                entries += 1
            except OSError:
                pass
        return Usage(entries, size)
