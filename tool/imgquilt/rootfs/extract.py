"""An image's layers unpacked into a directory, as the container runtime would lay them: bottom layer
first, OCI whiteouts (`.wh.NAME` deletes NAME below it, `.wh..wh..opq` hides what lower layers put in
its directory), regular files, directories, symlinks and hard links; device nodes, FIFOs and sparse
files are skipped (a sandbox brings its own /dev; no image builder writes sparse members).

Nothing is ever written outside `dest`: a member name that is absolute or holds `..` is taken as
relative and normalized, and every parent directory is resolved inside `dest` (symlinks re-rooted at
`dest`, as in the container) and then opened component by component without following a link.
Directory modes are set last, so a read-only directory of a lower layer does not stop a later one.

The tar is walked by image.layers.tarwalk (headers decoded by slicing; a file's data written from
the decompressed chunks it lies in, uncopied), not Python's tarfile: per member, that was most of
the unpacker's own CPU. Nothing is fsynced here: the tree is trusted only once cache.rootfs seals it.

With a `pool` directory (cache.rootfs's, on the same filesystem), each regular file is stored once:
the first file with those bytes, mode and owner is linked into the pool as
`<sha256[:2]>/<sha256>-<mode>-<uid>-<gid>`, and a later one (of this tree or another image's) is a
hard link to it. A file of up to PREHASH bytes is hashed before it is written, so a file the pool
already holds is linked and never written; a larger one is hashed as it is written and replaced by
the link afterwards.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
import stat
from pathlib import Path
from typing import BinaryIO, Iterable

from ..errors import BadInput
from ..fs.resolve import resolve
from ..image.layers.tarwalk import DIRECTORY, HARDLINK, SYMLINK, TarWalker
from ..util.reader import Reader
from .dirfd import open_dir
from .source import RootfsSource

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
PREHASH = 16 << 20  # a file this small is hashed from its chunks before it is written (see the docstring)
_AS_ROOT = os.geteuid() == 0
_REGULAR = frozenset("07")  # regular, contiguous ("\0", the old regular, is read as "0")
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _norm(name: str) -> str | None:
    if not name.startswith((".", "/")) and "/." not in name and "//" not in name:
        return name.rstrip("/") or None  # already clean: the usual case
    parts = [p for p in posixpath.normpath("/" + name).split("/") if p not in ("", ".")]
    return "/".join(parts) or None


class _Stream(Reader):
    """A layer's tar (a binary file) as the stream TarWalker reads: read() hands over whole chunks, a skip
    reads through (the decompressing stream under it checks the layer's digest at its end)."""

    chunk = 4 << 20

    def __init__(self, f: BinaryIO) -> None:
        self._read_some = f.read  # type: ignore[method-assign,assignment]


class _Tree:
    def __init__(self, dest: Path, pool: Path | None = None) -> None:
        self.dest = dest
        self.fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dir_modes: dict[str, int] = {}
        self.pool = pool
        self._pool_dirs: dict[str, int] = {}  # "ab" -> fd of pool/ab
        self.bytes = 0  # of the regular files written
        # head -> (its fd, resolved), the most recent few: a tar lists a directory's files together.
        # parent() lends these fds: valid until the next parent() call, which closes the stale ones.
        self._known: dict[str, tuple[int, str]] = {}
        self._stale: list[int] = []
        # who owns what this process creates (in a setgid directory the group is the directory's: unknown)
        self.ids = (os.geteuid(), os.getegid()) if not os.fstat(self.fd).st_mode & stat.S_ISGID else (-1, -1)
        self.umask = os.umask(0o022)
        os.umask(self.umask)

    def close(self) -> None:
        self.forget()
        self._close_stale()
        for fd in self._pool_dirs.values():
            os.close(fd)
        self._pool_dirs.clear()
        os.close(self.fd)

    def forget(self) -> None:
        """Drop the remembered parents: a link, a whiteout or a replaced directory may change what a path resolves to."""
        self._stale.extend(fd for fd, _ in self._known.values())
        self._known.clear()

    def _close_stale(self) -> None:
        for fd in self._stale:
            os.close(fd)
        self._stale.clear()

    def parent(self, rel: str) -> tuple[int, str, str]:
        """(fd of the resolved parent directory, made as needed, lent until the next call; the name in
        it; the resolved path)."""
        if self._stale:
            self._close_stale()
        head, _, name = rel.rpartition("/")
        known = self._known.get(head)
        if known is not None:
            resolved = known[1]
            return known[0], name, f"{resolved}/{name}" if resolved else name
        fd, resolved = self._below_known(head)
        if fd < 0:
            fd, resolved = self._resolved(head)
        if len(self._known) >= 64:
            old = next(iter(self._known))
            self._stale.append(self._known.pop(old)[0])
        self._known[head] = (fd, resolved)
        return fd, name, f"{resolved}/{name}" if resolved else name

    def _below_known(self, head: str) -> tuple[int, str]:
        """(fd, resolved) of `head` opened from its nearest remembered ancestor, component by component,
        made as needed, when every component below that is a real directory; (-1, "") when one is not
        (a symlink, a file): the caller resolves from the root then. A tar lists a directory before
        its files, so the parent of a new directory is usually remembered."""
        rest: list[str] = []
        up = head
        while up:
            up, _, last = up.rpartition("/")
            rest.append(last)
            known = self._known.get(up)
            if known is not None:
                fd, resolved = os.dup(known[0]), known[1]
                break
        else:
            fd, resolved = os.dup(self.fd), ""
        try:
            for part in reversed(rest):
                if part in ("", ".", ".."):
                    os.close(fd)
                    return -1, ""
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nfd
                resolved = f"{resolved}/{part}" if resolved else part
        except OSError:
            os.close(fd)
            return -1, ""
        return fd, resolved

    def _resolved(self, head: str) -> tuple[int, str]:
        """(fd, resolved) of `head` resolved from the root, links re-rooted at it, made as needed."""
        resolved = ""
        if head:
            try:
                r = resolve(head, RootfsSource._lookup(self.fd))
            except BadInput:
                raise _Skip() from None
            if r.node is not None and r.node.kind != "dir":
                raise _Skip()
            resolved = r.resolved
        try:
            return open_dir(self.fd, resolved.split("/") if resolved else [], create=True), resolved
        except (OSError, BadInput):
            raise _Skip() from None

    def remove(self, dfd: int, name: str) -> None:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):
            self.forget()
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            try:
                for child in os.listdir(sub):
                    self.remove(sub, child)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)

    def create(self, dfd: int, name: str, mode: int) -> int:
        """A new empty file `name` in dfd (`mode` less the umask), whatever was there removed (never followed)."""
        mode &= 0o777
        try:
            return os.open(name, _CREATE, mode, dir_fd=dfd)
        except FileExistsError:
            self.remove(dfd, name)
            return os.open(name, _CREATE, mode, dir_fd=dfd)

    def pool_dir(self, key: str) -> int | None:
        """The fd of the pool's directory for `key` (made as needed); None when the pool cannot be written."""
        sub = key[:2]
        fd = self._pool_dirs.get(sub)
        if fd is None:
            assert self.pool is not None
            try:
                os.makedirs(self.pool / sub, mode=0o700, exist_ok=True)
                fd = os.open(self.pool / sub, _DIR_FLAGS)
            except OSError:
                return None
            self._pool_dirs[sub] = fd
        return fd

    def from_pool(self, dfd: int, name: str, key: str, size: int) -> bool:
        """Put a hard link to the pool's file `key` at `name`; False when the pool has none (never a
        link to anything but a regular file of that size)."""
        pfd = self.pool_dir(key)
        if pfd is None:
            return False
        try:
            st = os.stat(key, dir_fd=pfd, follow_symlinks=False)
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        try:
            try:
                os.link(key, name, src_dir_fd=pfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                self.remove(dfd, name)
                os.link(key, name, src_dir_fd=pfd, dst_dir_fd=dfd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def to_pool(self, dfd: int, name: str, key: str) -> bool:
        """Link the file just written at `name` into the pool as `key`; False when the pool already has one."""
        pfd = self.pool_dir(key)
        if pfd is None:
            return True  # a pool that cannot be written (another filesystem, full): the tree keeps its copy
        try:
            os.link(name, key, src_dir_fd=dfd, dst_dir_fd=pfd, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError:
            pass
        return True

    def pooled(self, dfd: int, name: str, key: str, size: int) -> None:
        """Store the (large) file just written once: into the pool when it has no such file, else
        replaced by a hard link to the pool's."""
        if self.to_pool(dfd, name, key):
            return
        tmp = f".{name}.imgquilt-link"
        if self.from_pool(dfd, tmp, key, size):
            try:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except OSError:
                os.unlink(tmp, dir_fd=dfd)


class _Skip(Exception):
    """A member that cannot be placed inside the root (its parent is a file, or a link loop)."""


def extract_layers(dest: Path, layers: Iterable[tuple[str, BinaryIO]], *, pool: Path | None = None,
                   written: list[int] | None = None) -> int:
    """Unpack `layers` (digest, uncompressed tar stream), bottom first, into the empty directory
    `dest`; returns how many members were skipped. `pool`: store identical files once (see the module
    docstring); `written`: gets the bytes of regular files written appended."""
    tree = _Tree(dest, pool)
    skipped = 0
    try:
        for digest, stream in layers:
            walker = TarWalker(_Stream(stream), what=f"layer {digest}")
            skipped += _layer(tree, walker)  # a stream that is not a tar: BadImage from the walker
        tree.forget()
        for rel, mode in sorted(tree.dir_modes.items(), key=lambda x: -x[0].count("/")):
            try:
                os.chmod(rel, mode, dir_fd=tree.fd, follow_symlinks=False)
            except (OSError, NotImplementedError, ValueError):
                pass  # gone, or a symlink now (a later layer replaced it): Linux cannot chmod a link, ValueError says so
    finally:
        tree.close()
    if written is not None:
        written.append(tree.bytes)
    return skipped


def _owner(uid: int, gid: int) -> tuple[int, int]:
    return (uid, gid) if _AS_ROOT else (os.geteuid(), os.getegid())


def _write(tree: _Tree, dfd: int, name: str, pieces, mode: int, uid: int, gid: int, digest) -> None:
    fd = tree.create(dfd, name, mode)
    try:
        for view in pieces:
            if digest is not None:
                digest.update(view)
            while view:
                view = view[os.write(fd, view):]
        # A new file is ours (no directory is setgid before the final chmod), made with `mode` less
        # the umask: a chown or chmod that would change nothing is not made (two syscalls a file).
        if _AS_ROOT and (uid, gid) != tree.ids:
            os.fchown(fd, uid, gid)  # clears setuid/setgid bits: the chmod below puts them back
            os.fchmod(fd, mode)
        elif mode & ~0o777 or mode & tree.umask:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _file(tree: _Tree, walker: TarWalker, dfd: int, name: str, mode: int, uid: int, gid: int, size: int) -> None:
    """One regular member: written (or linked from the pool)."""
    tree.bytes += size
    if tree.pool is None:
        _write(tree, dfd, name, walker.data_pieces(), mode, uid, gid, None)
        return
    ouid, ogid = _owner(uid, gid)
    if size <= PREHASH:
        pieces = list(walker.data_pieces())
        digest = hashlib.sha256()
        for view in pieces:
            digest.update(view)
        key = f"{digest.hexdigest()}-{mode:o}-{ouid}-{ogid}"
        if not tree.from_pool(dfd, name, key, size):
            _write(tree, dfd, name, pieces, mode, uid, gid, None)
            tree.to_pool(dfd, name, key)
        return
    digest = hashlib.sha256()
    _write(tree, dfd, name, walker.data_pieces(), mode, uid, gid, digest)
    tree.pooled(dfd, name, f"{digest.hexdigest()}-{mode:o}-{ouid}-{ogid}", size)


def _layer(tree: _Tree, walker: TarWalker) -> int:
    skipped = 0
    made: set[str] = set()  # paths this layer put in place (an opaque whiteout keeps them)
    for m in walker:
        rel = _norm(m.name)
        if rel is None:
            continue
        try:
            dfd, name, resolved = tree.parent(rel)
        except _Skip:
            skipped += 1
            continue
        kind = m.type
        if kind in _REGULAR and m.name.endswith("/"):
            kind = DIRECTORY  # the old (v7) way to say a directory
        try:
            if name == OPAQUE:
                parent = resolved.rpartition("/")[0]
                for child in os.listdir(dfd):
                    if (f"{parent}/{child}" if parent else child) not in made:
                        tree.remove(dfd, child)
            elif name.startswith(WHITEOUT):
                tree.remove(dfd, name[len(WHITEOUT):])
            elif kind == DIRECTORY:
                try:
                    os.mkdir(name, 0o755, dir_fd=dfd)
                except FileExistsError:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):
                        tree.remove(dfd, name)
                        os.mkdir(name, 0o755, dir_fd=dfd)
                tree.dir_modes[resolved] = m.mode
                _own(dfd, name, m.uid, m.gid)
                made.add(resolved)
            elif kind in _REGULAR and not m.sparse:
                _file(tree, walker, dfd, name, m.mode, m.uid, m.gid, m.size)
                made.add(resolved)
            elif kind == SYMLINK:
                tree.remove(dfd, name)  # forgets the remembered parents if what it removes is not a file
                os.symlink(m.linkname, name, dir_fd=dfd)
                _own(dfd, name, m.uid, m.gid)
                made.add(resolved)
            elif kind == HARDLINK:
                target = _norm(m.linkname)
                if target is None:
                    skipped += 1
                    continue
                dfd = os.dup(dfd)  # the next parent() may close the lent one
                try:
                    tfd, tname, _ = tree.parent(target)
                    tree.remove(dfd, name)
                    os.link(tname, name, src_dir_fd=tfd, dst_dir_fd=dfd, follow_symlinks=False)
                    made.add(resolved)
                except (_Skip, OSError):
                    skipped += 1
                finally:
                    os.close(dfd)
            else:
                skipped += 1  # a device node, FIFO or sparse file
        except OSError:
            skipped += 1
    walker.finish()
    return skipped


def _own(dfd: int, name: str, uid: int, gid: int) -> None:
    if _AS_ROOT:
        try:
            os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            pass
