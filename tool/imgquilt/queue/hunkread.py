"""Hunks of foreign patches (`import`): the patch format's own section reader (queue.streamed.scan_hunks)
over a list of lines, with import's hand-written dialect on: `@@ append ... @@` / `@@ prepend ... @@`
hunks, whose `+` lines go at the end / start of the file. Lines are split at LF only, so CRLF, a lone
CR and non-UTF-8 bytes come back exactly.
"""
from __future__ import annotations

from itertools import accumulate

from .hunks import Hunk
from .streamed import Lines, StreamError, hunk_values, scan_hunks


class HunkTextError(ValueError):
    """Hunk text that cannot be read; `line` is 1-based. Callers turn it into their MalformedPatch."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def is_file_start(lines: list[bytes], i: int) -> bool:
    """Does a file diff start at `lines[i]` (`diff --git`, or a `---` line followed by `+++`)?"""
    ln = lines[i]
    if ln.startswith(b"diff --git "):
        return True
    return ln.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")


class Joined:
    """A patch's lines joined once, with where each line starts: import reads every file diff of a patch
    from the same lines, and joining the rest for each would copy the patch once per section."""

    def __init__(self, lines: list[bytes]) -> None:
        self.data = b"".join(lines)
        self.starts = [0, *accumulate(map(len, lines))]


def read_hunks(lines: list[bytes] | Joined, i: int) -> tuple[list[Hunk], int]:
    """Read the hunks starting at line `i` (lines keep their endings); returns them and the next index.
    Line numbers in a HunkTextError are 1-based. A caller reading several diffs of one patch passes
    the lines `Joined` once."""
    joined = lines if isinstance(lines, Joined) else Joined(lines)
    rd = Lines(joined.data, joined.starts[i])
    rd.lineno = i
    try:
        hunks = hunk_values(scan_hunks(rd, anchors=True))
    except StreamError as exc:
        raise HunkTextError(exc.line, exc.message) from None
    return list(hunks), rd.lineno
