"""The reference for the one hunk reader (queue.streamed.scan_hunks): the reader imgquilt used before it,
unidiff framed by @@ headers, kept here only as the oracle of tests/test_streamed_paths.py.

It was the reader of imgquilt's own patch files and of every foreign patch `import` takes.

unidiff parses the hunk bodies. It is fed lines split at LF only and decoded as latin-1 (one
character per byte), so CRLF, a lone CR and non-UTF-8 bytes come back exactly. A small pre-pass
frames each hunk by its @@ header (so a hunk that grew by a hand edit is refused, not cut) and
reads the hand-written dialect unidiff does not know: `@@ append ... @@` / `@@ prepend ... @@`
hunks, whose `+` lines go at the end / start of the file.
"""

from __future__ import annotations

import re


from imgquilt.queue.hunks import Hunk, HunkLine, show_line

_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_ANCHOR = re.compile(rb"^@@+[ \t]*(append|prepend)\b[^\n]*?@@+[ \t]*\r?\n?$", re.I)


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


def _frame(lines: list[bytes], i: int, head_line: int, old_len: int, new_len: int) -> int:
    """The index just past the hunk whose header is at lines[i-1], counted from its header."""
    n = len(lines)
    old_left, new_left = old_len, new_len
    while old_left or new_left:
        if i >= n:
            raise HunkTextError(head_line, "the hunk ends before its @@ header says (truncated patch?).")
        ln = lines[i]
        c = ln[:1]
        if c == b"\\":
            i += 1
            continue
        if c == b"+":
            new_left -= 1
        elif c == b"-":
            old_left -= 1
        elif c == b" " or ln in (b"\n", b"\r\n"):
            old_left -= 1
            new_left -= 1
        else:
            raise HunkTextError(i + 1, f"the hunk at line {head_line} ends early, at {show_line(ln, 60)}.")
        if old_left < 0 or new_left < 0:
            raise HunkTextError(i + 1, f"the hunk at line {head_line} has more lines than its @@ header says.")
        i += 1
    if i < n and lines[i].startswith(b"\\"):
        i += 1
    if i < n and lines[i][:1] in (b"+", b"-") and not is_file_start(lines, i) and not is_trailer_start(lines[i]):
        raise HunkTextError(i + 1, f"the hunk at line {head_line} has more lines than its @@ header says.")
    return i


def is_trailer_start(line: bytes) -> bool:
    """A line that ends the diff text after a complete hunk, as `git apply` and GNU patch read it: a mail
    signature's `-- ` or a `---` line (topgit's `tg:` trailer and `git format-patch` notes follow one)."""
    return line.rstrip(b"\r\n") in (b"-- ", b"---")


def _anchored(lines: list[bytes], i: int, kind: str) -> tuple[Hunk, int]:
    """An `@@ append/prepend ... @@` hunk: its `+` lines (and a `\\ No newline` marker), nothing else."""
    body: list[HunkLine] = []
    while i < len(lines) and lines[i][:1] in (b"+", b"\\") and not is_file_start(lines, i):
        if lines[i][:1] == b"\\":
            _no_newline(body, i + 1)
        else:
            body.append(HunkLine("+", lines[i][1:]))
        i += 1
    return Hunk(0, 0, 0, len(body), tuple(body), anchor=kind), i


def _no_newline(body: list[HunkLine], lineno: int) -> None:
    if not body or not body[-1].text.endswith(b"\n"):
        raise HunkTextError(lineno, "a `\\ No newline at end of file` marker follows no line.")
    last = body[-1]
    body[-1] = HunkLine(last.kind, last.text[:-1])


def _parse_with_unidiff(lines: list[bytes], spans: list[tuple[int, int]]) -> list[Hunk]:
    """unidiff reads the framed numeric hunks (one synthetic file diff holding them all)."""
    # imported here: commands that read a queue's headers only (header, top) never load it
    from unidiff import PatchSet
    from unidiff.constants import LINE_TYPE_NO_NEWLINE
    from unidiff.errors import UnidiffParseError

    text = ["--- a\n", "+++ b\n"]
    for a, b in spans:
        text += [ln.decode("latin-1") for ln in lines[a:b]]
    try:
        (pf,) = PatchSet(text)
    except (UnidiffParseError, ValueError) as exc:
        raise HunkTextError(spans[0][0] + 1, f"cannot read the hunks: {exc}.") from None
    out: list[Hunk] = []
    for (a, _b), uh in zip(spans, pf):
        body: list[HunkLine] = []
        for ln in uh:
            if ln.line_type == LINE_TYPE_NO_NEWLINE:
                _no_newline(body, a + 1)
                continue
            if ln.line_type in (" ", "-", "+"):
                body.append(HunkLine(ln.line_type, ln.value.encode("latin-1")))
        out.append(Hunk(uh.source_start, uh.source_length, uh.target_start, uh.target_length, tuple(body)))
    return out


def read_hunks(lines: list[bytes], i: int) -> tuple[list[Hunk], int]:
    """Read the hunks starting at `lines[i]` (lines keep their endings); returns them and the next index.

    Each hunk is exactly as long as its @@ header says: a short one is truncated, a longer one
    (a hand edit that grew) is refused rather than silently cut. A bare empty line is a context
    line whose leading space a mailer stripped.
    """
    n = len(lines)
    pieces: list[Hunk | tuple[int, int]] = []
    while i < n and lines[i].startswith(b"@@"):
        anchor = _ANCHOR.match(lines[i])
        if anchor:
            hunk, i = _anchored(lines, i + 1, anchor.group(1).decode().lower())
            pieces.append(hunk)
            continue
        m = _HUNK_HEADER.match(lines[i])
        if not m:
            raise HunkTextError(i + 1, f"cannot read hunk header {show_line(lines[i].rstrip())}.")
        old_len = 1 if m.group(2) is None else int(m.group(2))
        new_len = 1 if m.group(4) is None else int(m.group(4))
        end = _frame(lines, i + 1, i + 1, old_len, new_len)
        pieces.append((i, end))
        i = end
    spans = [p for p in pieces if isinstance(p, tuple)]
    parsed = iter(_parse_with_unidiff(lines, spans) if spans else [])
    return [p if isinstance(p, Hunk) else next(parsed) for p in pieces], i
