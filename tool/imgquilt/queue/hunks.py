"""The values of the patch format: hunks and their lines, byte-exact, and the file hash that pins them.

They sit under the engine (which applies them) and the queue's patch files (which carry them).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..fs.content import Data, sha256_of

ABSENT = "absent"


def sha256_hex(data: Data | None) -> str:
    """The lowercase hex sha256 of `data`, or "absent" for a file that does not exist."""
    if data is None:
        return ABSENT
    return sha256_of(data)


def show_line(line: bytes, limit: int = 80) -> str:
    """A line of a file or patch as a message quotes it: text in quotes (no b'' repr), its line end
    dropped, other control bytes and non-UTF-8 escaped, long lines cut."""
    text = line.rstrip(b"\n").decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= limit else text[:limit] + "…")


def split_lines(data: bytes) -> list[bytes]:
    """Split into lines that keep their b"\\n" (CR stays part of the line: CRLF survives)."""
    parts = data.split(b"\n")
    lines = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


@dataclass(frozen=True)
class HunkLine:
    """One hunk line: kind is " ", "-" or "+"; text is the exact line bytes (with its newline, if any)."""

    kind: str
    text: bytes


@dataclass(frozen=True)
class Hunk:
    """A parsed hunk: the ranges of its header and its lines, byte-exact."""

    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[HunkLine, ...]
    # "append"/"prepend": a hand-written `@@ append ... @@` hunk of `+` lines placed at the file's end/start
    anchor: str | None = None

    @property
    def old_lines(self) -> list[bytes]:
        return [ln.text for ln in self.lines if ln.kind != "+"]

    @property
    def new_lines(self) -> list[bytes]:
        return [ln.text for ln in self.lines if ln.kind != "-"]
