"""A fast tar header walker: 512-byte headers over a buffered stream, data skipped unless asked for.

Python's tarfile builds a TarInfo per member with many syscalls; a 20 GB layer walks far faster
with one large buffer, headers decoded by slicing, and member data skipped by seeking (seekable
streams) or by dropping whole chunks (decompressed or hashed streams). Understands ustar, GNU
(long names `L`, long links `K`, base-256 numbers, old sparse headers) and PAX (`x` per member,
`g` global). As Go's archive/tar (and so containerd) does, header-only types (links, symlinks,
devices, directories, fifos) carry no data whatever their size field says.
"""
from __future__ import annotations

import re
from typing import Iterator, Protocol

from ...errors import BadImage, UnsafePath
from ...fs.content import Data, pread_of
from ...util.reader import Reader

BLOCK = 512
READ_CHUNK = 1 << 20  # per read of a seekable stream: after a skip, the next header is somewhere near
STREAM_CHUNK = 4 << 20  # per read of a decompressed stream: it hands over one whole chunk, uncopied
META_CAP = 1 << 20  # a PAX record set or GNU long name/link: Go's archive/tar (containerd) refuses larger ones too

REGULAR = "0"
HARDLINK = "1"
SYMLINK = "2"
CHARDEV = "3"
BLOCKDEV = "4"
DIRECTORY = "5"
FIFO = "6"
CONTIGUOUS = "7"
_HEADER_ONLY = frozenset("123456")
_FILE_TYPES = frozenset("07S")  # regular, contiguous, GNU sparse
_KNOWN = frozenset("01234567SD")


class Stream(Protocol):
    def read(self, n: int = -1) -> bytes: ...

    def skip(self, n: int) -> int: ...


class BytesStream(Reader):
    """A content (bytes, or a Spooled read from its file) as the stream TarWalker reads (a TOC's member,
    a layer being written)."""

    def __init__(self, data: Data) -> None:
        self._data = data
        self._at = 0

    def _read_some(self, n: int) -> bytes:
        n = min(n, len(self._data) - self._at)
        if n <= 0:
            return b""
        out = pread_of(self._data, n, self._at)
        self._at += len(out)
        return out

    def _skip_some(self, n: int) -> int:
        n = max(0, min(n, len(self._data) - self._at))
        self._at += n
        return n


class TarEntry:
    """One member: name and link as stored, type, metadata, and where its data is in the stream."""

    __slots__ = ("name", "type", "mode", "uid", "gid", "size", "linkname", "offset", "ordinal", "sparse", "mtime")

    def __init__(self, name: str, type_: str, mode: int, uid: int, gid: int, size: int,
                 linkname: str, offset: int, ordinal: int, sparse: bool, mtime: int = 0) -> None:
        self.name = name
        self.type = type_
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.size = size
        self.linkname = linkname
        self.offset = offset
        self.ordinal = ordinal
        self.sparse = sparse
        self.mtime = mtime  # whole seconds (a PAX mtime's fraction dropped, as int(st_mtime) would)

    @property
    def is_file(self) -> bool:
        return self.type in _FILE_TYPES

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"TarEntry({self.name!r}, type={self.type!r}, size={self.size}, link={self.linkname!r})"


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _cstr(field: bytes) -> bytes:
    end = field.find(b"\0")
    return field if end < 0 else field[:end]


def _mtime(field: bytes) -> int:
    """The mtime field; a blank or unreadable one is 0 (only bytecode checks look at it)."""
    try:
        return _number(field)
    except ValueError:
        return 0


def _pax_mtime(text: str) -> int:
    try:
        return int(float(text))
    except (ValueError, OverflowError):
        return 0


def _number(field: bytes) -> int:
    """A numeric header field: octal (NUL/space padded) or GNU base-256."""
    if field and field[0] & 0x80:
        # GNU base-256: big-endian two's complement, the first byte's top bit a marker
        value = int.from_bytes(field, "big", signed=False)
        value &= (1 << (8 * len(field) - 1)) - 1
        if field[0] & 0x40:  # negative
            value -= 1 << (8 * len(field) - 1)
        return value
    end = field.find(b"\0")
    text = field if end < 0 else field[:end]
    try:
        return int(text, 8) if text.strip() else 0  # int() ignores surrounding spaces
    except ValueError:
        raise ValueError(f"bad octal number {field!r}") from None


