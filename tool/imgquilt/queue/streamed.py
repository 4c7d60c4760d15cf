"""Patch files too large to hold in memory, read as they stream (a 1 GiB new file is a 1 GiB patch).

A patch file larger than `spool_at()` is never read whole. One pass over it finds its sections
(each starts at an `Index:` line, as in `parse_patch`). A section of at most `spool_at()` bytes is
read and parsed in memory as any other; a larger one is checked as it streams, with the same rules
and the same messages as the in-memory reader (hunkread, binarypatch), and kept by reference:
- a text section's hunks are a `StreamedHunks`, a range of the patch file that `hunk_events`
  reads again, in bounded pieces, when the engine applies it (as a list of Hunk values it is only
  read when something asks, and within `in_memory_max()`);
- a binary section's blocks are decoded (base85, then inflated) into a spooled file as they are
  read, their sizes checked as in binarypatch.

`hunk_events` gives the engine one stream of events for either kind of hunks: ("@", index,
old_start, old_len, new_start, new_len) at each hunk, then (kind, payload, lines) runs: the exact
bytes of consecutive lines of one kind (" ", "-", "+"), their prefix removed and a `\\ No newline`
marker applied, and how many lines end in the payload (0 for a piece of a line longer than a read).
"""
from __future__ import annotations

import re
import zlib
from typing import Iterator, Sequence

from ..errors import MalformedPatch
from ..fs.content import CHUNK, Spooled, SpoolWriter, in_memory_max, pread_of, spool_at
from .hunks import Hunk, HunkLine, show_line, split_lines

BUF = 1 << 20
HEAD_CAP = 1 << 20  # a section's lines before its diff (Index, hashes, fields): small, always
_HUNK_HEADER = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_ANCHOR = re.compile(rb"^@@+[ \t]*(append|prepend)\b[^\n]*?@@+[ \t]*\r?\n?$", re.I)
_NO_NEWLINE_MARKER = re.compile(rb"^\\ No newline at end of file")
_RUNS = {c: re.compile(re.escape(c) + rb"[^\n]*\n(?:" + re.escape(c) + rb"[^\n]*\n)*") for c in (b"+", b"-", b" ")}
_STRAY = (b"@@", b"+++ ", b"--- ", b"*** ", b"diff ")

Event = tuple


def is_trailer_start(line: bytes) -> bool:
    """A line that ends the diff text after a complete hunk, as `git apply` and GNU patch read it: a mail
    signature's `-- ` or a `---` line (topgit's `tg:` trailer and `git format-patch` notes follow one)."""
    return line.rstrip(b"\r\n") in (b"-- ", b"---")


