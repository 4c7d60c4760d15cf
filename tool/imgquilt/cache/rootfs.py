"""Root filesystems of images, unpacked once per manifest digest in the shared cache (`rootfs/`).

`rootfs/<hex>.tree/` is the unpacked filesystem; `rootfs/<hex>` is its marker, written after the
tree is complete and on disk (one syncfs of the cache's filesystem, not an fsync per file) and holding a seal (cache.seal) over the digest, the tree directory's device,
inode and change time and the tree's size (the bytes of its regular files), then that size.

The trees count in the cache's cap (IMGQUILT_CACHE_MAX, cache.usage): a tree is one entry of its
size, least recently used first (reading its marker touches it), and evicting it removes the tree.
A tree in use holds a shared lock on its marker, so no other process evicts it under a probe. Files
with the same bytes, mode and owner are stored once (`rootfs/pool/`, see rootfs.extract): each tree
holds hard links to the pool's copy, so two images that share files share their inodes; a tree still
counts its full size (the cache then uses at most what it counts). Pool files no tree links to any
more go when a tree is evicted. A tree is used only when its marker's seal verifies under this user's cache key, so a tree
restored from another machine or job, planted, half-written by a crash, or put back under the same
name is not believed: it is removed and unpacked again. `imgquilt cache prune` removes trees too.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import re
import secrets
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

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

    @property
    def pool(self) -> Path:
        return self.dir / "pool"

    def trusted_pool(self) -> Path | None:
        """The pool, believed: its seal (`pool/.seal`, over the pool directory's device and inode under
        the cache key) verifies, or it is made anew and sealed. A file in the pool is linked into a new
        tree by its name alone, so a pool without that seal (restored from another machine or job,
        planted, or from an imgquilt before the seal) is removed first, never used. None: no cache key
        (nothing sealed would be believed): unpack without a pool."""
        pool = self.pool
        for _ in range(3):
            try:
                st: os.stat_result | None = os.lstat(pool)
            except FileNotFoundError:
                st = None
            except OSError:
                return None
            if st is not None and stat.S_ISDIR(st.st_mode):
                tag = (self.part.read("pool/.seal", cap=1 << 10) or b"").decode("ascii", "replace").strip()
                if entry_sealed(tag, _KIND, "pool", str(st.st_dev), str(st.st_ino)):
                    return pool
            if st is not None:
                _discard_pool(pool)
            try:
                os.makedirs(self.dir, mode=0o700, exist_ok=True)
                os.mkdir(pool, 0o700)
                st = os.lstat(pool)
            except FileExistsError:
                continue  # another process made one meanwhile: look at it
            except OSError:
                return None
            tag = entry_seal(_KIND, "pool", str(st.st_dev), str(st.st_ino)) or ""
            if not tag or not self.part.write("pool/.seal", f"{tag}\n".encode(), mode=0o600):
                return None
            return pool
        return None

    def _fields(self, digest: str, size: int) -> tuple[str, ...] | None:
        try:
            st = os.lstat(self.tree(digest))
        except OSError:
            return None
        if not os.path.isdir(self.tree(digest)) or os.path.islink(self.tree(digest)):
            return None
        return digest, str(st.st_dev), str(st.st_ino), str(st.st_ctime_ns), str(size)

    def believed(self, digest: str) -> Path | None:
        """The tree of `digest` when its marker's seal verifies; None otherwise (a stray tree removed)."""
        hexd = self._hex(digest)
        words = (self.part.read(hexd, cap=1 << 10) or b"").decode("ascii", "replace").split()
        fields = self._fields(digest, int(words[1])) if len(words) == 2 and words[1].isdigit() else None
        if fields is not None and entry_sealed(words[0], _KIND, *fields):
            return self.tree(digest)
        self.discard(digest)
        return None

    @contextmanager
    def held(self, digest: str) -> Iterator[None]:
        """A shared lock on the marker of `digest` while its tree is used: eviction passes it by."""
        try:
            fd = os.open(self.dir / self._hex(digest), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    def staging(self) -> Path:
        """An empty directory in the part, to unpack into before it is sealed."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=".unpack-", dir=self.dir))

    def seal(self, digest: str, staged: Path, size: int = 0, *, synced: bool | None = None) -> Path | None:
        """Move `staged` into place as the tree of `digest` (`size` bytes of files) and write its marker;
        None when there is no cache key (nothing sealed is then believed, so the caller uses `staged`
        once and removes it) or when `synced` is False (the caller's sync_tree failed). With `synced`
        None the tree is synced here."""
        hexd = self._hex(digest)
        if synced is None:
            sync_tree(staged)  # the files on disk before the seal says so: a power cut leaves nothing trusted
        elif not synced:
            return None
        if self.believed(digest) is not None:
            # another process sealed the same image's tree meanwhile (two cold boots at once); it may be
            # in use by a third: kept, and this copy, which no one else knows, removed
            _rmtree(staged)
            return self.tree(digest)
        self.discard(digest)
        os.rename(staged, self.tree(digest))
        fields = self._fields(digest, size)
        tag = entry_seal(_KIND, *fields) if fields is not None else None
        if tag is None:
            _rmtree(self.tree(digest))  # used this once, never believed: not left behind
            return None
        self.part.write(hexd, f"{tag} {size}\n".encode(), mode=0o600)
        return self.tree(digest)

    def discard(self, digest: str) -> None:
        self.part.unlink(self._hex(digest))
        _rmtree(self.tree(digest))


def sync_tree(tree: Path) -> None:
    """Everything written to the tree's filesystem made durable, once (syncfs(2)): the unpacker
    fsyncs no file, and one sync of the filesystem costs what is still dirty, not a flush per file
    (measured: about 0.1 s after a cold unpack of the vLLM-sized image, whose pages the kernel had
    mostly written back meanwhile). Where syncfs is not there, sync(2)."""
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if getattr(libc, "syncfs", None) is None or libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def marker_size(marker: Path) -> int:
    """The size a tree's marker gives (its second word), 0 when it gives none."""
    try:
        with open(marker, "rb", opener=lambda p, fl: os.open(p, fl | os.O_NOFOLLOW)) as f:
            words = f.read(1 << 10).split()
    except OSError:
        return 0
    return int(words[1]) if len(words) == 2 and words[1].isdigit() else 0


def evict(marker: Path) -> bool:
    """Remove the marker `rootfs/<hex>` and its tree unless a process uses it (its shared lock), then
    the pool files no tree links to any more; True when it went."""
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # in use
        os.unlink(marker)
    except OSError:
        return False
    finally:
        os.close(fd)
    _rmtree(marker.with_name(marker.name + ".tree"))
    collect_pool(marker.parent / "pool")
    return True


def collect_pool(pool: Path) -> None:
    """Remove the pool's files that no tree links to: those whose every link is a pool name (its
    sha256 name, its shape's, or both)."""
    names: dict[tuple[int, int], list[str]] = {}
    links: dict[tuple[int, int], int] = {}
    for sub in _scan(pool):
        if not sub.is_dir(follow_symlinks=False):
            continue
        for entry in _scan(Path(sub.path)):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                names.setdefault((st.st_dev, st.st_ino), []).append(entry.path)
                links[(st.st_dev, st.st_ino)] = st.st_nlink
    for inode, paths in names.items():
        if links[inode] <= len(paths):
            for path in paths:
                try:
                    os.unlink(path)
                except OSError:
                    continue


def _discard_pool(pool: Path) -> None:
    """An unbelieved pool out of the way at once (renamed: no tree is linked from it meanwhile), then
    removed; what is left by a crash is a `.unpack-` directory, which `cache prune` removes."""
    aside = pool.with_name(f".unpack-pool-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.rename(pool, aside)
    except OSError:
        return  # gone already (another process discarded it)
    _rmtree(aside)


def _scan(d: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(d) as it:
            return list(it)
    except OSError:
        return []


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
