"""The queue's `series` and `patches/` as the work commands edit them.

Series edits go line by line (queue.series), so comments, blank lines, `-p0` options and guards of
other lines are kept.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInput, os_error
from ..queue import series as series_text
from ..queue.series import SeriesEntry, parse_series
from ..util.atomic import atomic_write
from ..util.statedir import open_dir_below
from ..util.regular import read_regular_file

if TYPE_CHECKING:  # the patch format loads on use: listing the series reads no patch
    from ..queue.patchfile import Patch


class QueueFiles:
    """`series` and `patches/` of one queue directory."""

    def __init__(self, root: Path) -> None:
        self.series_path = Path(root) / "series"
        self.patches_dir = Path(root) / "patches"

    # --- series -------------------------------------------------------------------------
    def series_bytes(self) -> bytes:
        return read_regular_file(self.series_path) or b""

    def entries(self) -> list[SeriesEntry]:
        return parse_series(self.series_bytes(), source=str(self.series_path))

    def names(self) -> list[str]:
        return [e.name for e in self.entries()]

    def ensure_series(self) -> None:
        if not self.series_path.exists():
            atomic_write(self.series_path, b"")

    def insert(self, names: list[str], after: str | None, guards: dict[str, tuple[str, ...]] | None = None) -> None:
        """Insert names after `after` (None: before the first patch)."""
        atomic_write(self.series_path, self.inserted(names, after, guards))

    def inserted(self, names: list[str], after: str | None, guards: dict[str, tuple[str, ...]] | None = None) -> bytes:
        """The series bytes with `names` inserted after `after` (None: before the first patch), each
        with its `guards` (by name); nothing written."""
        entries = [SeriesEntry(n, guards=(guards or {}).get(n, ())) for n in names]
        return series_text.inserted(self.series_bytes(), entries, after)

    def moved(self, name: str, after: str | None) -> bytes:
        """The series bytes with `name`'s line moved whole (options, guards, comment) right after `after`'s
        line (None: before the first patch); nothing written."""
        return series_text.moved(self.series_bytes(), name, after)

    def remove(self, name: str) -> None:
        atomic_write(self.series_path, self.removed(name))

    def rename(self, old: str, new: str) -> None:
        atomic_write(self.series_path, self.renamed(old, new))

    def series_mode(self) -> int:
        """The permission bits `series` has (0644 when it is not there)."""
        return _mode(self.series_path)

    def patch_mode(self, name: str) -> int:
        return _mode(self.patches_dir / name)

    def guarded(self, name: str, guards: list[str]) -> bytes:
        """The series bytes with the guards of `name` replaced; nothing written."""
        return series_text.guarded(self.series_bytes(), name, guards)

    def removed(self, name: str) -> bytes:
        """The series bytes without `name`'s line; nothing written."""
        return series_text.removed(self.series_bytes(), name)

    def renamed(self, old: str, new: str) -> bytes:
        """The series bytes with `old` named `new` (its options, guards and comment kept); nothing written."""
        return series_text.renamed(self.series_bytes(), old, new)

    # --- patches/ -----------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        return (self.patches_dir / name).exists()

    def read_patch(self, name: str) -> Patch:
        data = read_regular_file(self.patches_dir / name)
        if data is None:
            raise BadInput(f"Patch file patches/{name} does not exist.", hint="Restore it, or `imgquilt delete` it from series.")
        from .patchtext import read_queue_patch

        return read_queue_patch(data, name)

    def write_patch(self, patch: Patch) -> None:
        dest = self.patches_dir / patch.name
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(dest, patch.raw)
        except OSError as exc:  # patches/ a link loop, a file, read-only: the queue's state, not a bug
            raise os_error(exc, f"patches/{patch.name}", hint="Make patches/ a writable directory of the queue.") from None

    def write_series(self, data: bytes) -> None:
        atomic_write(self.series_path, data)

    def remove_patch(self, name: str, *, missing_ok: bool = False) -> None:
        """Remove patches/NAME: a patch name, reached below patches/ without following a link (the link
        itself goes, never what it names), so nothing outside patches/ is ever removed."""
        from .patchtext import check_patch_name

        parts = check_patch_name(name).split("/")
        try:
            top = os.open(self.patches_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if missing_ok:
                return
            raise
        try:
            fd = open_dir_below(top, parts[:-1], create=False, shown="patches")
        finally:
            os.close(top)
        if fd is None:
            if missing_ok:
                return
            raise FileNotFoundError(2, "No such file or directory", str(self.patches_dir / name))
        try:
            os.unlink(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            if not missing_ok:
                raise
        finally:
            os.close(fd)


def _mode(path: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o644