class StreamError(ValueError):
    """What the in-memory readers would raise: `line` is 1-based within the section's diff."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


# --- reading lines of a range of a file, in bounded pieces ----------------------------------------
class Lines:
    """Lines of `content[start:end]`, read a chunk at a time: whole lines (up to BUF bytes each), runs
    of lines of one kind in bulk, and lines longer than BUF in pieces."""

    def __init__(self, content: Spooled | bytes, start: int = 0, end: int | None = None) -> None:
        self._c = content
        self._pos = start  # of the next read
        self._end = len(content) if end is None else end
        self._buf = b""
        self._at = 0
        self.offset = start  # of the next unread byte
        self.lineno = 0  # lines consumed

    def _fill(self, want: int = BUF) -> bool:
        """Read more (up to `want` bytes buffered); False at the end of the range."""
        if self._pos >= self._end:
            return False
        n = min(max(want - (len(self._buf) - self._at), CHUNK), self._end - self._pos)
        more = pread_of(self._c, n, self._pos)
        if not more:
            self._pos = self._end
            return False
        self._buf = self._buf[self._at :] + more
        self._at = 0
        self._pos += len(more)
        return True

    def _line_end(self) -> int:
        """Index just past the next line's b"\\n" in the buffer (refilled up to BUF), or -1 when the
        line is longer than BUF; at the end of the range, the end of the buffer."""
        while True:
            nl = self._buf.find(b"\n", self._at)
            if nl >= 0:
                return nl + 1
            if len(self._buf) - self._at >= BUF:
                return -1
            if not self._fill(BUF + 1):
                return len(self._buf)

    def at_end(self) -> bool:
        return self._at >= len(self._buf) and not self._fill()

    def peek(self, n: int = 1) -> bytes:
        """The next `n` bytes (fewer at the end), not consumed."""
        while len(self._buf) - self._at < n and self._fill(n):
            pass
        return self._buf[self._at : self._at + n]

    def peek_line(self) -> bytes | None:
        """The next line whole (None at the end); a line longer than BUF is cut at BUF bytes."""
        if self.at_end():
            return None
        end = self._line_end()
        if end < 0:
            return self._buf[self._at : self._at + BUF]
        return self._buf[self._at : end]

    def next_line(self) -> bytes | None:
        """The next line (a line longer than BUF: its first BUF bytes; `skip_rest_of_line` drops the rest)."""
        line = self.peek_line()
        if line is not None:
            self._consume(len(line))
            if line.endswith(b"\n") or self.at_end():
                self.lineno += 1
        return line

    def skip_line(self) -> None:
        """Consume the next line whole, however long."""
        line = self.next_line()
        if line is not None and not line.endswith(b"\n") and len(line) >= BUF:
            self.skip_rest_of_line()

    def skip_rest_of_line(self) -> None:
        while not self.at_end():
            end = self._line_end()
            if end >= 0:
                self._consume(end - self._at)
                self.lineno += 1
                return
            self._consume(len(self._buf) - self._at)

    def _consume(self, n: int) -> None:
        self._at += n
        self.offset += n

    def run(self, kind: bytes, limit: int) -> tuple[bytes, int]:
        """Up to `limit` whole lines starting with `kind` (bytes as in the file, and their count); (b"", 0)
        when the next line is not one, or is longer than BUF."""
        return self.bulk(_RUNS[kind], limit) if limit > 0 else (b"", 0)

    def bulk(self, pattern: re.Pattern[bytes], limit: int = 1 << 62) -> tuple[bytes, int]:
        """The whole lines `pattern` matches at the next line, as many as the buffer holds (up to
        `limit`): their bytes and count, consumed; (b"", 0) when it does not match or the next line is
        longer than BUF."""
        if self._line_end() < 0:
            return b"", 0
        m = pattern.match(self._buf, self._at)
        if m is None:
            return b"", 0
        text = m.group()
        n = text.count(b"\n")
        if n > limit:
            text = _first_lines(text, limit)
            n = limit
        self._consume(len(text))
        self.lineno += n
        return text, n

    def piece(self) -> tuple[bytes, bool]:
        """The next piece of a line longer than BUF: (bytes, ends the line)."""
        end = self._line_end()
        if end >= 0:
            text = self._buf[self._at : end]
            self._consume(len(text))
            self.lineno += 1
            return text, True
        text = self._buf[self._at : self._at + BUF]
        self._consume(len(text))
        return text, self.at_end()


def _first_lines(text: bytes, n: int) -> bytes:
    at = -1
    total = text.count(b"\n")
    if n <= total - n:
        for _ in range(n):
            at = text.find(b"\n", at + 1)
        return text[: at + 1]
    at = len(text)
    for _ in range(total - n):
        at = text.rfind(b"\n", 0, at - 1) + 1
    return text[:at]


def _strip(kind: bytes, text: bytes) -> bytes:
    """Whole lines all starting with `kind`, without it."""
    return text[1:].replace(b"\n" + kind, b"\n")


# --- the hunks of a streamed text section ----------------------------------------------------------
class StreamedHunks:
    """The hunks of a section too large to parse into values: `source[start:end]` holds them (from the
    first `@@` line), `count` of them, checked when the patch was read. Used as a sequence it is read
    into Hunk values (within in_memory_max(); TooLargeToHold beyond), so code that is not streaming-aware
    still gets the exact hunks or a clear error, never a wrong answer."""

    __slots__ = ("source", "start", "end", "n", "first_line")

    def __init__(self, source: Spooled, start: int, end: int, n: int, first_line: int) -> None:
        self.source = source
        self.start = start
        self.end = end
        self.n = n  # hunks, counted when the patch was read
        self.first_line = first_line  # line number (1-based, in the section's diff from `---`) of the first `@@`

    def _values(self) -> tuple[Hunk, ...]:
        data = self.source.slice(self.start, self.end - self.start).to_bytes("a patch section's hunks")
        rd = Lines(data)
        rd.lineno = self.first_line - 1
        return hunk_values(scan_hunks(rd))

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def __getitem__(self, i):
        return self._values()[i]

    def __iter__(self) -> Iterator[Hunk]:
        return iter(self._values())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StreamedHunks):
            return (self.source, self.start, self.end) == (other.source, other.start, other.end)
        if isinstance(other, tuple):
            return self._values() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.source, self.start, self.end))

    def __repr__(self) -> str:
        return f"StreamedHunks(hunks={self.n}, bytes={self.end - self.start})"


def hunk_events(hunks: Sequence[Hunk]) -> Iterator[Event]:
    """The events of `hunks` (values or a StreamedHunks): see the module's docstring."""
    if isinstance(hunks, StreamedHunks):
        rd = Lines(hunks.source, hunks.start, hunks.end)
        rd.lineno = hunks.first_line - 1
        yield from scan_hunks(rd)
        return
    for i, h in enumerate(hunks):
        yield ("@", i, h.old_start, h.old_len, h.new_start, h.new_len)
        kind, texts = None, []  # type: str | None, list[bytes]
        for ln in h.lines:
            if ln.kind != kind and texts:
                yield (kind, b"".join(texts), len(texts))
                texts = []
            kind = ln.kind
            texts.append(ln.text)
        if texts:
            yield (kind, b"".join(texts), len(texts))


