"""`GIT binary patch` sections (`git diff --binary`): read, write and apply, byte-exact.

A block is `literal N` (the whole new file) or `delta N` (git's copy/insert delta against the old
file), N the inflated size, then zlib data in git's base85 lines (first character: the line's
byte count, A-Z = 1-26, a-z = 27-52), ended by an empty line. A second block is the reverse.
imgquilt writes literals (both ways) with a full `index` line, which `git apply` needs.

Every size a block declares is checked before the work it implies (docs/patch-format.md, "Caps"):
a `literal`/`delta` size, and a delta's source and target sizes, at most BINARY_CAP; inflating
stops a chunk (1 MiB) past the declared size; a varint is at most 10 bytes; a copy or insert must lie
inside the delta, the base and the declared target size. So decoding a block never holds more
than its declared size (plus the patch text) in memory, whatever its bytes claim.
"""
from __future__ import annotations

import base64
import hashlib
import io
import re
import zlib
from dataclasses import dataclass

from ..fs.content import Data, SpoolWriter, chunks_of, head_of, is_spooled, pread_of
from .hunks import show_line
from .pathquote import quote_name

_BLOCK = re.compile(rb"^(literal|delta) (\d{1,20})\r?\n?$")
BINARY_CAP = 1 << 30  # the largest file (or delta) a block may declare: a work-tree file's cap
MAX_VARINT_BYTES = 10  # 64 bits in 7-bit groups: git's delta sizes
INFLATE_CHUNK = 1 << 20


class BinaryPatchError(ValueError):
    """A binary block that cannot be read or applied; `line` is 1-based (0: not tied to a line)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


class DeltaBaseMismatch(BinaryPatchError):
    """A well-formed delta made for another file (its source size is not the base's): drift, not bad input."""


@dataclass(frozen=True)
class BinaryBlock:
    kind: str  # "literal" or "delta"
    data: Data  # inflated: the new file, or the delta (a Spooled when read from a large patch as it streams)


@dataclass(frozen=True)
class BinaryPatch:
    """The forward block (and the reverse one, if written)."""

    forward: BinaryBlock
    reverse: BinaryBlock | None = None


def is_binary(data: Data | None) -> bool:
    """git's test: a NUL byte in the first 8000 bytes."""
    if data is None:
        return False
    return b"\0" in head_of(data, 8000)


def git_blob_sha1(data: Data | None) -> str:
    """The git blob id of `data` (40 zeros: absent)."""
    if data is None:
        return "0" * 40
    h = hashlib.sha1(b"blob %d\0" % len(data))
    for chunk in chunks_of(data):
        h.update(chunk)
    return h.hexdigest()


def git_file_mode(bits: int | None) -> str:
    """git's mode for a regular file of permission bits `bits`: 100755 when an execute bit is set, else
    (and when not known) 100644. git records no other bits (`Mode:` carries them)."""
    return "100755" if bits is not None and bits & 0o111 else "100644"


def git_mode_lines(old: Data | None, new: Data | None, mode: int | None = None, deleted_mode: int | None = None,
                   mode_change: tuple[int, int] | None = None, kind: str | None = None) -> bytes:
    """git's extended header lines on a file's mode, after its `diff --git` line: `new file mode` (the
    new file's `mode`), `deleted file mode` (`deleted_mode`, the mode of the file deleted) or `old
    mode`/`new mode`; `kind` (120000, a symlink) stands for the mode of a created or deleted file."""
    if old is None:
        return f"new file mode {kind or git_file_mode(mode)}\n".encode()
    if new is None:
        return f"deleted file mode {kind or git_file_mode(deleted_mode)}\n".encode()
    if mode_change is not None:
        return f"old mode 100{mode_change[0]:03o}\nnew mode 100{mode_change[1]:03o}\n".encode()
    return b""


def _line_length(c: int) -> int:
    if 65 <= c <= 90:
        return c - 64
    if 97 <= c <= 122:
        return c - 96 + 26
    return -1


def _read_block(lines: list[bytes], i: int) -> tuple[BinaryBlock, int]:
    if i >= len(lines):
        raise BinaryPatchError(i, "the binary patch ends before its `literal N` or `delta N` line.")
    m = _BLOCK.match(lines[i])
    if not m:
        raise BinaryPatchError(i + 1, f"expected `literal N` or `delta N`, found {show_line(lines[i], 40)}.")
    head = i + 1
    size = int(m.group(2))
    if size > BINARY_CAP:
        raise BinaryPatchError(head, f"the binary block says {size} bytes; imgquilt reads blocks of at most "
                                     f"{BINARY_CAP} bytes.")
    i += 1
    raw = bytearray()
    while i < len(lines) and lines[i].strip(b"\r\n"):
        ln = lines[i].rstrip(b"\r\n")
        n = _line_length(ln[0])
        body = ln[1:]
        if n < 0 or len(body) % 5 or len(body) // 5 * 4 < n:
            raise BinaryPatchError(i + 1, "a base85 line of the binary patch is malformed.")
        try:
            raw += base64.b85decode(body)[:n]
        except ValueError:
            raise BinaryPatchError(i + 1, "a base85 line of the binary patch holds a character outside git's alphabet.") from None
        i += 1
    if i < len(lines):
        i += 1  # the empty line that ends the block
    return BinaryBlock(m.group(1).decode(), _inflate(bytes(raw), size, head)), i


def _inflate(raw: bytes, size: int, head: int) -> bytes:
    """The block's data, inflated a chunk at a time and no further than one chunk past its declared
    size (a bomb stops there); held once (BytesIO hands over its buffer), never twice."""
    inflater = zlib.decompressobj()
    out = io.BytesIO()
    pending, total = raw, 0
    while True:
        try:
            piece = inflater.decompress(pending, INFLATE_CHUNK)
        except zlib.error as exc:
            raise BinaryPatchError(head, f"the binary data does not inflate ({exc}).") from None
        total += out.write(piece)
        if total > size:
            raise BinaryPatchError(head, f"the binary block says {size} bytes, its data holds more.")
        pending = inflater.unconsumed_tail
        if inflater.eof or (not pending and len(piece) < INFLATE_CHUNK):
            break
    if not inflater.eof:
        raise BinaryPatchError(head, "the binary data does not inflate (its zlib stream is cut short).")
    if total != size:
        raise BinaryPatchError(head, f"the binary block says {size} bytes, its data holds {total}.")
    return out.getvalue()


def read_binary(lines: list[bytes], i: int) -> tuple[BinaryPatch, int]:
    """Read the blocks after a `GIT binary patch` line (`lines[i]` is the first `literal`/`delta`)."""
    forward, i = _read_block(lines, i)
    reverse = None
    if i < len(lines) and _BLOCK.match(lines[i]):
        reverse, i = _read_block(lines, i)
    return BinaryPatch(forward, reverse), i


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for k in range(MAX_VARINT_BYTES):
        if pos >= len(data):
            raise BinaryPatchError(0, "the binary delta ends inside its header.")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * k)
        if not b & 0x80:
            return value, pos
    raise BinaryPatchError(0, f"a size in the binary delta's header runs past {MAX_VARINT_BYTES} bytes.")


