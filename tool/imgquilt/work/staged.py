"""A work tree whose writes are held in memory: pop and push run on it as on the real one, and what
they would change comes back as a list of queue.interrupted Changes, for a command that writes the
work tree and the queue files as one transaction (`refresh --rehash`, which pops and pushes again).

Reads see the held writes first, then the real files; the patches it reads are the ones given (the
new patch files, not yet written). Only the object store is written for real (content-addressed: an
extra object is never wrong).
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Mapping

from ..queue.interrupted import Change
from ..util.statedir import STATE_FILE_CAP, STATE_NAME, StateDir
from .files import FileState, WorkFiles
from .queuefiles import QueueFiles
from .state import WorkState

if TYPE_CHECKING:
    from pathlib import Path

    from ..queue.patchfile import Patch
    from .tree import WorkTree


class _HeldFiles(WorkFiles):
    """.imgquilt/work/ with its writes held."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.held: dict[str, FileState] = {}

    def read(self, path: str) -> FileState:
        return self.held[path] if path in self.held else super().read(path)

    def write(self, path: str, data: bytes | None, mode: int | None) -> None:
        self.held[path] = FileState(data, None if data is None else (mode if mode is not None else 0o644) & 0o777)


class _HeldState(StateDir):
    """.imgquilt/state/ with its writes held (None: removed)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, "state")
        self.held: dict[str, bytes | None] = {}

    def read(self, rel: str, *, cap: int = STATE_FILE_CAP) -> bytes | None:
        return self.held[rel] if rel in self.held else super().read(rel, cap=cap)

    def write(self, rel: str, data: bytes, mode: int = 0o644) -> None:
        self.held[rel] = data

    def unlink(self, rel: str) -> None:
        self.held[rel] = None


class _NewPatches(QueueFiles):
    def __init__(self, root: Path, patches: Mapping[str, Patch]) -> None:
        super().__init__(root)
        self._new = patches

    def read_patch(self, name: str) -> Patch:
        return self._new[name] if name in self._new else super().read_patch(name)


class Staged:
    """`tree`: a copy of a work tree whose writes are held and whose patches are `patches`; changes(): what it wrote."""

    def __init__(self, wt: WorkTree, patches: Mapping[str, Patch]) -> None:
        self._files = _HeldFiles(wt.root)
        self._state = _HeldState(wt.root)
        self.tree = copy.copy(wt)
        self.tree.files = self._files
        self.tree.record = WorkState(wt.root, self._state)
        self.tree.queue = _NewPatches(wt.root, patches)
        self._real = wt

    def changes(self) -> list[Change]:
        """Every held write that differs from the file there now: work copies, then state files."""
        out: list[Change] = []
        for path, st in sorted(self._files.held.items()):
            now = self._real.files.read(path)
            if (st.data, st.mode) != (now.data, now.mode):
                out.append(Change(f"{STATE_NAME}/work/{path}", st.data, st.mode if st.mode is not None else 0o644))
        real = StateDir(self._real.root, "state")
        for rel, data in sorted(self._state.held.items()):
            if data != real.read(rel):
                out.append(Change(f"{STATE_NAME}/state/{rel}", data))
        return out
