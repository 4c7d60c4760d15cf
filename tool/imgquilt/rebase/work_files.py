"""Conflicted files in the quilt work tree (`.imgquilt/work/`) for the user to resolve.

Whatever the quilt workflow had at such a path is saved first and put back when the rebase
lets go of it. Every access goes through the work tree's own WorkFiles (directory fds, O_NOFOLLOW).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..fs.paths import check_member_path
from ..errors import BadInput
from ..work.files import WORK_FILE_CAP, WORK_DIR, WorkFiles
from .state import RebaseState, rebase_dir, save_state


def work_read(root: Path, path: str) -> bytes | None:
    return WorkFiles(root).read(check_member_path(path)).data


def _work_write(root: Path, path: str, data: bytes | None) -> None:
    """Write (or, for None, remove) a work-tree file without following any symlink in it."""
    WorkFiles(root).write(check_member_path(path), data, None)


def put_work(root: Path, st: RebaseState, path: str, data: bytes | None) -> str:
    """Put a conflicted file in the work tree, saving what the quilt workflow had there first."""
    if path not in st.work_written:
        prior = work_read(root, path)
        if prior is not None:
            rebase_dir(root, "saved-work").write(path, prior)
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
        _work_write(root, path, _saved(root, path) if path in st.work_saved else None)
        st.work_written.remove(path)
        if path in st.work_saved:
            st.work_saved.remove(path)


def _saved(root: Path, path: str) -> bytes:
    data = rebase_dir(root, "saved-work").read(path, cap=WORK_FILE_CAP)
    if data is None:
        raise BadInput(f"The saved work-tree copy of {path} is missing from .imgquilt/rebase/saved-work.",
                       hint="The rebase state is damaged; remove .imgquilt/rebase and restore the queue from git.")
    return data