def apply_delta(base: bytes, delta: bytes) -> bytes:
    """git's delta: source size, target size, then copy (from base) and insert instructions.

    Each instruction is checked against the delta, the base and the declared target size before it
    is carried out: the result never grows past what the header declares (at most BINARY_CAP)."""
    src_size, pos = _varint(delta, 0)
    dst_size, pos = _varint(delta, pos)
    if src_size != len(base):
        raise DeltaBaseMismatch(0, f"the binary delta was made for {src_size} bytes, the file has {len(base)}.")
    if dst_size > BINARY_CAP:
        raise BinaryPatchError(0, f"the binary delta says its result is {dst_size} bytes; imgquilt makes files "
                                  f"of at most {BINARY_CAP} bytes from a binary patch.")
    out = io.BytesIO()  # getvalue() hands over its buffer: the result is never held twice
    written, end = 0, len(delta)
    while pos < end:
        op = delta[pos]
        pos += 1
        if op & 0x80:
            fields = bin(op & 0x7F).count("1")
            if pos + fields > end:
                raise BinaryPatchError(0, "the binary delta ends inside a copy instruction.")
            offset = size = 0
            for k in range(4):
                if op & (1 << k):
                    offset |= delta[pos] << (8 * k)
                    pos += 1
            for k in range(3):
                if op & (0x10 << k):
                    size |= delta[pos] << (8 * k)
                    pos += 1
            size = size or 0x10000
            if offset + size > len(base):
                raise BinaryPatchError(0, "the binary delta copies past the end of the file.")
            chunk: bytes | memoryview = memoryview(base)[offset : offset + size]
        elif op:
            if pos + op > end:
                raise BinaryPatchError(0, "the binary delta ends inside an insert instruction.")
            chunk, pos = delta[pos : pos + op], pos + op
        else:
            raise BinaryPatchError(0, "the binary delta holds a reserved instruction (0).")
        if written + len(chunk) > dst_size:
            raise BinaryPatchError(0, f"the binary delta gives more than the {dst_size} bytes it says.")
        written += out.write(chunk)
    if written != dst_size:
        raise BinaryPatchError(0, f"the binary delta gives {written} bytes, it says {dst_size}.")
    return out.getvalue()


def apply_binary(base: Data | None, patch: BinaryPatch) -> Data:
    """The new bytes (the base is checked by the caller's hash pin)."""
    block = patch.forward
    if block.kind == "literal":
        return block.data
    if is_spooled(base) or is_spooled(block.data):
        return apply_delta_streaming(base or b"", block.data)
    return apply_delta(base or b"", block.data)


