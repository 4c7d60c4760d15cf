"""The work tree's own state in `.imgquilt/state/` (local, never committed):

    applied               the applied patches, bottom first, one a line (quilt's .pc/applied-patches)
    pc/<name>.json        per applied patch: every file it tracks, with the sha256 and mode the file had
                          before the patch (quilt's .pc/<patch>/ backups); <name> is %-quoted
    image                 the last --image bases were read from (used when there is no targets.lock)
    lock                  flock'ed while a command changes the work tree
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

from ..errors import BadInput, UsageError
from ..util.atomic import atomic_write
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

    def __init__(self, queue_root: Path) -> None:
        self.queue_root = Path(queue_root)
        self.dir = self.queue_root / STATE_DIR
        self._snaps: dict[str, list[Tracked]] = {}  # read once per command; every write goes through here

    def applied(self) -> list[str]:
        try:
            text = (self.dir / "applied").read_text("utf-8", "surrogateescape")
        except FileNotFoundError:
            return []
        return [ln for ln in text.splitlines() if ln.strip()]

    def write_applied(self, names: list[str]) -> None:
        self._ensure()
        atomic_write(self.dir / "applied", "".join(n + "\n" for n in names).encode("utf-8", "surrogateescape"))

    def snapshot(self, name: str) -> list[Tracked]:
        """The files patch `name` tracks, as they were before it (only for applied patches)."""
        if name not in self._snaps:
            self._snaps[name] = self._read_snapshot(name)
        return list(self._snaps[name])

    def write_snapshot(self, name: str, files: list[Tracked]) -> None:
        doc = {"patch": name, "files": [
            {"path": t.path, "resolved": t.resolved, "sha256": t.sha256, "mode": None if t.mode is None else f"{t.mode:04o}"} for t in files
        ]}
        dest = self._pc_path(name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, (json.dumps(doc, indent=1) + "\n").encode())
        self._snaps[name] = list(files)

    def drop_snapshot(self, name: str) -> None:
        self._snaps.pop(name, None)
        self._pc_path(name).unlink(missing_ok=True)

    def remembered_image(self) -> str | None:
        """The last --image the work tree was seeded from (used when there is no targets.lock)."""
        try:
            return (self.dir / "image").read_text().strip() or None
        except FileNotFoundError:
            return None

    def remember_image(self, ref: str) -> None:
        self._ensure()
        if self.remembered_image() != ref:
            atomic_write(self.dir / "image", (ref + "\n").encode())

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the work-tree lock: one changing command at a time."""
        self._ensure()
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError("Another imgquilt command is changing this work tree.", hint="Wait for it to finish, then retry.") from None
            yield
        finally:
            os.close(fd)

    def _ensure(self) -> None:
        if not self.dir.is_dir():
            self.dir.mkdir(parents=True, exist_ok=True)
            ignore = self.queue_root / ".imgquilt" / ".gitignore"  # .imgquilt/ ignores itself
            if not ignore.exists():
                atomic_write(ignore, b"*\n")

    def _pc_path(self, name: str) -> Path:
        return self.dir / "pc" / (quote(name, safe="") + ".json")

    def _read_snapshot(self, name: str) -> list[Tracked]:
        try:
            doc = json.loads(self._pc_path(name).read_text())
        except FileNotFoundError:
            return []
        except (ValueError, OSError) as exc:
            raise BadInput(f"Work-tree state of {name} cannot be read: {exc}.", hint="Remove .imgquilt/state and .imgquilt/work to start over.") from None
        return [
            Tracked(f["path"], f["sha256"], None if f["mode"] is None else int(f["mode"], 8), f.get("resolved") or f["path"])
            for f in doc["files"]
        ]