def header_checksum_ok(block: bytes) -> bool:
    try:
        stored = _number(block[148:156])
    except ValueError:
        return False
    unsigned = sum(block) - sum(block[148:156]) + 256
    if stored == unsigned:
        return True
    # some old tars summed signed chars
    signed = unsigned - 256 * sum(1 for b in block[:148] + block[156:] if b > 127)
    return stored == signed


_PAX_WANTED = re.compile(rb"(?:path|size|uid|gid)=|GNU\.sparse")


def _parse_pax(data: bytes, what: str) -> dict[str, str]:
    """The records of a PAX header that matter here (names, size, ids, sparse markers)."""
    if _PAX_WANTED.search(data) is None:
        return {}  # only times, xattrs and the like
    records: dict[str, str] = {}
    pos = 0
    n = len(data)
    while pos < n:
        if data[pos] == 0:
            break
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            length = 0
        if space < 0 or length <= 0 or pos + length > n:
            raise BadImage(f"Malformed PAX header in {what}.")
        key, eq, value = data[space + 1 : pos + length - 1].partition(b"=")
        if not eq:
            raise BadImage(f"Malformed PAX header in {what}.")
        records[_decode(key)] = _decode(value)
        pos += length
    return records


class TarWalker:
    """Iterate the members of a tar stream; `read_data()` returns the current member's bytes.

    Member data not read before advancing is skipped. `offset` of each entry is the position of
    its data in the (uncompressed) stream, so a seekable copy can later be read directly.
    """

    def __init__(self, stream: Stream, *, what: str) -> None:
        self._src = stream
        self.what = what
        self._read_size = READ_CHUNK if getattr(stream, "seekable", False) else STREAM_CHUNK
        self._buf = b""
        self._pos = 0
        self._base = 0  # stream offset of _buf[0]
        self._pending = 0  # bytes of the current member's data (with padding) still ahead
        self._current: TarEntry | None = None
        self._data_taken = False
        self.ended = False  # the end-of-archive block was seen
        self.count = 0

    # --- buffer primitives ---
    # _buf is the chunk the stream last returned, used in place; only what straddles two chunks
    # (a header, a kept member's data) is copied out of them.
    @property
    def position(self) -> int:
        return self._base + self._pos

    def _next(self) -> bool:
        """Drop the (consumed) chunk and read the next; False at the end of the stream."""
        self._base += len(self._buf)
        self._buf = self._src.read(self._read_size)
        self._pos = 0
        return bool(self._buf)

    def _take(self, n: int) -> bytes:
        pos = self._pos
        end = pos + n
        buf = self._buf
        if end <= len(buf):
            self._pos = end
            return buf[pos:end]
        parts = [buf[pos:]]
        need = end - len(buf)
        self._pos = len(buf)
        while need:
            if not self._next():
                raise self._truncated()
            buf = self._buf
            if len(buf) >= need:
                parts.append(buf[:need])
                self._pos = need
                break
            parts.append(buf)
            self._pos = len(buf)
            need -= len(buf)
        return b"".join(parts)

    def _skip(self, n: int) -> None:
        avail = len(self._buf) - self._pos
        if n <= avail:
            self._pos += n
            return
        n -= avail
        self._base += len(self._buf)
        self._buf, self._pos = b"", 0
        got = self._src.skip(n)
        self._base += got
        if got < n:
            raise self._truncated()

    def _truncated(self) -> BadImage:
        return BadImage(
            f"The {self.what} is truncated: its tar stream ends in the middle of a member "
            f"(after {self.position} bytes).",
            hint="The image or archive is incomplete or corrupt; fetch or copy it again.",
        )

    def _corrupt(self, why: str) -> BadImage:
        return BadImage(
            f"The {self.what} is not a valid tar stream: {why} (at byte {self.position}).",
            hint="The image or archive is corrupt; fetch or copy it again.",
        )

    # --- members ---
    def read_data(self) -> bytes:
        """The data of the member just returned (call before advancing)."""
        entry = self._current
        if entry is None or self._data_taken:
            raise RuntimeError("no member data to read")
        self._data_taken = True
        if not entry.size:
            return b""
        data = self._take(entry.size)
        self._pending -= entry.size
        return data

    def data_pieces(self) -> Iterator[memoryview]:
        """The data of the member just returned as views of the stream's chunks, uncopied (an unpacker
        writes them straight to a file). Each view keeps its chunk alive; pieces not asked for are
        skipped when the walk moves on."""
        entry = self._current
        if entry is None or self._data_taken:
            raise RuntimeError("no member data to read")
        self._data_taken = True
        need = entry.size
        while need:
            if self._pos >= len(self._buf) and not self._next():
                raise self._truncated()
            start = self._pos
            end = min(len(self._buf), start + need)
            self._pos = end
            need -= end - start
            self._pending -= end - start
            yield memoryview(self._buf)[start:end]

    def read_content(self):
        """Like read_data, but a member larger than spool_at() goes to a spooled temp file as it is
        read (fs.content): a 1 GiB file costs a chunk of memory, not 1 GiB."""
        from ...fs.content import SpoolWriter, spool_at

        entry = self._current
        if entry is None or entry.size <= spool_at():
            return self.read_data()
        if self._data_taken:
            raise RuntimeError("no member data to read")
        self._data_taken = True
        out = SpoolWriter()
        try:
            need = entry.size
            while need:
                if self._pos >= len(self._buf) and not self._next():
                    raise self._truncated()
                piece = self._buf[self._pos : self._pos + need]
                self._pos += len(piece)
                need -= len(piece)
                out.write(piece)
        except BaseException:
            out.abort()
            raise
        self._pending -= entry.size
        return out.finish()

    def __iter__(self) -> Iterator[TarEntry]:
        pax_global: dict[str, str] = {}
        pax: dict[str, str] | None = None
        longname: bytes | None = None
        longlink: bytes | None = None
        ordinal = 0
        while True:
            if self._pending:
                self._skip(self._pending)
                self._pending = 0
            self._current = None
            start = self._pos
            if start + BLOCK <= len(self._buf):
                block = self._buf[start : start + BLOCK]
                self._pos = start + BLOCK
            else:
                if start == len(self._buf) and not self._next():
                    return  # a clean end without end-of-archive blocks: accepted, as Go does
                block = self._take(BLOCK)
            magic = block[257:265]
            ustar = magic[:5] == b"ustar"
            # The checksum is summed only for pre-POSIX headers: a ustar magic already tells a
            # header from data that has lost its place, and image blobs are checked by digest.
            if not ustar:
                if block[0] == 0 and block.count(0) == BLOCK:
                    self.ended = True
                    return
                if not header_checksum_ok(block):
                    raise self._corrupt("a header's checksum does not match")
            typeflag = chr(block[156]) if block[156] else REGULAR
            try:
                try:  # the common layout: octal digits then one NUL or space
                    size = int(block[124:135], 8)
                except ValueError:
                    size = _number(block[124:136])
                if size < 0:  # base-256 can say so; before anything is taken or skipped by it
                    raise self._corrupt("a negative member size")
                if typeflag in "xgLK":
                    if size > META_CAP:  # refused before a byte of it is held in memory
                        raise BadImage(
                            f"The {self.what} has a {'PAX header' if typeflag in 'xg' else 'GNU long name or link'} "
                            f"of {size} bytes, more than imgquilt reads ({META_CAP} bytes).",
                            hint="No container runtime accepts such a header either; the archive is hostile or corrupt.")
                    padded = (size + 511) & ~511
                    data = self._take(size) if size else b""
                    self._skip(padded - size)
                    if typeflag == "x":
                        pax = _parse_pax(data, self.what)
                    elif typeflag == "g":
                        pax_global.update(_parse_pax(data, self.what))
                    elif typeflag == "L":
                        longname = _cstr(data)
                    else:
                        longlink = _cstr(data)
                    continue
                try:
                    mode = int(block[100:107], 8) & 0o7777
                    uid = int(block[108:115], 8)
                    gid = int(block[116:123], 8)
                    mtime = int(block[136:147], 8)
                except ValueError:
                    mode = _number(block[100:108]) & 0o7777
                    uid = _number(block[108:116])
                    gid = _number(block[116:124])
                    mtime = _mtime(block[136:148])
            except ValueError as exc:
                raise self._corrupt(str(exc)) from None
            if longname is not None:
                name_b = longname
            else:
                name_b = block[0:100]
                nul = name_b.find(b"\0")
                if nul >= 0:
                    name_b = name_b[:nul]
                if ustar and magic != b"ustar  \0" and block[345]:
                    name_b = _cstr(block[345:500]) + b"/" + name_b
            if longlink is not None:
                link_b = longlink
            elif block[157]:
                link_b = _cstr(block[157:257])
            else:
                link_b = b""
            name = name_b.decode("utf-8", "surrogateescape")
            linkname = link_b.decode("utf-8", "surrogateescape") if link_b else ""
            sparse = typeflag == "S"
            extra = pax_global if pax is None else {**pax_global, **pax} if pax_global else pax
            if extra:
                name = extra.get("path", name)
                linkname = extra.get("linkpath", linkname)
                try:
                    if "size" in extra:
                        size = int(extra["size"])
                    if "uid" in extra:
                        uid = int(extra["uid"])
                    if "gid" in extra:
                        gid = int(extra["gid"])
                except ValueError:
                    raise self._corrupt("a PAX record holds a bad number") from None
                if "mtime" in extra:
                    mtime = _pax_mtime(extra["mtime"])
                if "GNU.sparse.major" in extra or "GNU.sparse.map" in extra or "GNU.sparse.size" in extra:
                    sparse = True
                    name = extra.get("GNU.sparse.name", name)
            pax = None
            longname = longlink = None
            if sparse and typeflag == "S" and block[482]:
                # old GNU sparse: extension blocks follow the header
                while True:
                    ext = self._take(BLOCK)
                    if not ext[504]:
                        break
            if typeflag in _HEADER_ONLY:
                size = 0
            elif typeflag not in _KNOWN and not ustar and typeflag not in "VM":
                raise self._corrupt(f"unknown member type {typeflag!r}")
            if size < 0:
                raise self._corrupt("a negative member size")
            entry = TarEntry(name, typeflag, mode, uid, gid, size, linkname,
                             self._base + self._pos, ordinal, sparse, mtime)
            ordinal += 1
            self.count = ordinal
            self._pending = (size + 511) & ~511
            self._current = entry
            self._data_taken = False
            yield entry

    def finish(self) -> None:
        """Consume what follows the last member (end blocks, padding) to the end of the stream."""
        if self._pending:
            self._skip(self._pending)
            self._pending = 0
        self._buf, self._pos = b"", 0
        drain = getattr(self._src, "drain", None)
        if drain is not None:
            drain()
        else:
            while self._src.read(READ_CHUNK):
                pass


def member_path(name: str) -> str | None:
    """A member name as a path relative to the root (None: the root itself).

    Leading slashes and `.` components go; `..` is refused (UnsafePath). Unlike patch paths,
    backslashes are allowed: they are ordinary bytes in Linux file names (systemd's `\\x2d` units).
    """
    if not name.startswith((".", "/")) and "/." not in name and "//" not in name and "\x00" not in name:
        return name.rstrip("/") or None  # already clean: the usual case
    parts = [p for p in name.split("/") if p and p != "."]
    if not parts:
        return None
    if ".." in parts or "\x00" in name:
        raise UnsafePath(f"Unsafe archive member {name!r}: it leaves the root.")
    return "/".join(parts)
