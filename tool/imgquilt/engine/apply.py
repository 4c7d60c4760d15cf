"""Apply unified-diff hunks to bytes, exactly where they say: no fuzz, no offset.

The sha256 pins make fuzz unnecessary: a section only runs on the exact base it names, so a hunk
that does not match at its stated line is a malformed patch, never something to slide around.
Only `import` places foreign hunks the way `patch` and `git apply` do (`place_hunks`), and then
writes them renumbered at the lines they really apply at.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, overload

from ..fs.content import CHUNK, Data, SpoolWriter, chunks_of, is_spooled, pread_of
from ..queue.binarypatch import BinaryPatchError, apply_binary
from ..queue.hunks import Hunk, HunkLine, show_line, split_lines
from ..queue.patchfile import FileSection
from ..queue.streamed import StreamedHunks, StreamError, hunk_events


class HunkError(Exception):
    """A hunk does not match the bytes it is applied to (raised by the pure engine)."""

    def __init__(self, index: int, line: int, detail: str) -> None:
        super().__init__(f"hunk #{index + 1} does not match at line {line}: {detail}")
        self.index = index
        self.line = line
        self.detail = detail


class BinaryMismatch(HunkError):
    """A binary (delta) patch does not fit the bytes it is applied to."""

    def __init__(self, detail: str) -> None:
        Exception.__init__(self, f"the binary patch does not apply: {detail}")
        self.index, self.line, self.detail = 0, 0, detail


@overload
def apply_hunks(old: bytes | None, hunks: Sequence[Hunk]) -> bytes: ...
@overload
def apply_hunks(old: Data | None, hunks: Sequence[Hunk] | StreamedHunks) -> Data: ...
def apply_hunks(old: Data | None, hunks: Sequence[Hunk] | StreamedHunks) -> Data:
    """Apply `hunks` (Hunk values or a StreamedHunks; in order, non-overlapping) to `old` at their exact
    positions. The one applier: the base is read in order (`_Base`: a Spooled a chunk at a time, bytes
    as one chunk), the hunks as runs of lines (`hunk_events`), compared and copied in bulk. Bytes and
    Hunk values give bytes; a Spooled base or a StreamedHunks gives a result spooled when it is large
    (bounded memory). A mismatch is a HunkError (hunk index, 1-based line, what was expected and found)."""
    held = not is_spooled(old) and not isinstance(hunks, StreamedHunks)
    return _apply(_Base(old if old is not None else b""), hunks, _Joined() if held else SpoolWriter())


def apply_section(old: Data | None, s: FileSection) -> Data:
    """A section's new bytes from its base: its hunks at their exact lines, or its binary patch.

    A large base (a Spooled) or a section too large to hold (StreamedHunks) is applied as it streams,
    into a spooled result: the same bytes, in bounded memory."""
    if s.binary is not None:
        try:
            return apply_binary(old, s.binary)
        except BinaryPatchError as exc:
            raise BinaryMismatch(exc.message) from None
    return apply_hunks(old, s.hunks)


class _Joined:
    """The result of a held base and hunks: its pieces, joined once at the end (a SpoolWriter that never spills)."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def abort(self) -> None:
        self.parts = []

    def finish(self) -> bytes:
        return b"".join(self.parts)


class _Base:
    """The base, read in order: a Spooled a chunk at a time; bytes are the simple case, one chunk that is
    the whole content (no copy, no split into lines: runs of lines are found with `find`)."""

    __slots__ = ("data", "buf", "at", "_next")

    def __init__(self, data: Data) -> None:
        self.data = data
        self.buf = b"" if is_spooled(data) else data
        self.at = 0  # in buf
        self._next = len(self.buf)  # content position after buf

    def _fill(self) -> bool:
        if self._next >= len(self.data):
            return False
        more = pread_of(self.data, CHUNK, self._next)
        self._next += len(more)
        self.buf = self.buf[self.at :] + more
        self.at = 0
        return bool(more)

    def count_lines(self) -> int:
        """The base's lines (for a message)."""
        n = 0
        last = b""
        for c in chunks_of(self.data):
            n += c.count(b"\n")
            last = c[-1:] or last
        return n + (last not in (b"", b"\n"))

    def at_eof(self) -> bool:
        return self.at >= len(self.buf) and not self._fill()

    def take(self, n: int) -> bytes:
        """The next `n` bytes, consumed (fewer only at the end)."""
        while len(self.buf) - self.at < n and self._fill():
            pass
        out = self.buf[self.at : self.at + n]
        self.at += len(out)
        return out

    def copy_lines(self, k: int, out) -> int:
        """Copy the next `k` lines to `out`; the number copied (fewer only at the end, where a last line
        without a newline counts). A line longer than a chunk is copied in pieces."""
        done = 0
        partial = False  # bytes of an unfinished line already copied
        while done < k:
            buf, at = self.buf, self.at
            end, n = _after_lines(buf, at, k - done)
            done += n
            if done == k:
                out.write(buf[at:end])
                self.at = end
                return k
            partial = end < len(buf) or (partial and end == at)
            if at < len(buf):
                out.write(buf[at:] if at else buf)
            self.at = len(buf)
            if not self._fill():
                return done + partial
        return done

    def copy_rest(self, out) -> None:
        if self.at < len(self.buf):
            out.write(self.buf[self.at :] if self.at else self.buf)
        self.at = len(self.buf)
        for chunk in chunks_of(self.data, CHUNK, self._next):
            out.write(chunk)
        self._next = len(self.data)

    def rest_of_line(self, limit: int = 1024) -> bytes:
        """The rest of the current line (up to `limit` bytes), for a message."""
        while self.buf.find(b"\n", self.at, self.at + limit) < 0 and len(self.buf) - self.at < limit and self._fill():
            pass
        nl = self.buf.find(b"\n", self.at, self.at + limit)
        return self.buf[self.at : (nl + 1 if nl >= 0 else self.at + limit)]


