"""Conflicted files in the quilt work tree (`.imgquilt/work/`) for the user to resolve.

Whatever the quilt workflow had at such a path is saved first and put back when the rebase
lets go of it. Every access goes through directory fds with O_NOFOLLOW, as work.py does.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..fs.paths import check_member_path
from ..rootfs.dirfd import open_root, parent_dir, read_at
from ..util.atomic import atomic_write
from ..work import WORK_DIR
from .state import RebaseState, save_state, state_dir


def _work_root(root: Path) -> Path:
    d = root / WORK_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d


def work_read(root: Path, path: str) -> bytes | None:
    fd = open_root(_work_root(root))
    try:
        return read_at(fd, check_member_path(path))
    except (FileNotFoundError, NotADirectoryError):
        return None
    finally:
        os.close(fd)


def _work_write(root: Path, path: str, data: bytes | None) -> None:
    """Write (or, for None, remove) a work-tree file without following any symlink in it."""
    fd = open_root(_work_root(root))
    try:
        with parent_dir(fd, check_member_path(path), create=data is not None) as (dfd, name):
            if data is None:
                try:
                    os.unlink(name, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                return
            tmp = f".{name}.imgquilt-tmp"
            wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            try:
                with os.fdopen(wfd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                raise
    except FileNotFoundError:
        if data is not None:
            raise
    finally:
        os.close(fd)


def put_work(root: Path, st: RebaseState, path: str, data: bytes | None) -> str:
    """Put a conflicted file in the work tree, saving what the quilt workflow had there first."""
    if path not in st.work_written:
        prior = work_read(root, path)
        if prior is not None:
            saved = state_dir(root) / "saved-work" / path
            saved.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(saved, prior)
            st.work_saved.append(path)
        st.work_written.append(path)
        save_state(root, st)  # journal it before the file exists, so an abort after a crash cleans it up
    _work_write(root, path, data)
    return str(WORK_DIR / path)


def release_work(root: Path, st: RebaseState, paths: Iterable[str]) -> None:
    """Take our conflict files out of the work tree and put back what was there before."""
    for path in list(paths):
        if path not in st.work_written:
            continue
        saved = state_dir(root) / "saved-work" / path
        _work_write(root, path, saved.read_bytes() if path in st.work_saved else None)
        st.work_written.remove(path)
        if path in st.work_saved:
            st.work_saved.remove(path)