class _DeltaReader:
    """The delta's bytes in order, a chunk at a time."""

    def __init__(self, delta: Data) -> None:
        self._d = delta
        self._buf = b""
        self._at = 0
        self._next = 0
        self.size = len(delta)

    def _want(self, n: int) -> None:
        if len(self._buf) - self._at >= n or self._next >= self.size:
            return
        d = self._d
        more = pread_of(d, max(n, INFLATE_CHUNK), self._next)
        self._next += len(more)
        self._buf = self._buf[self._at :] + more
        self._at = 0

    @property
    def pos(self) -> int:
        return self._next - (len(self._buf) - self._at)

    def byte(self) -> int | None:
        self._want(1)
        if self._at >= len(self._buf):
            return None
        b = self._buf[self._at]
        self._at += 1
        return b

    def take(self, n: int) -> bytes:
        self._want(n)
        out = self._buf[self._at : self._at + n]
        self._at += len(out)
        return out


def _varint_stream(rd: _DeltaReader) -> int:
    value = 0
    for k in range(MAX_VARINT_BYTES):
        b = rd.byte()
        if b is None:
            raise BinaryPatchError(0, "the binary delta ends inside its header.")
        value |= (b & 0x7F) << (7 * k)
        if not b & 0x80:
            return value
    raise BinaryPatchError(0, f"a size in the binary delta's header runs past {MAX_VARINT_BYTES} bytes.")


def apply_delta_streaming(base: Data, delta: Data) -> Data:
    """apply_delta for a large base or delta: the delta read in order, copies read from the base by
    position, the result into a SpoolWriter; every check and message as apply_delta's."""
    rd = _DeltaReader(delta)
    src_size = _varint_stream(rd)
    dst_size = _varint_stream(rd)
    if src_size != len(base):
        raise DeltaBaseMismatch(0, f"the binary delta was made for {src_size} bytes, the file has {len(base)}.")
    if dst_size > BINARY_CAP:
        raise BinaryPatchError(0, f"the binary delta says its result is {dst_size} bytes; imgquilt makes files "
                                  f"of at most {BINARY_CAP} bytes from a binary patch.")
    out = SpoolWriter()
    written = 0
    try:
        while rd.pos < rd.size:
            op = rd.byte()
            assert op is not None
            if op & 0x80:
                fields = bin(op & 0x7F).count("1")
                if rd.pos + fields > rd.size:
                    raise BinaryPatchError(0, "the binary delta ends inside a copy instruction.")
                offset = size = 0
                for k in range(4):
                    if op & (1 << k):
                        offset |= rd.byte() << (8 * k)  # type: ignore[operator]
                for k in range(3):
                    if op & (0x10 << k):
                        size |= rd.byte() << (8 * k)  # type: ignore[operator]
                size = size or 0x10000
                if offset + size > len(base):
                    raise BinaryPatchError(0, "the binary delta copies past the end of the file.")
                if written + size > dst_size:
                    raise BinaryPatchError(0, f"the binary delta gives more than the {dst_size} bytes it says.")
                chunk = pread_of(base, size, offset)
            elif op:
                if rd.pos + op > rd.size:
                    raise BinaryPatchError(0, "the binary delta ends inside an insert instruction.")
                chunk = rd.take(op)
                if written + len(chunk) > dst_size:
                    raise BinaryPatchError(0, f"the binary delta gives more than the {dst_size} bytes it says.")
            else:
                raise BinaryPatchError(0, "the binary delta holds a reserved instruction (0).")
            out.write(chunk)
            written += len(chunk)
        if written != dst_size:
            raise BinaryPatchError(0, f"the binary delta gives {written} bytes, it says {dst_size}.")
    except BaseException:
        out.abort()
        raise
    return out.finish()


def _encode(kind: str, data: bytes) -> bytes:
    packed = zlib.compress(data, 9)
    out = [f"{kind} {len(data)}\n".encode()]
    for k in range(0, len(packed), 52):
        chunk = packed[k : k + 52]
        n = len(chunk)
        out.append(bytes([n + 64 if n <= 26 else n - 26 + 96]) + base64.b85encode(chunk, pad=True) + b"\n")
    out.append(b"\n")
    return b"".join(out)


def render_binary(path: str, old: bytes | None, new: bytes | None, mode: int | None = None,
                  mode_change: tuple[int, int] | None = None, deleted_mode: int | None = None) -> bytes:
    """A `diff --git` file diff with a full index line and literal blocks both ways (as `git apply` wants)."""
    head = [b"diff --git " + quote_name(f"a/{path}") + b" " + quote_name(f"b/{path}") + b"\n"]
    head.append(git_mode_lines(old, new, mode, deleted_mode, mode_change))
    index = f"index {git_blob_sha1(old)}..{git_blob_sha1(new)}"
    head.append((index + ("\n" if old is None or new is None or mode_change is not None else " 100644\n")).encode())
    head.append(b"GIT binary patch\n")
    return b"".join(head) + _encode("literal", new or b"") + _encode("literal", old or b"")