_BLOCK = 4096


def _after_lines(buf: bytes, at: int, k: int) -> tuple[int, int]:
    """(the index just past the `k`-th b"\\n" of `buf` from `at`, k); when it holds fewer, (just past its
    last one, how many). Newlines are counted a block at a time, found one by one only in the last block."""
    end = at
    done = 0
    size = len(buf)
    while end < size:
        c = buf.count(b"\n", end, end + _BLOCK)
        if done + c >= k:
            break
        done += c
        end += _BLOCK
    if end >= size:
        last = buf.rfind(b"\n", at) + 1
        return (last, done) if last else (at, 0)
    while done < k:
        end = buf.find(b"\n", end) + 1
        done += 1
    return end, k


def _apply(base: _Base, hunks, out) -> Data:
    """The one hunk applier: runs of lines compared and copied in bulk from `base` into `out`."""
    pos = 0  # lines of the base consumed
    index = 0
    try:
        for ev in hunk_events(hunks):
            if ev[0] == "@":
                _, index, old_start, old_len, _new_start, _new_len = ev
                start = old_start if old_len == 0 else old_start - 1
                if start < pos:
                    raise HunkError(index, old_start, f"start is outside the file or overlaps the previous hunk ({base.count_lines()} lines)")
                pos += base.copy_lines(start - pos, out)
                if pos < start:
                    raise HunkError(index, old_start, f"start is outside the file or overlaps the previous hunk ({base.count_lines()} lines)")
                continue
            kind, payload, lines = ev
            if kind == "+":
                out.write(payload)
                continue
            if base.at_eof():
                raise HunkError(index, pos + 1, "the file ends before the hunk does")
            got = base.take(len(payload))
            # a payload whose last line has no newline matches only the file's last line
            if got != payload or (lines and not payload.endswith(b"\n") and not base.at_eof()):
                raise _mismatch(index, pos, payload, got, base)
            if kind == " ":
                out.write(payload)
            pos += lines
        base.copy_rest(out)
    except StreamError as exc:  # the patch file changed since it was checked
        out.abort()
        raise HunkError(index, exc.line, exc.message) from None
    except BaseException:
        out.abort()
        raise
    return out.finish()


def _mismatch(index: int, pos: int, payload: bytes, got: bytes, base: _Base) -> HunkError:
    """The HunkError at the first line of `payload` that the base does not hold."""
    want = split_lines(payload)
    have = split_lines(got)
    for k, line in enumerate(want):
        if k >= len(have):
            return HunkError(index, pos + k + 1, "the file ends before the hunk does")
        found = have[k]
        if k == len(have) - 1 and not found.endswith(b"\n"):
            found += base.rest_of_line()
        if found != line:
            return HunkError(index, pos + k + 1, f"expected {show_line(line)}, found {show_line(found)}")
    return HunkError(index, pos + len(want), f"expected {show_line(want[-1] if want else b'')}, found {show_line(have[-1] + base.rest_of_line() if have else b'')}")


def reverse_hunks(hunks: tuple[Hunk, ...]) -> tuple[Hunk, ...]:
    """The hunks that undo `hunks` (used to test whether a change is present)."""
    swap = {" ": " ", "-": "+", "+": "-"}
    return tuple(
        Hunk(h.new_start, h.new_len, h.old_start, h.old_len, tuple(HunkLine(swap[ln.kind], ln.text) for ln in h.lines))
        for h in hunks
    )


# --- placement for foreign hunks (import only): nearest exact match, fuzz only when asked ------------
@dataclass(frozen=True)
class Placed:
    """Where one foreign hunk applies. Lines are 0-based indexes into the base."""

    index: int
    named: int  # where its header puts its first old line
    start: int  # where its first old line (before any fuzz cut) really is
    at: int  # where the hunk as applied starts (`start` plus the context lines fuzz cut)
    fuzz: int
    hunk: Hunk  # the hunk as applied (fuzz trims context lines; anchors are resolved)


