"""An image's layers unpacked into a directory, as the container runtime would lay them: bottom layer
first, OCI whiteouts (`.wh.NAME` deletes NAME below it, `.wh..wh..opq` hides what lower layers put in
its directory), regular files, directories, symlinks and hard links; device nodes and FIFOs are
skipped (a sandbox brings its own /dev).

Nothing is ever written outside `dest`: a member name that is absolute or holds `..` is taken as
relative and normalized, and every parent directory is resolved inside `dest` (symlinks re-rooted at
`dest`, as in the container) and then opened component by component without following a link.
Directory modes are set last, so a read-only directory of a lower layer does not stop a later one.

With a `pool` directory (cache.rootfs's, on the same filesystem), each regular file is hashed as it is
written and then stored once: the first file with those bytes, mode and owner is linked into the pool
as `<sha256[:2]>/<sha256>-<mode>-<uid>-<gid>`, and a later one (of this tree or another image's) is
replaced by a hard link to it, so two trees that share files hold them once.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import tarfile
from pathlib import Path
from typing import BinaryIO, Iterable

from ..errors import BadInput, BadImage
from ..fs.resolve import resolve
from .dirfd import open_dir
from .source import RootfsSource

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_AS_ROOT = os.geteuid() == 0


def _norm(name: str) -> str | None:
    parts = [p for p in posixpath.normpath("/" + name).split("/") if p not in ("", ".")]
    return "/".join(parts) or None


class _Tree:
    def __init__(self, dest: Path, pool: Path | None = None) -> None:
        self.dest = dest
        self.fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dir_modes: dict[str, int] = {}
        self.pool = pool
        self.bytes = 0  # of the regular files written
        # head -> (its fd, resolved), the most recent few: a tar lists a directory's files together
        self._known: dict[str, tuple[int, str]] = {}

    def close(self) -> None:
        self.forget()
        os.close(self.fd)

    def forget(self) -> None:
        """Drop the remembered parents: a link, a whiteout or a replaced directory may change what a path resolves to."""
        for fd, _ in self._known.values():
            os.close(fd)
        self._known.clear()

    def parent(self, rel: str) -> tuple[int, str, str]:
        """(fd of the resolved parent directory, made as needed; the name in it; the resolved path)."""
        head, _, name = rel.rpartition("/")
        known = self._known.get(head)
        if known is not None:
            resolved = known[1]
            return os.dup(known[0]), name, f"{resolved}/{name}" if resolved else name
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
            fd = open_dir(self.fd, resolved.split("/") if resolved else [], create=True)
        except (OSError, BadInput):
            raise _Skip() from None
        if len(self._known) >= 64:
            old = next(iter(self._known))
            os.close(self._known.pop(old)[0])
        self._known[head] = (os.dup(fd), resolved)
        return fd, name, f"{resolved}/{name}" if resolved else name

    def remove(self, dfd: int, name: str) -> None:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):
            self.forget()
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            try:
                for child in os.listdir(sub):
                    self.remove(sub, child)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)


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
            try:
                with tarfile.open(fileobj=stream, mode="r|") as tar:
                    skipped += _layer(tree, tar)
            except tarfile.TarError as exc:
                raise BadImage(f"Layer {digest} is not a tar archive imgquilt can read ({exc}).") from None
        for rel, mode in sorted(tree.dir_modes.items(), key=lambda x: -x[0].count("/")):
            try:
                os.chmod(rel, mode, dir_fd=tree.fd, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
    finally:
        tree.close()
    if written is not None:
        written.append(tree.bytes)
    return skipped


def _pooled(tree: _Tree, dfd: int, name: str, key: str, size: int) -> None:
    """Store the file just written once: into the pool when it has no such file, else a hard link to
    the pool's in its place (never to anything but a regular file of that size)."""
    assert tree.pool is not None
    sub = tree.pool / key[:2]
    target = sub / key
    for _ in range(2):
        try:
            os.link(name, target, src_dir_fd=dfd, follow_symlinks=False)
            return
        except FileNotFoundError:
            os.makedirs(sub, mode=0o700, exist_ok=True)
        except FileExistsError:
            break
        except OSError:
            return  # a pool that cannot be written (another filesystem, full): the tree keeps its copy
    try:
        st = os.lstat(target)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return
        tmp = f".{name}.imgquilt-link"
        os.link(target, tmp, dst_dir_fd=dfd, follow_symlinks=False)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError:
        return


def _layer(tree: _Tree, tar: tarfile.TarFile) -> int:
    skipped = 0
    made: set[str] = set()  # paths this layer put in place (an opaque whiteout keeps them)
    for m in tar:
        rel = _norm(m.name)
        if rel is None:
            continue
        try:
            dfd, name, resolved = tree.parent(rel)
        except _Skip:
            skipped += 1
            continue
        try:
            if name == OPAQUE:
                parent = resolved.rpartition("/")[0]
                for child in os.listdir(dfd):
                    if (f"{parent}/{child}" if parent else child) not in made:
                        tree.remove(dfd, child)
            elif name.startswith(WHITEOUT):
                tree.remove(dfd, name[len(WHITEOUT):])
            elif m.isdir():
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):
                        tree.remove(dfd, name)
                        os.mkdir(name, 0o755, dir_fd=dfd)
                except FileNotFoundError:
                    os.mkdir(name, 0o755, dir_fd=dfd)
                tree.dir_modes[resolved] = m.mode & 0o7777
                _own(dfd, name, m)
                made.add(resolved)
            elif m.isreg():
                tree.remove(dfd, name)
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
                digest = hashlib.sha256() if tree.pool is not None else None
                size = 0
                try:
                    src = tar.extractfile(m)
                    while src is not None:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        size += len(chunk)
                        if digest is not None:
                            digest.update(chunk)
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(fd, view):]
                    if _AS_ROOT:
                        os.fchown(fd, m.uid, m.gid)
                    os.fchmod(fd, m.mode & 0o7777)
                finally:
                    os.close(fd)
                tree.bytes += size
                if digest is not None:
                    uid, gid = (m.uid, m.gid) if _AS_ROOT else (os.geteuid(), os.getegid())
                    _pooled(tree, dfd, name, f"{digest.hexdigest()}-{m.mode & 0o7777:o}-{uid}-{gid}", size)
                made.add(resolved)
            elif m.issym():
                tree.remove(dfd, name)
                tree.forget()
                os.symlink(m.linkname, name, dir_fd=dfd)
                _own(dfd, name, m)
                made.add(resolved)
            elif m.islnk():
                target = _norm(m.linkname)
                if target is None:
                    skipped += 1
                    continue
                try:
                    tfd, tname, _ = tree.parent(target)
                except _Skip:
                    skipped += 1
                    continue
                try:
                    tree.remove(dfd, name)
                    os.link(tname, name, src_dir_fd=tfd, dst_dir_fd=dfd, follow_symlinks=False)
                    made.add(resolved)
                except OSError:
                    skipped += 1
                finally:
                    os.close(tfd)
            else:
                skipped += 1  # a device node or FIFO
        except OSError:
            skipped += 1
        finally:
            os.close(dfd)
    return skipped


def _own(dfd: int, name: str, m: tarfile.TarInfo) -> None:
    if _AS_ROOT:
        try:
            os.chown(name, m.uid, m.gid, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            pass
