"""Root filesystems of images, unpacked once per manifest digest in the shared cache (`rootfs/`).

`rootfs/<hex>.tree/` is the unpacked filesystem; `rootfs/<hex>` is its marker, written after the
tree is complete and holding a seal (cache.seal) over the digest and the tree directory's device,
inode and change time. A tree is used only when its marker's seal verifies under this user's cache key, so a tree
restored from another machine or job, planted, half-written by a crash, or put back under the same
name is not believed: it is removed and unpacked again. `imgquilt cache prune` removes trees too.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from . import cache_root
from .seal import entry_seal, entry_sealed
from .trust import CacheDir

_KIND = "rootfs"
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")


class RootfsCache:
    def __init__(self, root: Path | None = None) -> None:
        self.part = CacheDir(root or cache_root(), "rootfs")
        self.dir = self.part.path

    @staticmethod
    def _hex(digest: str) -> str:
        m = _DIGEST.match(digest or "")
        if m is None:
            raise ValueError(f"not a sha256 digest: {digest!r}")
        return m.group(1)

    def tree(self, digest: str) -> Path:
        return self.dir / f"{self._hex(digest)}.tree"

    def _fields(self, digest: str) -> tuple[str, ...] | None:
        try:
            st = os.lstat(self.tree(digest))
        except OSError:
            return None
        if not os.path.isdir(self.tree(digest)) or os.path.islink(self.tree(digest)):
            return None
        return digest, str(st.st_dev), str(st.st_ino), str(st.st_ctime_ns)

    def believed(self, digest: str) -> Path | None:
        """The tree of `digest` when its marker's seal verifies; None otherwise (a stray tree removed)."""
        hexd = self._hex(digest)
        words = (self.part.read(hexd, cap=1 << 10) or b"").decode("ascii", "replace").split()
        fields = self._fields(digest)
        if fields is not None and len(words) == 1 and entry_sealed(words[0], _KIND, *fields):
            return self.tree(digest)
        self.discard(digest)
        return None

    def staging(self) -> Path:
        """An empty directory in the part, to unpack into before it is sealed."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=".unpack-", dir=self.dir))

    def seal(self, digest: str, staged: Path) -> Path | None:
        """Move `staged` into place as the tree of `digest` and write its marker; None when there is no
        cache key (nothing sealed is then believed, so the caller uses `staged` once and removes it)."""
        hexd = self._hex(digest)
        self.discard(digest)
        os.rename(staged, self.tree(digest))
        fields = self._fields(digest)
        tag = entry_seal(_KIND, *fields) if fields is not None else None
        if tag is None:
            return None
        self.part.write(hexd, f"{tag}\n".encode(), mode=0o600)
        return self.tree(digest)

    def discard(self, digest: str) -> None:
        self.part.unlink(self._hex(digest))
        _rmtree(self.tree(digest))


def _rmtree(path: Path) -> None:
    """Remove a tree of ours, read-only directories in it made writable first; never follows a link."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path):
        os.unlink(path)
        return
    for top, dirs, _ in os.walk(path, followlinks=False):
        for d in dirs:
            p = os.path.join(top, d)
            if not os.path.islink(p):
                try:
                    os.chmod(p, 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)
