"""The shared content-addressed cache: `$XDG_CACHE_HOME/imgquilt` (else `~/.cache/imgquilt`).

Shared by every queue of a user: blobs are named by their digest, so an entry never goes stale and
two queues (or two transports of one image) find the same bytes. The cache is trusted exactly like
$HOME, and used only when it is the user's alone (trust.py: owner, mode, no links; else exit 6).
Every read still checks the digest again (against damage, not forgery), and a damaged entry is
dropped and counts as missing.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .trust import CacheDir

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def cache_root() -> Path:
    """Where the shared cache lives: `$IMGQUILT_CACHE_DIR`, else `$XDG_CACHE_HOME/imgquilt`, else `~/.cache/imgquilt`."""
    from ..settings import current

    explicit = current().cache_dir
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


ENTRY_CAP = 4 << 30  # an entry is an image file at most (the object store's cap)


class DigestStore:
    """sha256-named files below `<cache>/<kind>/ab/ab12…`, written once and atomically, checked on every read."""

    def __init__(self, kind: str, root: Path | None = None) -> None:
        self.part = CacheDir(root or cache_root(), kind)
        self.dir = self.part.path

    @staticmethod
    def rel(hexdigest: str) -> str:
        if not _HEX64.match(hexdigest):
            raise ValueError(f"not a sha256: {hexdigest!r}")
        return f"{hexdigest[:2]}/{hexdigest}"

    def path(self, hexdigest: str) -> Path:
        return self.dir / self.rel(hexdigest)

    def put(self, data) -> str:
        """Store `data` (bytes, or a Spooled: linked in when it can be) once and return its sha256 hex; a
        cache that cannot be written is not an error. No fsync: every read checks the hash, so a crash
        can lose an entry, never make a wrong one pass."""
        from ..fs.content import sha256_of

        hexdigest = sha256_of(data)
        if not self.part.exists(self.rel(hexdigest)):
            self.part.write(self.rel(hexdigest), data, durable=False)
        return hexdigest

    def get_many(self, hexdigests: list[str]) -> dict[str, object]:
        """get(spool=True) of each, in one pass over the fan-out directories: {hexdigest: content or None}."""
        wanted = [h for h in dict.fromkeys(hexdigests) if _HEX64.match(h or "")]
        found = self.part.read_content_many([self.rel(h) for h in wanted], cap=ENTRY_CAP)
        out: dict[str, object] = dict.fromkeys(hexdigests)
        out.update((h, self._sound(h, found.get(self.rel(h)))) for h in wanted)
        return out

    def get(self, hexdigest: str, *, spool: bool = False):
        """The bytes named `hexdigest`, or None when absent; a damaged entry is removed and reads as absent.
        `spool`: a large entry comes back as a Spooled over the file (file contents), never held."""
        if not _HEX64.match(hexdigest or ""):
            return None
        rel = self.rel(hexdigest)
        return self._sound(hexdigest, self.part.read_content(rel, cap=ENTRY_CAP) if spool else self.part.read(rel, cap=ENTRY_CAP))

    def _sound(self, hexdigest: str, data):
        """`data` read for `hexdigest` when it hashes to it; else None, and the damaged entry removed."""
        from ..fs.content import sha256_of

        if data is not None and sha256_of(data) != hexdigest:
            self.part.unlink(self.rel(hexdigest))
            return None
        return data
