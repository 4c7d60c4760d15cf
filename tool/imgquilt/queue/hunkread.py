"""Hunks of foreign patches (`import`): the patch format's own section reader (queue.streamed.scan_hunks)
over a list of lines, with import's hand-written dialect on: `@@ append ... @@` / `@@ prepend ... @@`
hunks, whose `+` lines go at the end / start of the file. Lines are split at LF only, so CRLF, a lone
CR and non-UTF-8 bytes come back exactly.
"""
from __future__ import annotations

from itertools import accumulate

from .hunks import Hunk


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


def is_trailer_start(line: bytes) -> bool:
    """A line that ends the diff text after a complete hunk, as `git apply` and GNU patch read it: a mail
    signature's `-- ` or a `---` line (topgit's `tg:` trailer and `git format-patch` notes follow one)."""
    return line.rstrip(b"\r\n") in (b"-- ", b"---")


_last: list = [None, b"", []]  # the list of lines last read, its bytes, where each line starts


def _joined(lines: list[bytes]) -> tuple[bytes, list[int]]:
    """The bytes of `lines` and each line's offset, made once per list (import reads each file diff of
    a patch from the same list: joining the rest for each would copy the patch once per section)."""
    if _last[0] is not lines or len(_last[2]) != len(lines) + 1:
        _last[:] = [lines, b"".join(lines), [0, *accumulate(map(len, lines))]]
    return _last[1], _last[2]


def read_hunks(lines: list[bytes], i: int) -> tuple[list[Hunk], int]:
    """Read the hunks starting at `lines[i]` (lines keep their endings); returns them and the next index.
    Line numbers in a HunkTextError are 1-based in `lines`."""
    from .streamed import Lines, StreamError, hunk_values, scan_hunks

    data, starts = _joined(lines)
    if i < len(lines) and data[starts[i] : starts[i + 1]] != lines[i]:  # the list was changed in place
        _last[0] = None
        data, starts = _joined(lines)
    rd = Lines(data, starts[i])
    rd.lineno = i
    try:
        hunks = hunk_values(scan_hunks(rd, anchors=True))
    except StreamError as exc:
        raise HunkTextError(exc.line, exc.message) from None
    return list(hunks), rd.lineno
