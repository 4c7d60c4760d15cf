"""The work copies under `.imgquilt/work/`, at their image paths as the patches name them.

Read and written through directory fds with O_NOFOLLOW (imgquilt.rootfs.dirfd): a symlink planted in
work/ is refused, never followed. A write goes to a temp name beside the file, then renames over it.
"""
from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import UnsafePath
from ..rootfs.dirfd import lstat_at, open_root, parent_dir, read_at, split
from ..util.atomic import write_atomic_at

WORK_DIR = Path(".imgquilt") / "work"


@dataclass(frozen=True)
class FileState:
    """The content of a path at some point of the applied stack."""

    data: bytes | None
    mode: int | None
    resolved: str | None = None


class WorkFiles:
    """The regular files below one work directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    def read(self, path: str) -> FileState:
        if not self.dir.is_dir():
            return FileState(None, None)
        fd = open_root(self.dir)
        try:
            st = lstat_at(fd, path)
            if st is None:
                return FileState(None, None)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePath(
                    f"Work-tree file {path!r} is not a regular file (a symlink or directory); imgquilt does not follow it.",
                    hint=f"Replace {self.dir / path} with a regular file.",
                )
            return FileState(read_at(fd, path), stat.S_IMODE(st.st_mode))
        finally:
            os.close(fd)

    def write(self, path: str, data: bytes | None, mode: int | None) -> None:
        """Replace the work copy of `path` whole; None removes it (and directories left empty)."""
        with self._opened() as fd:
            if data is None:
                _remove(fd, path)
            else:
                _replace(fd, path, data, (mode if mode is not None else 0o644) & 0o777)

    def make_parents(self, path: str) -> None:
        with self._opened() as fd, parent_dir(fd, path, create=True):
            pass

    @contextmanager
    def _opened(self) -> Iterator[int]:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = open_root(self.dir)
        try:
            yield fd
        finally:
            os.close(fd)


def _replace(root_fd: int, path: str, data: bytes, mode: int) -> None:
    with parent_dir(root_fd, path, create=True) as (dfd, name):
        write_atomic_at(dfd, name, data, mode)


def _remove(root_fd: int, path: str) -> None:
    parents, _ = split(path)
    try:
        with parent_dir(root_fd, path) as (dfd, name):
            os.unlink(name, dir_fd=dfd)
    except (FileNotFoundError, NotADirectoryError):
        pass
    for k in range(len(parents), 0, -1):  # drop directories left empty
        try:
            with parent_dir(root_fd, "/".join(parents[:k])) as (dfd, name):
                os.rmdir(name, dir_fd=dfd)
        except OSError:
            break
