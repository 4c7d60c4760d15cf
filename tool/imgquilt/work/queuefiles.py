"""The queue's `series` and `patches/` as the work commands edit them.

Series edits go line by line, so comments, blank lines and `-p0` options of other lines are kept.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInput
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

    def inserted(self, names: list[str], after: str | None) -> bytes:
        """The series bytes with `names` inserted after `after` (None: before the first patch); nothing written."""
        lines = self._lines()
        entries = self.entries()
        if after is not None:
            at = next(e.line for e in entries if e.name == after)
        else:
            at = entries[0].line - 1 if entries else len(lines)
        if at > 0 and not lines[at - 1].endswith(("\n", "\r")):
            lines[at - 1] += "\n"
        lines[at:at] = [n + "\n" for n in names]
        return self._joined(lines)

    def removed(self, name: str) -> bytes:
        """The series bytes without `name`'s line; nothing written."""
        lines = self._lines()
        entry = next(e for e in self.entries() if e.name == name)
        del lines[entry.line - 1]
        return self._joined(lines)

    def renamed(self, old: str, new: str) -> bytes:
        """The series bytes with `old` named `new` (its options and comment kept); nothing written."""
        lines = self._lines()
        entry = next(e for e in self.entries() if e.name == old)
        line = lines[entry.line - 1]
        k = line.index(old)
        lines[entry.line - 1] = line[:k] + new + line[k + len(old) :]
        return self._joined(lines)

    def _lines(self) -> list[str]:
        return self.series_bytes().decode("utf-8", "surrogateescape").splitlines(keepends=True)

    @staticmethod
    def _joined(lines: list[str]) -> bytes:
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        return "".join(lines).encode("utf-8", "surrogateescape")

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

