"""A zstd:chunked layer's tar-split: its tar stream without the files' data, and what it is checked for.

containers/storage (1.47 and later, so podman and skopeo 1.14 on) writes, beside the TOC, the layer's
tar-split (github.com/vbatts/tar-split): JSON lines, zstd-compressed, in a skippable frame after the
TOC. Each line is a segment (type 2: raw bytes of the tar stream, base64: every tar header with its
PAX records and long names, the padding before it, the end-of-archive blocks) or a file (type 1: a
member's name and data size, and the CRC-64/ISO of its data). Segments and files in order are the
tar stream with every file's data left out. The TOC names its sha256 (`tarSplitDigest`, of the
compressed bytes) and the `io.github.containers.zstd-chunked.tarsplit-position` annotation where it is.

So the layer's index is built from the tar-split's own headers, by the same tar reader and index
builder as a full read, and the TOC must say the same member for member (containers/storage's
`ensureTOCMatchesTarSplit`, done here in order): what a partial pull of podman exports and what it
writes to disk agree, without fetching the layer's tar stream. A tar-split whose file sizes do not fit
its headers, that is truncated, or that disagrees with the TOC makes the TOC unusable (TocUnusable).
"""
from __future__ import annotations

import base64
import hashlib

from ...errors import BadImage, ImgquiltError
from ...util.reader import Reader
from .layer_index import FILE, IndexBuilder, LayerIndex
from .tarwalk import TarWalker
from .toc import MAX_TOC, Toc, TocUnusable, json_loader

SEGMENT, FILE_ENTRY = 2, 1

# --- CRC-64/ISO, as tar-split records a file's data (Go's hash/crc64 with the ISO table, big-endian sum)
_POLY = 0xD800000000000000


def _table() -> list[int]:
    out = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        out.append(crc)
    return out


_TABLE = _table()


