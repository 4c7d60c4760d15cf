"""Conflicted files in the quilt work tree (`.imgquilt/work/`) for the user to resolve.

Whatever the quilt workflow had at such a path is saved first and put back when the rebase
lets go of it. Every access goes through the work tree's own WorkFiles (directory fds, O_NOFOLLOW).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..fs.paths import check_member_path
from ..util.atomic import atomic_write
from ..work.files import WORK_DIR, WorkFiles
from .state import RebaseState, save_state, state_dir


def work_read(root: Path, path: str) -> bytes | None:
    return WorkFiles(root / WORK_DIR).read(check_member_path(path)).data


def _work_write(root: Path, path: str, data: bytes | None) -> None:
    """Write (or, for None, remove) a work-tree file without following any symlink in it."""
    WorkFiles(root / WORK_DIR).write(check_member_path(path), data, None)


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
