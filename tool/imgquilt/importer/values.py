"""The values import works with: what a foreign patch says, and what applying it gives."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import MalformedPatch
from ..queue.binarypatch import BinaryPatch
from ..queue.hunks import Hunk


@dataclass(frozen=True)
class Pin:
    """What a patch claims about one file: where it is and the hashes before and after."""

    target: str | None = None
    base: str | None = None
    patched: str | None = None
    mode: int | None = None


@dataclass(frozen=True)
class ForeignFile:
    """One file diff of a foreign patch, names as written (unquoted, timestamps cut)."""

    old_name: str | None  # None: /dev/null
    new_name: str | None
    old_absent: bool
    new_absent: bool
    hunks: tuple[Hunk, ...]
    line: int  # 1-based line of the diff's first line, for messages
    new_file_mode: int | None = None
    mode_change: tuple[int, int] | None = None
    git_index: tuple[str, str] | None = None
    rename: bool = False
    copy: bool = False
    binary: bool = False
    pin: Pin | None = None
    git: bool = False
    binary_patch: BinaryPatch | None = None  # `GIT binary patch` (None with binary: "Binary files differ")
    # the kind git states (a mode on any of its lines): True a symlink (120000), False a regular
    # file, None not said (a plain diff: the file the name leads to)
    link: bool | None = None
    old_mode: int | None = None  # `old mode`, or the mode of `deleted file mode`/`index ... MODE` (permission bits)
    # the names on `rename from`/`rename to` (`copy from`/`copy to`): git apply takes these, stripped of one
    # component less than -p says (they carry no a/ b/)
    moved_names: tuple[str, str] | None = None
    gnu_cut: str | None = None  # the name git would read where GNU patch's rule (a series) cut it at a space

    @property
    def headers_only(self) -> bool:
        """A `diff --git` section with nothing under it: no hunk, no mode, no rename, no binary."""
        return (self.git and not self.hunks and not self.binary and not self.rename and not self.copy
                and self.mode_change is None and self.new_file_mode is None and not self.old_absent and not self.new_absent)


@dataclass(frozen=True)
class ForeignPatch:
    """A parsed foreign patch: the header imgquilt will keep and its file diffs in order."""

    source: str
    header: bytes
    files: tuple[ForeignFile, ...]
    kind: str  # "mail", "git", "plain"
    trailer: bytes = b""  # text after the last hunk (a topgit `tg:` trailer, a mail signature): kept as it is


@dataclass(frozen=True)
class Base:
    """What a path holds where a foreign patch is imported: bytes, permission bits and kind."""

    data: bytes | None  # None: absent
    mode: int | None = None  # permission bits (None: absent, or not known)
    link: bool = False  # a symlink, read as itself: `data` is its target


@dataclass(frozen=True)
class FileChange:
    """The net change of one path over a whole foreign patch."""

    path: str
    base: bytes | None
    result: bytes | None
    mode: int | None  # for a new file
    # the imported hunks renumbered to the lines they apply at, when they alone make this change
    # (no fuzz, no anchor): written as they came; None: the writer diffs base -> result
    hunks: tuple[Hunk, ...] | None = None
    link: bool = False  # a symlink (base and result are its target)
    mode_change: tuple[int, int] | None = None  # permission bits before and after, of a file there before and after
    deleted_mode: int | None = None  # permission bits of a regular file the change deletes, as it is here (None: not known)


@dataclass
class Converted:
    """The outcome of applying a foreign patch to real bases."""

    changes: list[FileChange]
    notes: list[str] = field(default_factory=list)
    index_mismatches: list[IndexMismatch] = field(default_factory=list)


@dataclass(frozen=True)
class IndexMismatch:
    """A git `index` line naming other blobs than the bases here (a series imports past it: see convert)."""

    path: str
    side: str  # "base" or "result"
    want: str  # the abbreviated blob id the diff names
    have: str  # the blob id here, as long as `want`


def bad(source: str, line: int, msg: str) -> MalformedPatch:
    where = f"{source} line {line}" if line else source
    return MalformedPatch(f"Cannot import {where}: {msg}", hint="Check that the file is a unified diff (diff -u, git diff, quilt).")


