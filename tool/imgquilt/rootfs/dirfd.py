"""Walk a root with directory file descriptors and O_NOFOLLOW, so no symlink is ever followed.

Paths handed here are already resolved inside the root (imgquilt.fs.resolve); opening every
component with O_NOFOLLOW makes a symlink swapped in between resolving and writing an error
rather than a write outside the root.
"""
from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import BadInput, UnsafePath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_root(root: Path) -> int:
    """Open the root directory itself (following it: /proc/PID/root is a link by design)."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInput(f"Root directory {str(root)!r} does not exist.") from None
    except NotADirectoryError:
        raise BadInput(f"Root {str(root)!r} is not a directory.") from None


def split(rel: str) -> tuple[list[str], str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise UnsafePath(f"Unsafe in-root path {rel!r}.")
    return parts[:-1], parts[-1]


def open_dir(root_fd: int, parts: list[str], *, create: bool = False, created: list[str] | None = None) -> int:
    """Open the directory `parts` below root_fd without following symlinks; optionally create it."""
    fd = os.dup(root_fd)
    walked: list[str] = []
    try:
        for part in parts:
            walked.append(part)
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                if created is not None:
                    created.append("/".join(walked))
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(
                        f"{'/'.join(walked)!r} is a symlink or not a directory; imgquilt does not follow it.",
                        hint="The root changed while imgquilt was working on it, or the path is hostile.",
                    ) from None
                raise
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def parent_dir(root_fd: int, rel: str, *, create: bool = False, created: list[str] | None = None) -> Iterator[tuple[int, str]]:
    """(fd of the parent directory, final name) for an in-root path."""
    parents, name = split(rel)
    fd = open_dir(root_fd, parents, create=create, created=created)
    try:
        yield fd, name
    finally:
        os.close(fd)


def lstat_at(root_fd: int, rel: str) -> os.stat_result | None:
    try:
        with parent_dir(root_fd, rel) as (fd, name):
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def readlink_at(root_fd: int, rel: str) -> str:
    with parent_dir(root_fd, rel) as (fd, name):
        return os.readlink(name, dir_fd=fd)


def read_at(root_fd: int, rel: str, *, with_mtime: bool = False):
    """The bytes of a regular file (a file larger than spool_at(): copied into a spooled temp file, never
    held; not read in place, since an in-place apply links a backup of it, which changes its ctime); with
    `with_mtime`, (data, mtime in whole seconds as CPython's int(st_mtime)), both from the one file opened."""
    from ..fs.content import copy_to_spool, spool_at

    with parent_dir(root_fd, rel) as (dfd, name):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise BadInput(f"{rel!r} is not a regular file.")
        os.set_blocking(fd, True)
        if st.st_size > spool_at():
            try:
                data = copy_to_spool(fd, shown=rel)
            finally:
                os.close(fd)
            return (data, int(st.st_mtime)) if with_mtime else data
        with os.fdopen(fd, "rb") as f:
            data = f.read()
            return (data, int(st.st_mtime)) if with_mtime else data


def unlink_quiet(dfd: int, name: str) -> None:
    """Unlink `name` in `dfd`; already gone is fine (recovery steps may run twice)."""
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