def hunk_values(events: Iterator[Event]) -> tuple[Hunk, ...]:
    """The Hunk values of a section's hunk events (a section held in memory is read by the same scanner
    as one that streams; the pieces of a line longer than a read are joined again)."""
    out: list[Hunk] = []
    head: tuple | None = None
    body: list[HunkLine] = []
    carry = b""
    for ev in events:
        if ev[0] == "@":
            if head is not None:
                out.append(Hunk(head[0], head[1], head[2], head[3], tuple(body), anchor=head[4] if len(head) > 4 else None))
            head, body = ev[2:], []
            continue
        kind, payload, lines = ev
        if not lines:
            carry += payload
            continue
        if carry:
            payload, carry = carry + payload, b""
        if lines == 1:
            body.append(HunkLine(kind, payload))
        else:
            texts = split_lines(payload)
            if len(texts) < lines:  # the last line was only its newline, and a marker took it: an empty line
                texts.append(b"")
            body.extend([HunkLine(kind, t) for t in texts])
    if head is not None:
        out.append(Hunk(head[0], head[1], head[2], head[3], tuple(body), anchor=head[4] if len(head) > 4 else None))
    return tuple(out)


def scan_hunks(rd: Lines, *, anchors: bool = False) -> Iterator[Event]:
    """Read hunks from `rd` (at an `@@` line), yielding events; stops at the first line after a hunk that
    is not an `@@` header (its lines are the caller's). Each hunk is exactly as long as its @@ header
    says: a short one is truncated, a longer one (a hand edit that grew) is refused rather than cut; a
    bare empty line is a context line whose leading space a mailer stripped.

    `anchors` (import's hand-written dialect): an `@@ append ... @@` / `@@ prepend ... @@` hunk is its
    `+` lines, to go at the end / start of the file; its head event carries the anchor as a 7th field.
    Without it (the patch format) such a hunk is refused.

    Refusals come in the order unidiff framed by @@ headers gave them (the reader before this one):
    a hunk's frame (its header, its line counts) at once; what it holds (a marker after no line, an
    unknown `\\` line before a hunk) once every hunk is framed; an anchored hunk last."""
    index = 0
    last_ended_by_marker = True
    content: list[StreamError] = []  # the first problem of what the hunks hold, raised once all are framed
    anchor: list[StreamError] = []
    while True:
        line = rd.peek_line()
        if line is None or not line.startswith(b"@@"):
            break
        head_line = rd.lineno + 1
        which = _ANCHOR.match(line)
        if which:
            rd.skip_line()
            lines = _anchored_body(rd)
            if not anchors:
                anchor.append(StreamError(head_line, "`@@ append/prepend @@` hunks are not unified diff; bring the patch in with `imgquilt import`."))
                continue
            yield ("@", index, 0, 0, 0, len(lines), which.group(1).decode().lower())
            index += 1
            for text in lines:
                yield ("+", text, 1)
            continue
        m = _HUNK_HEADER.match(line)
        if not m:
            raise StreamError(head_line, f"cannot read hunk header {show_line(line.rstrip())}.")
        if not last_ended_by_marker:
            # unidiff reads an unknown `\` line after a hunk as the end of the file's diff
            content.append(StreamError(head_line, f"cannot read the hunks: Unexpected hunk found: {line.decode('latin-1')}."))
        rd.next_line()
        old_len = 1 if m.group(2) is None else int(m.group(2))
        new_len = 1 if m.group(4) is None else int(m.group(4))
        yield ("@", index, int(m.group(1)), old_len, int(m.group(3)), new_len)
        index += 1
        last_ended_by_marker = yield from _hunk_body(rd, head_line, old_len, new_len, content)
    if content or anchor:
        raise (content or anchor)[0]


