"""The queue's `series` and `patches/` as the work commands edit them.

Series edits go line by line (queue.series), so comments, blank lines, `-p0` options and guards of
other lines are kept.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInput
from ..queue import series as series_text
from ..queue.series import SeriesEntry, parse_series
from ..util.atomic import atomic_write
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

    def remove(self, name: str) -> None:
        atomic_write(self.series_path, series_text.removed(self.series_bytes(), name))

    def rename(self, old: str, new: str) -> None:
        atomic_write(self.series_path, series_text.renamed(self.series_bytes(), old, new))

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
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, patch.raw)

