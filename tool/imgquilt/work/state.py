"""The work tree's own state in `.imgquilt/state/` (local, never committed):

    applied               the applied patches, bottom first, one a line (quilt's .pc/applied-patches)
    pc/<name>.json        per applied patch: every file it tracks, with the sha256 and mode the file had
                          before the patch (quilt's .pc/<patch>/ backups); <name> is %-quoted
    image                 the last --image bases were read from (used when there is no targets.lock)
    profile               the profile the work tree follows (`imgquilt select NAME`; none: the default)

The work-tree lock is an flock on `.imgquilt/` itself (no file: see WorkState.locked); versions before
it flock'ed `state/lock`, which is left alone where it exists.
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping
from urllib.parse import quote

from ..errors import BadInput, UsageError, in_words
from ..util.statedir import StateDir
from .files import FileState

STATE_DIR = Path(".imgquilt") / "state"


@dataclass(frozen=True)
class Tracked:
    """A file an applied patch tracks, as it was before the patch."""

    path: str
    sha256: str  # 64 hex, or "absent"
    mode: int | None  # permission bits of the work copy (None: absent)
    resolved: str  # the image file it names (symlinks resolved inside the image)


def one_name_per_file(name: str, snap: list[Tracked], fresh: Mapping[str, FileState]) -> None:
    """A patch's snapshot names each image file once: `lib/x` through a symlink and `usr/lib/x` clash."""
    seen = {t.resolved: t.path for t in snap}
    for p, st in fresh.items():
        r = st.resolved or p
        if r in seen and seen[r] != p:
            raise UsageError(
                f"{p} and {seen[r]} are the same file in the image ({r}); patch {name} can name it only one way.",
                hint=f"Use {seen[r]}.",
            )
        seen[r] = p


class WorkState:
    """The applied list, the per-patch snapshots, the remembered image and the lock of one queue."""

    def __init__(self, queue_root: Path, state: StateDir | None = None) -> None:
        self.queue_root = Path(queue_root)
        # untrusted: walked without following links (`state`: one whose writes are held, work.staged)
        self._state = state if state is not None else StateDir(queue_root, "state")
        self.dir = self._state.path
        self._snaps: dict[str, list[Tracked]] = {}  # read once per command; every write goes through here

    def applied(self) -> list[str]:
        data = self._state.read("applied")
        if data is None:
            return []
        text = data.decode("utf-8", "surrogateescape")
        return [ln for ln in text.splitlines() if ln.strip()]

    def write_applied(self, names: list[str]) -> None:
        self._ensure()
        self._state.write("applied", "".join(n + "\n" for n in names).encode("utf-8", "surrogateescape"))

    def snapshot(self, name: str) -> list[Tracked]:
        """The files patch `name` tracks, as they were before it (only for applied patches)."""
        if name not in self._snaps:
            self._snaps[name] = self._read_snapshot(name)
        return list(self._snaps[name])

    def write_snapshot(self, name: str, files: list[Tracked]) -> None:
        doc = {"patch": name, "files": [
            {"path": t.path, "resolved": t.resolved, "sha256": t.sha256, "mode": None if t.mode is None else f"{t.mode:04o}"} for t in files
        ]}
        self._state.write(self._pc_rel(name), (json.dumps(doc, indent=1) + "\n").encode())
        self._snaps[name] = list(files)

    def drop_snapshot(self, name: str) -> None:
        self._snaps.pop(name, None)
        self._state.unlink(self._pc_rel(name))

    def remembered_image(self) -> str | None:
        """The last --image the work tree was seeded from (used when there is no targets.lock)."""
        data = self._state.read("image")
        return (data.decode("utf-8", "surrogateescape").strip() or None) if data is not None else None

    def profile(self) -> str | None:
        """The profile the work tree follows (`imgquilt select`), None for the default."""
        data = self._state.read("profile")
        return (data.decode("utf-8", "surrogateescape").strip() or None) if data is not None else None

    def write_profile(self, name: str | None) -> None:
        self._ensure()
        if name is None:
            self._state.unlink("profile")
        else:
            self._state.write("profile", (name + "\n").encode())

    def remember_image(self, ref: str) -> None:
        self._ensure()
        if self.remembered_image() != ref:
            self._state.write("image", (ref + "\n").encode())

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the work-tree lock: one changing command at a time. It is an flock on the queue's
        `.imgquilt/` directory itself, so taking it makes no file: a command that changes no work-tree
        state (`header --set`, `move` with nothing applied, a refusal) leaves a queue whose work tree
        was never used without a state directory, killed or not (issue 35)."""
        with StateDir(self.queue_root).opened(create=True) as dfd:
            assert dfd is not None
            fd = os.dup(dfd)  # held past opened(), which turns any OSError in its body into a state error
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError("Another imgquilt command is changing this work tree.", hint="Wait for it to finish, then retry.") from None
            yield
        finally:
            os.close(fd)

    def scratch_dir(self) -> Path:
        self._ensure()
        return self._state.ensure()

    def _ensure(self) -> None:
        if not self._state.exists():
            self._state.ensure()
            top = StateDir(self.queue_root)
            if not top.is_file(".gitignore"):  # .imgquilt/ ignores itself
                top.write(".gitignore", b"*\n")

    @staticmethod
    def _pc_rel(name: str) -> str:
        return "pc/" + quote(name, safe="") + ".json"

    def _read_snapshot(self, name: str) -> list[Tracked]:
        try:
            data = self._state.read(self._pc_rel(name))
            if data is None:
                return []
            doc = json.loads(data)
            snap = [
                Tracked(str(f["path"]), str(f["sha256"]), None if f["mode"] is None else int(f["mode"], 8), str(f.get("resolved") or f["path"]))
                for f in doc["files"]
            ]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise BadInput(f"Work-tree state of {name} cannot be read: {in_words(exc)}.",
                           hint="Remove .imgquilt/state and .imgquilt/work to start over.") from None
        return snap
