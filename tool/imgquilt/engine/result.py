"""The values an apply produces: every sink (layer, image, rootfs, overlay) writes from these."""
from __future__ import annotations

from dataclasses import dataclass

from ..fs.content import Data
from ..fs.types import ImageInfo, TargetFile
from ..fs.pycache import Bytecode

RECORD_PATH = "var/lib/imgquilt/applied.json"


@dataclass(frozen=True)
class FileResult:
    """One resolved file after the whole series: its base as read and its final bytes."""

    target: TargetFile  # the base as read from the source (named path, resolved path, data, metadata)
    final: Data | None  # None: the series deletes the file
    mode: int  # final permission bits (the base's; `Mode:` or 0644 for a new file)
    uid: int
    gid: int
    patches: tuple[str, ...]  # the patches that touch it, in series order
    steps: tuple[tuple[str, str, str], ...] = ()  # (patch, base sha256, result sha256) per section, in order
    link: bool = False  # the final file is a symlink whose target is `final`

    @property
    def resolved(self) -> str:
        return self.target.resolved

    @property
    def changed(self) -> bool:
        """Bytes, kind or (of a file there before and after) permission bits differ from the base."""
        if self.final != self.target.data or (self.final is not None and self.link != self.target.link):
            return True
        return self.final is not None and not self.link and (self.mode & 0o7777) != (self.target.mode & 0o7777)


@dataclass(frozen=True)
class ApplyResult:
    """A verified apply, held in memory: nothing has been written yet."""

    info: ImageInfo
    series_sha256: str
    patches: tuple[str, ...]
    files: tuple[FileResult, ...]  # sorted by resolved path; includes the record at RECORD_PATH
    pinned: bool  # a targets.lock was used
    notes: tuple[str, ...] = ()  # things to tell the user (image digest differs from the lock, ...)
    # bytecode CPython could load instead of a source the series changes: removed with the change
    # (a whiteout in a layer, an unlink in place, hidden in an overlay)
    bytecode: tuple[Bytecode, ...] = ()
    # environment defaults the apply declares for the image's config (KEY, VALUE), sorted; recorded
    env: tuple[tuple[str, str], ...] = ()
