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


@dataclass(frozen=True)
class ForeignPatch:
    """A parsed foreign patch: the header imgquilt will keep and its file diffs in order."""

    source: str
    header: bytes
    files: tuple[ForeignFile, ...]
    kind: str  # "mail", "git", "plain"


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


@dataclass
class Converted:
    """The outcome of applying a foreign patch to real bases."""

    changes: list[FileChange]
    notes: list[str] = field(default_factory=list)


def bad(source: str, line: int, msg: str) -> MalformedPatch:
    where = f"{source} line {line}" if line else source
    return MalformedPatch(f"Cannot import {where}: {msg}", hint="Check that the file is a unified diff (diff -u, git diff, quilt).")


