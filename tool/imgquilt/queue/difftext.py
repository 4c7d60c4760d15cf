"""Unified-diff hunk text, byte-exact: written so GNU `patch -p1` and `git apply` accept it, and read back.

One reader serves imgquilt's own patch files and every foreign patch `import` takes.
"""
from __future__ import annotations

import re
from difflib import SequenceMatcher

from .hunks import Hunk, HunkLine, split_lines

_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")

NO_NEWLINE = b"\\ No newline at end of file\n"


def _range(start: int, length: int) -> str:
    # GNU diff's convention (as difflib): a one-line range omits its length, an empty one points before
    beginning = start + 1
    if length == 1:
        return f"{beginning}"
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def diff_hunks(old: bytes | None, new: bytes | None, context: int = 3) -> list[Hunk]:
    """The hunks that turn `old` into `new` (None: absent, treated as empty)."""
    a = split_lines(old or b"")
    b = split_lines(new or b"")
    # autojunk off: its popularity heuristic gives wrong (larger) diffs on files with many equal lines
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    hunks: list[Hunk] = []
    for group in matcher.get_grouped_opcodes(context):
        if len(group) == 1 and group[0][0] == "equal":
            continue
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        lines: list[HunkLine] = []
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines.extend(HunkLine(" ", t) for t in a[a1:a2])
                continue
            lines.extend(HunkLine("-", t) for t in a[a1:a2])
            lines.extend(HunkLine("+", t) for t in b[b1:b2])
        old_start = i1 + 1 if i2 > i1 else i1
        new_start = j1 + 1 if j2 > j1 else j1
        hunks.append(Hunk(old_start, i2 - i1, new_start, j2 - j1, tuple(lines)))
    return hunks


def format_hunks(hunks: list[Hunk] | tuple[Hunk, ...]) -> bytes:
    """Render hunks as unified-diff text, marking lines without a final newline."""
    out: list[bytes] = []
    for h in hunks:
        old_start = h.old_start - 1 if h.old_len else h.old_start
        new_start = h.new_start - 1 if h.new_len else h.new_start
        out.append(f"@@ -{_range(old_start, h.old_len)} +{_range(new_start, h.new_len)} @@\n".encode())
        for ln in h.lines:
            out.append(ln.kind.encode() + ln.text)
            if not ln.text.endswith(b"\n"):
                out.append(b"\n" + NO_NEWLINE)
    return b"".join(out)


def unified_diff(old: bytes | None, new: bytes | None, path: str, context: int = 3) -> bytes:
    """A whole file diff: `---`/`+++` lines (a/, b/ or /dev/null) and its hunks."""
    old_name = "/dev/null" if old is None else f"a/{path}"
    new_name = "/dev/null" if new is None else f"b/{path}"
    head = f"--- {old_name}\n+++ {new_name}\n".encode("utf-8", "surrogateescape")
    return head + format_hunks(diff_hunks(old, new, context))


from .hunkread import HunkTextError, is_file_start, read_hunks  # noqa: E402  (the one reader; re-exported)
