"""An image's layers unpacked into a directory, as the container runtime would lay them: bottom layer
first, OCI whiteouts (`.wh.NAME` deletes NAME below it, `.wh..wh..opq` hides what lower layers put in
its directory), regular files, directories, symlinks and hard links; device nodes and FIFOs are
skipped (a sandbox brings its own /dev).

Nothing is ever written outside `dest`: a member name that is absolute or holds `..` is taken as
relative and normalized, and every parent directory is resolved inside `dest` (symlinks re-rooted at
`dest`, as in the container) and then opened component by component without following a link.
Directory modes are set last, so a read-only directory of a lower layer does not stop a later one.
"""
from __future__ import annotations

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
    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dir_modes: dict[str, int] = {}

    def close(self) -> None:
        os.close(self.fd)

    def parent(self, rel: str) -> tuple[int, str, str]:
        """(fd of the resolved parent directory, made as needed; the name in it; the resolved path)."""
        head, _, name = rel.rpartition("/")
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
        return fd, name, f"{resolved}/{name}" if resolved else name

    def remove(self, dfd: int, name: str) -> None:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
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


def extract_layers(dest: Path, layers: Iterable[tuple[str, BinaryIO]]) -> int:
    """Unpack `layers` (digest, uncompressed tar stream), bottom first, into the empty directory
    `dest`; returns how many members were skipped."""
    tree = _Tree(dest)
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
    return skipped


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
                try:
                    src = tar.extractfile(m)
                    while src is not None:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(fd, view):]
                    if _AS_ROOT:
                        os.fchown(fd, m.uid, m.gid)
                    os.fchmod(fd, m.mode & 0o7777)
                finally:
                    os.close(fd)
                made.add(resolved)
            elif m.issym():
                tree.remove(dfd, name)
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