def _anchored_body(rd: Lines) -> list[bytes]:
    """An anchored hunk's `+` lines (their prefix dropped), a `\\ No newline` marker applied to the line
    before it (after none: refused at once)."""
    lines: list[bytes] = []
    while (line := rd.peek_line()) is not None and line[:1] in (b"+", b"\\"):
        rd.skip_line()
        if line[:1] == b"+":
            lines.append(line[1:])
        elif not lines or not lines[-1].endswith(b"\n"):
            raise StreamError(rd.lineno, "a `\\ No newline at end of file` marker follows no line.")
        else:
            lines[-1] = lines[-1][:-1]
    return lines


def _hunk_body(rd: Lines, head_line: int, old_len: int, new_len: int, content: list[StreamError]):
    """One hunk's lines as events; returns False when an unknown `\\` line follows it (see above)."""
    old_left, new_left = old_len, new_len
    pending: list | None = None  # [kind, payload, lines]: held until the next line says it keeps its newline
    while old_left or new_left:
        c = rd.peek(1)
        if not c:
            raise StreamError(head_line, "the hunk ends before its @@ header says (truncated patch?).")
        if c == b"\\":
            rd.skip_line()
            pending = _marker(pending, head_line, content)
            continue
        if c in (b"+", b"-", b" "):
            limit = new_left if c == b"+" else old_left if c == b"-" else min(old_left, new_left)
            if limit <= 0:
                raise StreamError(rd.lineno + 1, f"the hunk at line {head_line} has more lines than its @@ header says.")
            text, n = rd.run(c, limit)
            if not n:  # a line longer than a read, or the patch's last line without a newline: in pieces
                if pending is not None:
                    yield tuple(pending)
                    pending = None
                first = True
                while True:
                    piece, ended = rd.piece()
                    if first:
                        piece, first = piece[1:], False
                    if ended:
                        break
                    yield (c.decode(), piece, 0)
                text, n = piece, 1
            else:
                text = _strip(c, text)
            if pending is not None:
                yield tuple(pending)
            pending = [c.decode(), text, n]
            if c != b"+":
                old_left -= n
            if c != b"-":
                new_left -= n
            continue
        line = rd.peek_line() or b""
        if line in (b"\n", b"\r\n"):  # a context line whose leading space a mailer stripped
            if old_left <= 0 or new_left <= 0:
                raise StreamError(rd.lineno + 1, f"the hunk at line {head_line} has more lines than its @@ header says.")
            rd.next_line()
            if pending is not None:
                yield tuple(pending)
            pending = [" ", line, 1]
            old_left -= 1
            new_left -= 1
            continue
        raise StreamError(rd.lineno + 1, f"the hunk at line {head_line} ends early, at {show_line(line[:4096], 60)}.")
    ended_ok = True
    nxt = rd.peek_line()
    if nxt is not None and nxt.startswith(b"\\"):
        rd.skip_line()
        if _NO_NEWLINE_MARKER.match(nxt):
            pending = _marker(pending, head_line, content)
        else:
            ended_ok = False
        nxt = rd.peek_line()
    if pending is not None:
        yield tuple(pending)
    if nxt is not None and nxt[:1] in (b"+", b"-") and not _is_file_start(rd, nxt) and not is_trailer_start(nxt):
        raise StreamError(rd.lineno + 1, f"the hunk at line {head_line} has more lines than its @@ header says.")
    return ended_ok