def crc64_iso(chunks) -> bytes:
    """The CRC-64/ISO of the bytes in `chunks` (an iterable of bytes), as tar-split stores it."""
    crc = 0xFFFFFFFFFFFFFFFF
    table = _TABLE
    for chunk in chunks:
        for b in chunk:
            crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return (crc ^ 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")


class TarSplitWriter:
    """The tar-split of a tar stream, built member by member (JSON lines as tar-split's Go encoder writes
    them: `{"type":..,"name":..,"size":..,"payload":..,"position":..}`)."""

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._position = 0

    def _add(self, entry: dict) -> None:
        import json

        entry["position"] = self._position
        self._position += 1
        self._lines.append(json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")

    def segment(self, raw: bytes) -> None:
        if raw:
            self._add({"type": SEGMENT, "payload": base64.b64encode(raw).decode()})

    def file(self, name: str, size: int, crc: bytes | None) -> None:
        entry: dict = {"type": FILE_ENTRY, "name": name}
        if size:
            entry["size"] = size
        entry["payload"] = base64.b64encode(crc).decode() if crc is not None else None
        self._add(entry)

    def text(self) -> bytes:
        return b"".join(self._lines)


# --- reading ------------------------------------------------------------------------------------------
def read_tar_split(toc: Toc, read_range, *, what: str) -> bytes | None:
    """The verified, decompressed tar-split the TOC names (None: the TOC names none). DigestMismatch when
    its bytes are not the ones the (verified) TOC names; TocUnusable when it cannot be had or decoded."""
    from ..digests import verify_digest
    from .toc import _fetch

    digest = toc.doc.get("tarSplitDigest")
    if digest is None or toc.ref.kind != "zstd:chunked":  # eStargz has none (its TOC is walked)
        return None
    if type(digest) is not str or len(digest) != 71 or not digest.startswith("sha256:") \
            or digest[7:].strip("0123456789abcdef"):
        raise TocUnusable(f"the TOC's tarSplitDigest {digest!r} is not a sha256 digest")
    where = toc.ref.tar_split
    if where is None:
        raise TocUnusable("the TOC names a tar-split, but no tarsplit-position annotation says where it is")
    offset, length, size = where
    raw = _fetch(read_range, offset, length, what)
    verify_digest(digest, hashlib.sha256(raw).hexdigest(), what=f"tar-split of the {what}",
                  hint="The layer's tar-split is not the one its TOC names: the blob was altered or the "
                       "registry served other bytes.")
    try:
        import zstandard

        return zstandard.ZstdDecompressor().decompress(raw, max_output_size=size or MAX_TOC)
    except Exception as exc:  # noqa: BLE001 - a verified tar-split that does not decompress is unusable
        raise TocUnusable(f"the tar-split does not decompress ({exc})") from None


def _parse(text: bytes) -> tuple[bytes, list[int], list[tuple[str, int]]]:
    """The tar-split as (its segments' bytes joined, where each file's data gap falls in them, each
    file line's (name, size)): the whole document parsed at once (a large layer's has 100,000s of lines)."""
    import binascii

    body = text.strip(b"\n")
    try:  # line by line: measured faster than one document made of them (no 65 MB copies to join them)
        lines = list(map(json_loader(), body.split(b"\n"))) if body else []
    except (ValueError, RecursionError):
        raise TocUnusable("the tar-split is not JSON lines") from None
    parts: list[bytes] = []
    at = 0
    gaps: list[int] = []  # the offset in the joined segments where file k's data (files[k][1] bytes) lies
    files: list[tuple[str, int]] = []
    a2b = binascii.a2b_base64
    for n, e in enumerate(lines):
        if type(e) is not dict:
            raise TocUnusable(f"line {n + 1} of the tar-split is not an object")
        kind = e.get("type")
        if kind == SEGMENT:
            payload = e.get("payload")
            if payload:
                try:
                    raw = a2b(payload, strict_mode=True)
                except (ValueError, TypeError):
                    raise TocUnusable(f"segment {n + 1} of the tar-split is not base64") from None
                parts.append(raw)
                at += len(raw)
        elif kind == FILE_ENTRY:
            name, size = e.get("name"), e.get("size") or 0
            if name is None and e.get("name_raw") is not None:
                try:
                    name = base64.b64decode(e["name_raw"], validate=True).decode("utf-8", "surrogateescape")
                except (ValueError, TypeError):
                    raise TocUnusable(f"file {n + 1} of the tar-split has a bad raw name") from None
            if type(name) is not str or type(size) is not int or size < 0:
                raise TocUnusable(f"file {n + 1} of the tar-split has a bad name or size")
            gaps.append(at)
            files.append((name, size))
        else:
            raise TocUnusable(f"line {n + 1} of the tar-split is of type {kind!r}")
    return b"".join(parts), gaps, files


class _InData(Exception):
    """The tar reader wants bytes where the tar-split says a file's data lies."""


class _SplitStream(Reader):
    """The tar stream a tar-split describes: its segments' bytes, and each file's data as a gap that can
    only be skipped (a read inside one: the headers do not fit the sizes the tar-split gives)."""

    def __init__(self, data: bytes, gaps: list[int], files: list[tuple[str, int]]) -> None:
        self._data = data
        self._gaps = [(g, size) for g, (_, size) in zip(gaps, files) if size]  # in order
        self._g = 0  # the next gap
        self._at = 0  # in _data
        self._gap_left = 0  # of the gap being skipped

    def _limit(self) -> int:
        return self._gaps[self._g][0] if self._g < len(self._gaps) else len(self._data)

    def _read_some(self, n: int) -> bytes:
        if self._gap_left:
            raise _InData()
        limit = self._limit()
        if self._at == limit and self._g < len(self._gaps):
            raise _InData()  # at a gap's start: only a skip may cross it
        end = min(limit, self._at + n)
        out = self._data[self._at:end]
        self._at = end
        return out

    def _skip_some(self, n: int) -> int:
        if not self._gap_left:
            limit = self._limit()
            if self._at < limit:
                step = min(limit - self._at, n)
                self._at += step
                return step
            if self._g >= len(self._gaps):
                return 0
            self._gap_left = self._gaps[self._g][1]  # at a gap's start: into it
        step = min(self._gap_left, n)
        self._gap_left -= step
        if not self._gap_left:
            self._g += 1
        return step


def tar_split_index(toc: Toc, text: bytes, *, position: int, whiteouts: bool, what: str) -> LayerIndex:
    """The layer's index from its tar-split's headers, every regular file given its run of frames from
    the TOC, which must describe exactly those members in that order (else TocUnusable)."""
    from .toc_walk import DIGEST, _compare, _expected

    entries = toc.doc["entries"]
    expected = _expected(entries)
    runs = _runs(entries, toc.data_end)
    data, gaps, files = _parse(text)
    walker = TarWalker(_SplitStream(data, gaps, files), what=f"tar-split of the {what}")
    builder = IndexBuilder(position=position, whiteouts=whiteouts, what=what)
    k = 0
    try:
        for e in walker:
            if k >= len(files) or k >= len(expected):
                raise TocUnusable(f"the tar-split's headers hold a member its file list or the TOC does not ({e.name!r})")
            name, size = files[k]
            if name != e.name or size != e.size or e.sparse:
                raise TocUnusable(f"the tar-split's file {k + 1} ({name!r}, {size} bytes) is not the member its "
                                  f"headers give ({e.name!r}, {e.size} bytes{', sparse' if e.sparse else ''})")
            want = expected[k]
            _compare(want, e)
            rec = builder.add(e.name, e.type, e.mode, e.uid, e.gid, e.size, e.linkname, e.ordinal, e.offset,
                              e.sparse, e.mtime)
            if rec is not None and rec.kind == FILE:
                rec.extent = (want[DIGEST], () if e.size == 0 else (runs[k],))  # type: ignore[attr-defined]
            k += 1
    except _InData:
        raise TocUnusable("the tar-split has a tar header where it says a file's data lies") from None
    except TocUnusable:
        raise
    except BadImage as exc:
        raise TocUnusable(f"the tar-split's headers cannot be read ({exc.message if isinstance(exc, ImgquiltError) else exc})") from None
    if not walker.ended:
        raise TocUnusable("the tar-split ends before its end-of-archive blocks (truncated)")
    if k != len(files) or k != len(expected):
        raise TocUnusable(f"the TOC lists {len(expected)} members, the tar-split {len(files)}, its headers {k}")
    return builder.finish(walker.count)


def _runs(entries: list, data_end: int) -> dict[int, tuple[int, int, int, int, int]]:
    """The run of frames of every regular file with data, by its place among the TOC's members:
    (compressed start, end, 0, size, size): zstd:chunked gives each file frames of its own, from its
    (first chunk's) offset to its endOffset. They must lie in order, apart, inside the data."""
    out: dict[int, tuple[int, int, int, int, int]] = {}
    k = -1
    last_end = 0
    head: dict | None = None
    for e in entries:
        if type(e) is not dict:
            raise TocUnusable("a TOC entry is not an object")
        if e.get("type") == "chunk":
            if head is None:
                raise TocUnusable("a TOC chunk entry follows no regular file")
            offset = e.get("offset")
            if type(offset) is not int or not out[k][0] <= offset < out[k][1]:
                raise TocUnusable(f"a chunk of TOC entry {head.get('name')!r} lies outside the file's frames")
            continue
        k += 1
        head = None
        size = e.get("size") or 0
        if e.get("type") != "reg" or type(size) is not int or size <= 0:
            continue
        start, end = e.get("offset"), e.get("endOffset")
        if type(start) is not int or type(end) is not int or not last_end <= start < end <= data_end or start <= 0:
            raise TocUnusable(f"TOC entry {e.get('name')!r} has frames at {start!r}-{end!r}, not after the previous "
                              f"file's (which end at {last_end}) and inside the layer's data (which ends at {data_end})")
        if e.get("innerOffset"):
            raise TocUnusable(f"TOC entry {e.get('name')!r} does not start a frame")
        out[k] = (start, end, 0, size, size)
        last_end = end
        head = e
    return out
