"""Apply unified-diff hunks to bytes, exactly where they say: no fuzz, no offset.

The sha256 pins make fuzz unnecessary: a section only runs on the exact base it names, so a hunk
that does not match at its stated line is a malformed patch, never something to slide around.
"""
from __future__ import annotations

from ..queue.hunks import Hunk, HunkLine, split_lines


class HunkError(Exception):
    """A hunk does not match the bytes it is applied to (raised by the pure engine)."""

    def __init__(self, index: int, line: int, detail: str) -> None:
        super().__init__(f"hunk #{index + 1} does not match at line {line}: {detail}")
        self.index = index
        self.line = line
        self.detail = detail


def apply_hunks(old: bytes, hunks: tuple[Hunk, ...] | list[Hunk]) -> bytes:
    """Apply `hunks` (in order, non-overlapping) to `old` at their exact positions."""
    src = split_lines(old)
    out: list[bytes] = []
    pos = 0  # next unconsumed line of src (0-based)
    for i, h in enumerate(hunks):
        start = h.old_start if h.old_len == 0 else h.old_start - 1
        if start < pos or start > len(src):
            raise HunkError(i, h.old_start, f"start is outside the file or overlaps the previous hunk ({len(src)} lines)")
        out.extend(src[pos:start])
        pos = start
        for ln in h.lines:
            if ln.kind == "+":
                out.append(ln.text)
                continue
            if pos >= len(src):
                raise HunkError(i, pos + 1, "the file ends before the hunk does")
            if src[pos] != ln.text:
                raise HunkError(i, pos + 1, f"expected {ln.text!r}, found {src[pos]!r}")
            if ln.kind == " ":
                out.append(src[pos])
            pos += 1
    out.extend(src[pos:])
    return b"".join(out)


def reverse_hunks(hunks: tuple[Hunk, ...]) -> tuple[Hunk, ...]:
    """The hunks that undo `hunks` (used to test whether a change is present)."""
    swap = {" ": " ", "-": "+", "+": "-"}
    return tuple(
        Hunk(h.new_start, h.new_len, h.old_start, h.old_len, tuple(HunkLine(swap[ln.kind], ln.text) for ln in h.lines))
        for h in hunks
    )
