"""Unified-diff hunk text, byte-exact: written so GNU `patch -p1` and `git apply` accept it, and read back.

The patch format's hunks (and git's output here) are read by one section reader (queue.streamed);
`import` reads foreign dialects with hunkread.

The writer asks git (a dependency) for the hunks: `git diff --no-index` is Myers with git's and GNU
diff's boundary rules, so a refreshed patch carries the hunks `diff -u` would write, and it stays
fast on 10,000-line files, where difflib is quadratic. difflib is kept only for a machine without git.
"""
from __future__ import annotations

import os
import re

from .hunks import Hunk, HunkLine, split_lines
from .hunkread import is_file_start
from .streamed import is_trailer_start
from .pathquote import quote_name

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


# the hunks only, whatever the user's git configuration says about colour, algorithm or prefixes
_GIT = ("git", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false", "-c", "diff.algorithm=myers",
        "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false", "-c", "core.quotePath=false",
        "diff", "--no-index", "--no-color", "--no-ext-diff", "--no-textconv", "--text", "--no-renames",
        "--no-indent-heuristic")


def diff_hunks(old: bytes | None, new: bytes | None, context: int = 3) -> list[Hunk]:
    """The hunks that turn `old` into `new` (None: absent, treated as empty), as `diff -u` writes them."""
    a, b = old or b"", new or b""
    if a == b:
        return []
    try:
        return _git_hunks(a, b, context)
    except FileNotFoundError:  # no git on this machine
        return _difflib_hunks(a, b, context)


def _git_hunks(a: bytes, b: bytes, context: int) -> list[Hunk]:
    import subprocess  # here, not at import: reading a queue (top, check) never diffs
    import tempfile

    with tempfile.TemporaryDirectory(prefix="imgquilt-diff-") as tmp:
        paths = []
        for name, data in (("a", a), ("b", b)):
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            paths.append(path)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
        p = subprocess.run([*_GIT, f"-U{context}", *paths], cwd=tmp, env=env, capture_output=True)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"git diff --no-index failed ({p.returncode}): {p.stderr.decode(errors='replace').strip()}")
    # read by the patch format's own section reader (queue.streamed), on \n only: a lone \r belongs to its line
    from .streamed import Lines, StreamError, hunk_values, scan_hunks

    out = p.stdout
    start = 0 if out.startswith(b"@@ ") else out.find(b"\n@@ ") + 1 or len(out)
    rd = Lines(out, start)
    try:
        hunks = list(hunk_values(scan_hunks(rd)))
    except StreamError as exc:
        raise RuntimeError(f"unexpected output from git diff: {exc.message}") from None
    if not rd.at_end():
        raise RuntimeError(f"unexpected output from git diff at byte {rd.offset}: {(rd.peek_line() or b'')[:60]!r}")
    return hunks


def _difflib_hunks(old: bytes, new: bytes, context: int) -> list[Hunk]:
    from difflib import SequenceMatcher

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


def diff_names(path: str, old_absent: bool, new_absent: bool) -> bytes:
    """The `---`/`+++` lines of a file diff (a/, b/ or /dev/null; a name git would quote, quoted). A
    name holding a space ends with a tab, as git writes it: GNU patch reads a bare name up to the first
    blank unless a tab follows it."""
    tab = b"\t" if " " in path else b""
    old_name = b"/dev/null" if old_absent else quote_name(f"a/{path}") + tab
    new_name = b"/dev/null" if new_absent else quote_name(f"b/{path}") + tab
    return b"--- " + old_name + b"\n+++ " + new_name + b"\n"


def unified_diff(old: bytes | None, new: bytes | None, path: str, context: int = 3) -> bytes:
    """A whole file diff: `---`/`+++` lines (a/, b/ or /dev/null) and its hunks."""
    return diff_names(path, old is None, new is None) + format_hunks(diff_hunks(old, new, context))


def header_for(h: Hunk) -> bytes:
    """The `@@ -a,b +c,d @@` of a hunk whose starts are header numbers (as parsed)."""
    old_start = h.old_start - 1 if h.old_len else h.old_start
    new_start = h.new_start - 1 if h.new_len else h.new_start
    return f"@@ -{_range(old_start, h.old_len)} +{_range(new_start, h.new_len)} @@".encode()


def renumber_headers(raw: bytes, hunks: list[Hunk] | tuple[Hunk, ...]) -> bytes:
    """A section's bytes with its numeric `@@` headers, in order, naming `hunks`' lines (text after
    the closing `@@` and every other byte kept)."""
    lines = split_lines(raw)
    todo = iter(hunks)
    for i, ln in enumerate(lines):
        m = _HUNK_HEADER.match(ln)
        if m:
            h = next(todo, None)
            if h is None:
                break
            lines[i] = header_for(h) + ln[m.end():]
    return b"".join(lines)


def _in_hunk(lines: list[bytes], k: int) -> bool:
    ln = lines[k]
    return (ln[:1] in (b" ", b"-", b"+", b"\\") or ln in (b"\n", b"\r\n")) and not is_file_start(lines, k) and not is_trailer_start(ln)


def recount_hunks(data: bytes) -> bytes:
    """A hand-edited patch with every numeric `@@` header's line counts (and new-side starts) made to
    match the lines below it, as patchutils' recountdiff does: a hunk runs to the next `@@`, section or
    file diff; blank lines that end a section are a separator, not context. Old-side starts are kept."""
    lines = split_lines(data)
    k = next((i for i, ln in enumerate(lines) if ln.startswith(b"Index: ")), len(lines))
    delta = 0
    while k < len(lines):
        ln = lines[k]
        if ln.startswith(b"Index: "):
            delta = 0
        m = _HUNK_HEADER.match(ln)
        if not m:
            k += 1
            continue
        end = k + 1
        while end < len(lines) and _in_hunk(lines, end):
            end += 1
        body = lines[k + 1:end]
        if end == len(lines) or lines[end].startswith(b"Index: "):
            while body and body[-1] in (b"\n", b"\r\n"):
                body.pop()
        old_len = sum(1 for b in body if b[:1] in (b" ", b"-") or b in (b"\n", b"\r\n"))
        new_len = sum(1 for b in body if b[:1] in (b" ", b"+") or b in (b"\n", b"\r\n"))
        written = 1 if m.group(2) is None else int(m.group(2))
        first = int(m.group(1)) - 1 if written else int(m.group(1))  # 0-based, as written
        lines[k] = f"@@ -{_range(first, old_len)} +{_range(first + delta, new_len)} @@".encode() + ln[m.end():]
        delta += new_len - old_len
        k = end
    return b"".join(lines)