def _marker(pending: list | None, head_line: int, content: list[StreamError]) -> list | None:
    """`\\ No newline at end of file`: the line before it loses its b"\\n" (hunkread._no_newline); after no
    such line, a problem of what the hunk holds (raised once every hunk is framed)."""
    if pending is None or not pending[1].endswith(b"\n"):
        content.append(StreamError(head_line, "a `\\ No newline at end of file` marker follows no line."))
        return pending
    return [pending[0], pending[1][:-1], pending[2]]


def _is_file_start(rd: Lines, line: bytes) -> bool:
    if line.startswith(b"diff --git "):
        return True
    if not line.startswith(b"--- "):
        return False
    # the line after it, without consuming either: peek far enough
    first = rd.peek_line() or b""
    after = rd.peek(len(first) + 4)[len(first):]
    return after.startswith(b"+++ ")


def check_trailer(rd: Lines) -> tuple[int, bytes | None]:
    """After the hunks: (how many more `---`/`+++` file diffs, the first stray diff line) in the rest."""
    extra = 0
    stray = None
    prev_minus = False
    while True:
        line = rd.next_line()
        if line is None:
            break
        if len(line) >= BUF and not line.endswith(b"\n"):
            rd.skip_rest_of_line()
        if prev_minus and line.startswith(b"+++ "):
            extra += 1
        if line.startswith(b"diff --git "):
            pass
        if stray is None and line.startswith(_STRAY):
            stray = line
        prev_minus = line.startswith(b"--- ")
    return extra, stray


# --- binary blocks, decoded as they stream -------------------------------------------------------
_B85 = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
_B85_TABLE = bytearray(b"\xff" * 256)
for _i, _c in enumerate(_B85):
    _B85_TABLE[_c] = _i
_B85_TABLE = bytes(_B85_TABLE)  # type: ignore[assignment]
_FULL_LINES = re.compile(rb"(?:z[0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]{65}\n)+")


def b85decode(text: bytes) -> bytes:
    """base85 (git's alphabet) of whole 5-character groups, decoded without a Python loop per group:
    the groups are lanes of one big integer, so each of the 5 digit positions costs one bulk
    multiply-add (about 10x base64.b85decode). ValueError on a character outside the alphabet or a
    group over 2**32 - 1, as b85decode."""
    n = len(text) // 5
    if n * 5 != len(text):
        raise ValueError("base85 text is not whole groups")
    if not n:
        return b""
    digits = text.translate(_B85_TABLE)
    if b"\xff" in digits:
        raise ValueError("bad base85 character")
    lanes = bytearray(5 * n)
    acc = 0
    for k in range(5):
        lanes[4::5] = digits[k::5]
        acc = acc * 85 + int.from_bytes(lanes, "big")
    out = acc.to_bytes(5 * n, "big")
    if out[0::5].count(0) != n:
        raise ValueError("base85 overflow")
    res = bytearray(4 * n)
    for k in range(4):
        res[k::4] = out[k + 1 :: 5]
    return bytes(res)


_BLOCK = re.compile(rb"^(literal|delta) (\d{1,20})\r?\n?$")