class PlaceError(Exception):
    """A foreign hunk fits nowhere with the fuzz allowed; `would` is (1-based line, fuzz) it would need, if any."""

    def __init__(self, index: int, named: int, would: tuple[int, int] | None) -> None:
        super().__init__(f"hunk #{index + 1} (header line {named + 1}) matches nowhere")
        self.index = index
        self.named = named
        self.would = would


def _trim(h: Hunk, f: int) -> tuple[Hunk, int]:
    """GNU patch's fuzz: drop up to `f` context lines at each end; returns the hunk and lines cut at the top."""
    lines = list(h.lines)
    top = 0
    while top < f and lines and lines[0].kind == " ":
        lines.pop(0)
        top += 1
    bottom = 0
    while bottom < f and lines and lines[-1].kind == " ":
        lines.pop()
        bottom += 1
    old = sum(1 for ln in lines if ln.kind != "+")
    new = sum(1 for ln in lines if ln.kind != "-")
    return Hunk(h.old_start + top, old, h.new_start + top, new, tuple(lines)), top


def nearest_match(src: list[bytes], want: list[bytes], expected: int, lo: int, *, earlier_on_tie: bool = False) -> int | None:
    """The start nearest to `expected` (not before `lo`) where the lines `want` (not empty) match exactly.
    On a tie the later start, as `patch` looks below first (import), or the earlier one when asked (audit)."""
    hi = len(src) - len(want)
    if hi < lo:
        return None
    expected = min(max(expected, lo), hi)
    first = want[0]
    for d in range(0, max(expected - lo, hi - expected) + 1):
        for at in ((expected - d, expected + d) if earlier_on_tie else (expected + d, expected - d)) if d else (expected,):
            if lo <= at <= hi and src[at] == first and src[at : at + len(want)] == want:
                return at
    return None


def place_hunks(src: list[bytes], hunks: tuple[Hunk, ...] | list[Hunk], *, fuzz: int = 0) -> list[Placed]:
    """Place foreign hunks as `patch`/`git apply` do: at the named line, else the nearest exact match
    (an offset found carries to the next hunk), else, only up to `fuzz`, with context lines dropped."""
    placed: list[Placed] = []
    lo = 0
    carry = 0
    # anchored hunks go where they say, wherever they stand in the patch: prepends first, appends last
    rank = {"prepend": 0, None: 1, "append": 2}
    for i, h in sorted(enumerate(hunks), key=lambda ih: rank[ih[1].anchor]):
        if h.anchor is not None:
            at = len(src) if h.anchor == "append" else 0
            placed.append(Placed(i, at, at, at, 0, Hunk(at, 0, at, h.new_len, h.lines)))
            lo = at
            continue
        named = h.old_start if h.old_len == 0 else h.old_start - 1
        found: tuple[int, int, int, Hunk] | None = None
        for f in range(0, max(fuzz, 2) + 1):
            cut, top = _trim(h, f) if f else (h, 0)
            if f and cut == h:
                continue
            if cut.old_lines:
                spot = nearest_match(src, cut.old_lines, named + carry + top, lo)
            else:
                spot = named + carry if lo <= named + carry <= len(src) else None
            if spot is not None:
                found = (spot, top, f, cut)
                break
        if found is None or found[2] > fuzz:
            raise PlaceError(i, named, (found[0] - found[1] + 1, found[2]) if found else None)
        at, top, f, cut = found
        carry = at - top - named
        placed.append(Placed(i, named, at - top, at, f, cut))
        lo = at + len(cut.old_lines)
    return placed


def apply_placed(src: list[bytes], placed: list[Placed]) -> bytes:
    """The bytes after applying placed hunks (positions already checked by place_hunks)."""
    out: list[bytes] = []
    pos = 0
    for p in placed:
        out.extend(src[pos : p.at])
        out.extend(p.hunk.new_lines)
        pos = p.at + len(p.hunk.old_lines)
    out.extend(src[pos:])
    return b"".join(out)


def renumbered(placed: list[Placed]) -> tuple[Hunk, ...]:
    """The hunks with headers naming the lines they really apply at (text unchanged)."""
    out: list[Hunk] = []
    delta = 0
    for p in placed:
        h = p.hunk
        pos, npos = p.at, p.at + delta
        out.append(Hunk(pos if h.old_len == 0 else pos + 1, h.old_len, npos if h.new_len == 0 else npos + 1, h.new_len, h.lines))
        delta += h.new_len - h.old_len
    return tuple(out)


MAX_LINK_TARGET = 4095  # PATH_MAX less its NUL: the longest target symlink(2) takes


def link_target_problem(target: bytes) -> str | None:
    """Why `target` cannot be a symlink's target (None: it can)."""
    if not target:
        return "the symlink's target it leaves is empty"
    if b"\0" in target:
        return "the symlink's target it leaves holds a NUL byte"
    if len(target) > MAX_LINK_TARGET:
        return f"the symlink's target it leaves is {len(target)} bytes, longer than {MAX_LINK_TARGET}"
    return None
