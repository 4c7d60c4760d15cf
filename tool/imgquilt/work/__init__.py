"""The quilt workflow over a work tree of the target files.

Everything lives in the queue's `.imgquilt/` (local state, never committed; it ignores itself):

    work/<path>            the target files at their image paths, as the patches name them (files.py)
    state/...              the applied list, per-patch snapshots, the last --image, the lock (state.py)
    objects/ab/<sha256>    the object store (imgquilt.store): snapshot bytes and every base read

Rules:
  * A file is in work/ exactly while an applied patch tracks it. The first time a path is needed
    (push, add, edit, fold, import), its current content is its base in the image (bases.py).
  * Two names of one image file (`lib/x` through a symlink and `usr/lib/x`) share one work copy,
    at the name the lowest applied patch used, as the container sees one file (tree.py).
  * `new` and `import` insert after the top patch (at the start of series when none is applied),
    as quilt does; import reads its bases at that point (the work tree, else the image).
  * `push` verifies everything before it writes anything (push.py); `refresh` rewrites a patch from
    snapshot -> current bytes (refresh.py); `pop` refuses to lose changes not refreshed (pop.py).
  * Work-tree files are read and written through directory fds with O_NOFOLLOW: a symlink planted
    in work/ is refused, never followed.

Modules: tree (WorkTree, the shared queries), state, files, bases, queuefiles, patchtext, relock
(targets.lock written in the transaction of every command that changes the queue), and one module per
group of commands: series_edit (new/delete/rename), track (add/fold), refresh (refresh/diff), push,
pop, header, importing.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> the module that holds it; loaded on first use (PEP 562): start-up time of the CLI
_WHERE = {
    "SourceOpener": "bases", "WORK_DIR": "files", "FileState": "files", "Imported": "importing", "ImportItem": "importing",
    "check_header": "patchtext", "check_patch_name": "patchtext", "read_queue_patch": "patchtext", "Pushed": "push",
    "Refreshed": "refresh", "STATE_DIR": "state", "Tracked": "state", "WorkTree": "tree",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "STATE_DIR",
    "WORK_DIR",
    "FileState",
    "ImportItem",
    "Imported",
    "Pushed",
    "Refreshed",
    "SourceOpener",
    "Tracked",
    "WorkTree",
    "check_header",
    "check_patch_name",
    "read_queue_patch",
]