def read_binary_block(rd: Lines, cap: int):
    """One `literal N`/`delta N` block from `rd` (at its first line), decoded into a spooled content as
    binarypatch._read_block does it in memory: the same checks, the same messages. Returns
    (kind, content) or raises StreamError (line numbers as binarypatch's)."""
    from .binarypatch import INFLATE_CHUNK

    line = rd.next_line()
    if line is None:
        raise StreamError(rd.lineno, "the binary patch ends before its `literal N` or `delta N` line.")
    m = _BLOCK.match(line)
    if not m:
        raise StreamError(rd.lineno, f"expected `literal N` or `delta N`, found {show_line(line[:200], 40)}.")
    head = rd.lineno
    size = int(m.group(2))
    if size > cap:
        raise StreamError(head, f"the binary block says {size} bytes; imgquilt reads blocks of at most {cap} bytes.")
    inflater = zlib.decompressobj()
    out = SpoolWriter()
    total = 0

    def feed(raw: bytes) -> None:
        nonlocal total
        pending = raw
        while pending:
            try:
                piece = inflater.decompress(pending, INFLATE_CHUNK)
            except zlib.error as exc:
                raise StreamError(head, f"the binary data does not inflate ({exc}).") from None
            total += len(piece)
            if total > size:
                raise StreamError(head, f"the binary block says {size} bytes, its data holds more.")
            out.write(piece)
            pending = inflater.unconsumed_tail
            if inflater.eof:
                break

    try:
        while True:
            line = rd.peek_line()
            if line is None or not line.strip(b"\r\n"):
                if line is not None:
                    rd.next_line()  # the empty line that ends the block
                break
            if line[:1] == b"z" and len(line) == 67:
                run, n = rd.bulk(_FULL_LINES)  # full 52-byte lines in bulk, as many as the buffer holds
                if n:
                    body = run[1:-1].replace(b"\nz", b"")
                    try:
                        feed(b85decode(body))
                    except ValueError:
                        raise StreamError(rd.lineno, "a base85 line of the binary patch holds a character outside git's alphabet.") from None
                    continue
            rd.next_line()
            ln = line.rstrip(b"\r\n")
            c = ln[0]
            k = c - 64 if 65 <= c <= 90 else c - 96 + 26 if 97 <= c <= 122 else -1
            body = ln[1:]
            if k < 0 or len(body) % 5 or len(body) // 5 * 4 < k:
                raise StreamError(rd.lineno, "a base85 line of the binary patch is malformed.")
            try:
                feed(b85decode(body)[:k])
            except ValueError:
                raise StreamError(rd.lineno, "a base85 line of the binary patch holds a character outside git's alphabet.") from None
        # as binarypatch._inflate: whatever the inflater still holds
        try:
            while not inflater.eof:
                piece = inflater.decompress(b"", INFLATE_CHUNK)
                if not piece:
                    break
                total += len(piece)
                if total > size:
                    raise StreamError(head, f"the binary block says {size} bytes, its data holds more.")
                out.write(piece)
        except zlib.error as exc:
            raise StreamError(head, f"the binary data does not inflate ({exc}).") from None
        if not inflater.eof:
            raise StreamError(head, "the binary data does not inflate (its zlib stream is cut short).")
        if total != size:
            raise StreamError(head, f"the binary block says {size} bytes, its data holds {total}.")
    except BaseException:
        out.abort()
        raise
    return m.group(1).decode(), out.finish()


def malformed(name: str, msg: str) -> MalformedPatch:
    return MalformedPatch(
        f"Malformed patch {name}: {msg}",
        hint="Fix the patch file, or bring it in with `imgquilt import`, which writes the imgquilt format.",
    )


def should_stream(size: int) -> bool:
    """Is a patch file (or section) of `size` bytes read as it streams?"""
    return size > spool_at()


__all__ = ["Lines", "StreamedHunks", "StreamError", "b85decode", "check_trailer", "hunk_events", "hunk_values", "in_memory_max",
           "malformed", "read_binary_block", "scan_hunks", "should_stream"]
