"""The work copies under `.imgquilt/work/`, at their image paths as the patches name them.

Read and written through directory fds with O_NOFOLLOW (imgquilt.rootfs.dirfd), opened from the queue
root by util.statedir: a symlinked `.imgquilt`, `.imgquilt/work` or a symlink planted in work/ is
refused, never followed. Only regular files are read (a FIFO never hangs a read); a write goes to a
temp name beside the file, then renames over it.
"""
from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import UnsafePath
from ..rootfs.dirfd import lstat_at, parent_dir, split
from ..util.atomic import write_atomic_at
from ..util.statedir import StateDir, read_regular_at, refuse_non_regular_at

WORK_FILE_CAP = 1 << 30  # a work copy is an image file held in memory; beyond this it is not a patch target

WORK_DIR = Path(".imgquilt") / "work"


@dataclass(frozen=True)
class FileState:
    """The content of a path at some point of the applied stack."""

    data: bytes | None
    mode: int | None
    resolved: str | None = None
    link: bool = False  # a symlink read as itself: `data` is its target (the work tree holds none)


class WorkFiles:
    """The regular files below a queue's work directory."""

    def __init__(self, queue_root: Path) -> None:
        self._state = StateDir(queue_root, "work")
        self.dir = self._state.path

    def read(self, path: str) -> FileState:
        with self._state.opened() as fd:
            if fd is None:
                return FileState(None, None)
            st = lstat_at(fd, path)
            if st is None:
                return FileState(None, None)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePath(
                    f"Work-tree file {path!r} is not a regular file (a symlink, directory, FIFO or device); imgquilt does not follow it.",
                    hint=f"Replace {self.dir / path} with a regular file.",
                )
            with parent_dir(fd, path) as (dfd, name):
                data = read_regular_at(dfd, name, shown=str(self.dir / path), cap=WORK_FILE_CAP)
            return FileState(data, stat.S_IMODE(st.st_mode))

    def write(self, path: str, data: bytes | None, mode: int | None) -> None:
        """Replace the work copy of `path` whole; None removes it (and directories left empty)."""
        with self._opened() as fd:
            if data is None:
                _remove(fd, path)
            else:
                self._replace_in(fd, path, data, (mode if mode is not None else 0o644) & 0o777)

    def make_parents(self, path: str) -> None:
        with self._opened() as fd, parent_dir(fd, path, create=True):
            pass

    @contextmanager
    def _opened(self) -> Iterator[int]:
        with self._state.opened(create=True) as fd:
            assert fd is not None
            yield fd

    def _replace_in(self, root_fd: int, path: str, data: bytes, mode: int) -> None:
        with parent_dir(root_fd, path, create=True) as (dfd, name):
            refuse_non_regular_at(dfd, name, shown=str(self.dir / path))
            write_atomic_at(dfd, name, data, mode)


def _remove(root_fd: int, path: str) -> None:
    parents, _ = split(path)
    try:
        with parent_dir(root_fd, path) as (dfd, name):
            os.unlink(name, dir_fd=dfd)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except IsADirectoryError:
        raise UnsafePath(f"Work-tree file {path!r} is a directory; imgquilt removes only the files it put there.",
                         hint=f"Remove {WORK_DIR / path} yourself, then run the command again.") from None
    for k in range(len(parents), 0, -1):  # drop directories left empty
        try:
            with parent_dir(root_fd, "/".join(parents[:k])) as (dfd, name):
                os.rmdir(name, dir_fd=dfd)
        except OSError:
            break
