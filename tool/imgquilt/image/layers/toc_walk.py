"""A seekable layer's index from its own tar stream, with the TOC only to skip the big files' data.

A TOC is bytes in the layer like any other: whoever writes the layer writes its TOC, and nothing
ties what the TOC says to the tar stream that `skopeo copy`, podman and every full read extract (and
that the layer's diff_id hashes). So imgquilt does not take its index from the TOC. It walks the
tar stream itself, fetched by range: every tar header, every PAX record, the data of every small
file, decompressed frame by frame (zstd) or member by member (gzip) from the start of the blob to
the end of the archive. Only the data of the layer's largest files is skipped, where the TOC says a
run of frames holds nothing but one file's data: the walk takes those runs to decompress to the
length the TOC says (which must also be the length the file's own tar header gives, or the walk
breaks), and fetches them only when the file is read (then checked: that exact length, and the
TOC's sha256).

What the walk gives is the index a full read builds (layer_index.IndexBuilder over the same
TarWalker), with, for every regular file, where its bytes lie among the compressed frames (an
extent). Then the TOC is compared with it entry by entry (name, type, size, link, mode, owner,
mtime) and must list exactly the members the walk found, in order: a TOC that disagrees, a hole
that holds a header, a frame that does not end where a run does, a stream that does not reach its
end-of-archive: the TOC is unusable (TocUnusable), and the layer is read whole. So the TOC can make
imgquilt believe nothing the stream does not say, except inside the skipped runs: data frames
that decompress to more than the TOC and the file's header say, holding members no full read would
miss. docs/image-references.md states this.
"""
from __future__ import annotations

import io
import struct
import zlib
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator

from ...errors import BadImage, ImgquiltError
from ...util.reader import Reader
from .layer_index import FILE, IndexBuilder, LayerIndex
from .tarwalk import TarWalker, member_path
from .toc import EMPTY_SHA256, ESTARGZ_TOC_NAME, Toc, TocRef, TocUnusable, _modtime

# which runs of a file's data a walk skips: each skipped run splits a range request in two, so where a
# request costs a round trip (a registry) only the larger ones are, where it is a positioned read of a
# local file nearly every one is
HOLE_MIN = 64 << 10  # compressed bytes: a file's data run under this is fetched with the headers around it
MAX_HOLES = 4096  # runs a layer's walk skips (the largest)
LOCAL_HOLE_MIN = 4 << 10  # the same for a local blob (an OCI layout, an archive)
LOCAL_MAX_HOLES = 1 << 20
# a local zstd:chunked layer with no tar-split is walked only when its blob is at least this many times
# its TOC's size (see walk_locally)
LOCAL_WALK_MIN_RATIO = 32
PIECE = 4 << 20  # compressed bytes per range request of the walk
AHEAD = 4  # range requests in flight while the walk decompresses (memory: AHEAD x PIECE)
_ZSTD_MAGIC = 0xFD2FB528
_BLOCK_MAX = 128 << 10
_TYPEFLAG = {"reg": "0", "hardlink": "1", "symlink": "2", "char": "3", "block": "4", "dir": "5", "fifo": "6"}

ReadRange = Callable[[int, int], "bytes | None"]
Run = tuple[int, int, int, int, int]  # compressed start, end; uncompressed bytes to drop, to take; all it holds


@dataclass(frozen=True)
class Hole:
    """A run of compressed bytes the TOC says holds one file's data and nothing else."""

    start: int
    end: int
    length: int  # what it decompresses to, the TOC says


# what the TOC says of one member, chunks folded into their file: (name, typeflag, size, link, mode,
# uid, gid, mtime or None, sha256 hex of a regular file's data or "") -- a tuple: a TOC has 100,000s
_Expected = tuple
NAME, TYPEFLAG, SIZE, LINK, MODE, UID, GID, MTIME, DIGEST = range(9)


# --- what the TOC says ------------------------------------------------------------------------------
def _expected(entries: list) -> list[_Expected]:
    out: list[_Expected] = []
    append = out.append
    times: dict[str, int] = {}  # a layer's members share a few modtimes: parse each once
    for e in entries:
        if type(e) is not dict:
            raise TocUnusable("a TOC entry is not an object")
        get = e.get
        kind = get("type")
        if kind == "chunk":
            continue
        typeflag = _TYPEFLAG.get(kind)  # type: ignore[arg-type]
        if typeflag is None:
            raise TocUnusable(f"TOC entry {get('name')!r} has type {kind!r}")
        name, link = get("name"), get("linkName") or ""
        mode, uid, gid = get("mode") or 0, get("uid") or 0, get("gid") or 0
        size = (get("size") or 0) if kind == "reg" else 0
        if type(name) is not str or type(link) is not str or type(mode) is not int or type(uid) is not int \
                or type(gid) is not int or type(size) is not int or min(mode, uid, gid, size) < 0:
            raise TocUnusable(f"TOC entry {name!r} has a bad name, link, mode, owner or size")
        digest = ""
        if kind == "reg":
            digest = EMPTY_SHA256 if size == 0 else _digest(e)
        text = get("modtime")
        mtime = None
        if type(text) is str:
            mtime = times.get(text)
            if mtime is None:
                mtime = times[text] = _modtime(text)
        append((name, typeflag, size, link, mode & 0o7777, uid, gid, mtime, digest))
    return out


def _digest(e: dict) -> str:
    digest = e.get("digest")
    if type(digest) is not str or len(digest) != 71 or not digest.startswith("sha256:") \
            or digest[7:].strip("0123456789abcdef"):
        raise TocUnusable(f"TOC entry {e.get('name')!r} has no sha256 digest of its data")
    return digest[7:]


def walk_locally(ref: TocRef, blob_size: int, forced: bool | None = None) -> bool:
    """Whether a local layer (a positioned read costs no transfer) is decided with its TOC rather than
    read whole: the one place that decides it (`forced`: IMGQUILT_LOCAL_TOC's walk or whole, which
    concern only the layers this rule weighs). A walk costs per member (a header, its frames decompressed one by one, in Python:
    ~35 us each on vLLM's base layer), a whole read per byte (~1.35 ns, decompressed by a thread of its
    own, its digest checked beside); the TOC's size counts its members (a few hundred bytes each). So a
    zstd:chunked layer with no tar-split whose blob is under LOCAL_WALK_MIN_RATIO times its TOC (small
    files: vLLM's base layer, 13.6; its top layer of large .so files, 78) is read whole (measured on
    those layers: 1.26 s against 2.1 s walked, and 1.73 s against 0.13 s). Either way the index is the
    same (the walk is checked member by member against the stream); a layer with a tar-split is never
    walked (layers.tar_split), an eStargz TOC gives no size to judge by and is walked."""
    if ref.kind != "zstd:chunked" or ref.tar_split is not None:
        return True
    if forced is not None:
        return forced
    return not ref.size or blob_size >= LOCAL_WALK_MIN_RATIO * ref.size


def plan_holes(entries: list, data_end: int, *, hole_min: int = HOLE_MIN, max_holes: int = MAX_HOLES) -> list[Hole]:
    """The runs the walk may skip: where the TOC says a run of frames holds one file's data alone
    (a chunk that starts a frame, up to the next chunk of the file, or the last one up to the
    file's endOffset), merged per file, the largest `max_holes` of at least `hole_min` bytes."""
    candidates: list[Hole] = []
    n = len(entries)
    i = 0
    while i < n:
        head = entries[i]
        i += 1
        if type(head) is not dict or head.get("type") != "reg":
            continue
        chunks = [head]
        while i < n and type(entries[i]) is dict and entries[i].get("type") == "chunk":
            chunks.append(entries[i])
            i += 1
        size = head.get("size")
        if type(size) is not int or size <= 0:
            continue
        if len(chunks) == 1:  # most files: one run, the file's frames (zstd:chunked gives where they end)
            offset, end = head.get("offset"), head.get("endOffset")
            if type(offset) is int and type(end) is int and end - offset >= hole_min and 0 < offset < end <= data_end \
                    and not head.get("innerOffset") and head.get("chunkSize") in (None, 0, size):
                candidates.append(Hole(offset, end, size))
            continue
        runs: list[Hole] = []
        at = 0
        for k, c in enumerate(chunks):
            offset, inner = c.get("offset"), c.get("innerOffset") or 0
            take = c.get("chunkSize") or (size - at if k == len(chunks) - 1 else None)
            if type(offset) is not int or type(inner) is not int or type(take) is not int or take <= 0 or offset <= 0:
                runs = []
                break
            if k + 1 < len(chunks):
                end = chunks[k + 1].get("offset")
                pure = inner == 0 and (chunks[k + 1].get("innerOffset") or 0) == 0
            else:
                end = head.get("endOffset")  # zstd:chunked: where the file's last frame ends
                pure = inner == 0
            if pure and type(end) is int and offset < end <= data_end:
                runs.append(Hole(offset, end, take))
            else:
                runs.append(Hole(0, 0, 0))  # not skippable: it ends a merged run
            at += take
        merged: list[Hole] = []
        for r in runs:
            if r.length == 0:
                merged.append(r)
            elif merged and merged[-1].length and merged[-1].end == r.start:
                merged[-1] = Hole(merged[-1].start, r.end, merged[-1].length + r.length)
            else:
                merged.append(r)
        candidates += [r for r in merged if r.length and r.end - r.start >= hole_min]
    chosen = sorted(candidates, key=lambda h: h.end - h.start, reverse=True)[:max_holes]
    chosen.sort(key=lambda h: h.start)
    out: list[Hole] = []
    for h in chosen:  # a TOC whose runs overlap is not believed about either
        if out and h.start < out[-1].end:
            continue
        out.append(h)
    return out


# --- fetching the walked bytes ------------------------------------------------------------------------
class _Pieces:
    """The compressed bytes of [start, end) ranges, in order, fetched PIECE at a time with AHEAD
    requests in flight (a thread pool), handed out in order."""

    def __init__(self, read_range: ReadRange, ranges: list[tuple[int, int]], what: str) -> None:
        self._read = read_range
        self._what = what
        self._todo = [(s + k, min(PIECE, e - s - k)) for s, e in ranges for k in range(0, e - s, PIECE)]
        self._pool: ThreadPoolExecutor | None = None  # made when the walk starts, shut down when it ends
        self._futures: list = []
        self._next = 0
        self.fetched = 0

    def _fetch(self, offset: int, length: int) -> bytes:
        data = self._read(offset, length)
        if data is None:
            raise TocUnusable("the registry does not serve byte ranges")
        if len(data) != length:
            raise BadImage(f"The {self._what} is truncated: {length} bytes were asked at offset {offset}, {len(data)} came.")
        return data

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        if len(self._todo) > 1:
            self._pool = ThreadPoolExecutor(max_workers=AHEAD, thread_name_prefix="imgquilt-toc-walk")
        try:
            while self._next < len(self._todo):
                if self._pool is None:
                    offset, length = self._todo[self._next]
                    data = self._fetch(offset, length)
                else:
                    while len(self._futures) < AHEAD and self._next + len(self._futures) < len(self._todo):
                        offset, length = self._todo[self._next + len(self._futures)]
                        self._futures.append(self._pool.submit(self._fetch, offset, length))
                    data = self._futures.pop(0).result()
                    offset = self._todo[self._next][0]
                self._next += 1
                self.fetched += len(data)
                yield offset, data
        finally:
            if self._pool is not None:
                for f in self._futures:
                    f.cancel()
                self._pool.shutdown(wait=True)


# --- frames ---------------------------------------------------------------------------------------------
class _Frames:
    """Decompresses walked compressed bytes frame by frame (zstd) or member by member (gzip), at most a
    block's worth of output at a time, recording each one's place: compressed (start, end) and
    uncompressed (start, length)."""

    def __init__(self, compression: str, what: str) -> None:
        self.zstd = compression == "zstd"
        self._dctx = None  # one zstd decompression context for the walk, each frame a decompressobj of it
        self.what = what
        self.cstart: list[int] = []
        self.cend: list[int] = []
        self.ustart: list[int] = []
        self.ulen: list[int] = []
        self.hole: list[bool] = []
        self.upos = 0

    def add_hole(self, h: Hole) -> None:
        self._record(h.start, h.end, h.length, True)

    def _record(self, cstart: int, cend: int, ulen: int, hole: bool) -> None:
        self.cstart.append(cstart)
        self.cend.append(cend)
        self.ustart.append(self.upos)
        self.ulen.append(ulen)
        self.hole.append(hole)
        self.upos += ulen

    def run_of(self, offset: int, size: int) -> tuple[int, int, int, int, int]:
        """The run of frames holding uncompressed bytes [offset, offset + size): (compressed start,
        end, bytes to drop, to take, all the frames hold)."""
        a = bisect_right(self.ustart, offset) - 1
        b = bisect_right(self.ustart, offset + size - 1) - 1
        total = self.ustart[b] + self.ulen[b] - self.ustart[a]
        return self.cstart[a], self.cend[b], offset - self.ustart[a], size, total

    def decompress(self, chunks: Iterator[tuple[int, bytes]], start: int, end: int) -> Iterator[bytes]:
        """The uncompressed bytes of the frames that fill compressed [start, end) exactly."""
        src = _Cursor(chunks, start)
        while src.pos < end:
            frame_start = src.pos
            n = 0
            for out in (self._zstd_frame(src) if self.zstd else self._gzip_member(src, end)):
                n += len(out)
                yield out
            if src.pos > end:
                raise TocUnusable(f"a compressed frame of the layer runs past {end}, where the TOC says a file's data starts")
            self._record(frame_start, src.pos, n, False)

    def _zstd_frame(self, src: "_Cursor") -> Iterator[bytes]:
        import zstandard

        try:
            yield from self._zstd_blocks(src, zstandard)
        except zstandard.ZstdError as exc:
            raise TocUnusable(f"a zstd frame of the layer does not decompress ({exc})") from None

    def _zstd_blocks(self, src: "_Cursor", zstandard) -> Iterator[bytes]:
        head = src.take(4)
        (magic,) = struct.unpack("<I", head)
        if 0x184D2A50 <= magic <= 0x184D2A5F:  # a skippable frame: decompresses to nothing
            (length,) = struct.unpack("<I", src.take(4))
            src.skip(length)
            return
        if magic != _ZSTD_MAGIC:
            raise TocUnusable(f"the layer holds no zstd frame at byte {src.pos - 4}")
        if self._dctx is None:
            self._dctx = zstandard.ZstdDecompressor()
        d = self._dctx.decompressobj()
        fhd = src.take(1)
        desc = fhd[0]
        single = bool(desc & 0x20)
        pending = [head, fhd, src.take((0 if single else 1) + (0, 1, 2, 4)[desc & 3] + ((1 if single else 0), 2, 4, 8)[desc >> 6])]
        blocks = 0
        while True:  # the blocks, handed over 8 at a time: at most 1 MiB of output per call
            bh = src.take(3)
            value = bh[0] | bh[1] << 8 | bh[2] << 16
            last, kind, size = value & 1, (value >> 1) & 3, value >> 3
            if kind == 3 or size > _BLOCK_MAX:
                raise TocUnusable(f"a zstd block of the layer at byte {src.pos - 3} is not one a frame may hold")
            pending += (bh, src.take(1 if kind == 1 else size))
            blocks += 1
            if last:
                break
            if blocks == 8:
                out = d.decompress(b"".join(pending))
                pending, blocks = [], 0
                if out:
                    yield out
        if desc & 4:
            pending.append(src.take(4))
        out = d.decompress(b"".join(pending))
        if out:
            yield out
        if not d.eof:
            raise TocUnusable(f"a zstd frame of the layer does not end where its blocks say (byte {src.pos})")

    def _gzip_member(self, src: "_Cursor", end: int) -> Iterator[bytes]:
        d = zlib.decompressobj(31)
        while not d.eof:
            if src.pos >= end:
                raise TocUnusable("a gzip member of the layer does not end where the TOC says a file's data starts")
            data = src.take_some(min(1 << 16, end - src.pos))
            try:
                while data:
                    out = d.decompress(data, _BLOCK_MAX)
                    if out:
                        yield out
                    if d.eof:
                        src.give_back(d.unused_data)
                        break
                    data = d.unconsumed_tail
            except zlib.error as exc:
                raise TocUnusable(f"a gzip member of the layer does not inflate ({exc})") from None


class _Cursor:
    """Compressed bytes in order from (offset, bytes) chunks, read by exact counts."""

    def __init__(self, chunks: Iterator[tuple[int, bytes]], pos: int) -> None:
        self._chunks = chunks
        self._buf = b""
        self._at = 0
        self.pos = pos

    def _fill(self) -> bool:
        for offset, data in self._chunks:
            if offset != self.pos + len(self._buf) - self._at:  # the next range: this frame runs into a skipped run
                raise TocUnusable(f"a compressed frame of the layer runs past byte {self.pos + len(self._buf) - self._at}, "
                                  "where the TOC says a file's data starts")
            self._buf = self._buf[self._at:] + data
            self._at = 0
            return True
        return False

    def take(self, n: int) -> bytes:
        at = self._at
        end = at + n
        if end <= len(self._buf):  # the usual case: in the piece at hand
            self._at = end
            self.pos += n
            return self._buf[at:end]
        while len(self._buf) - self._at < n:
            if not self._fill():
                raise TocUnusable(f"the layer's compressed stream ends at byte {self.pos + len(self._buf) - self._at}, "
                                  "inside a frame")
        out = self._buf[self._at:self._at + n]
        self._at += n
        self.pos += n
        return out

    def take_some(self, n: int) -> bytes:
        if self._at >= len(self._buf) and not self._fill():
            raise TocUnusable(f"the layer's compressed stream ends at byte {self.pos}, inside a gzip member")
        out = self._buf[self._at:self._at + n]
        self._at += len(out)
        self.pos += len(out)
        return out

    def give_back(self, data: bytes) -> None:
        self._at -= len(data)
        self.pos -= len(data)

    def skip(self, n: int) -> None:
        while n:
            part = self.take_some(n)
            n -= len(part)


# --- the stream the walker reads ------------------------------------------------------------------------
class _InHole(Exception):
    """The tar walk wants bytes where the TOC says a file's data lies, unread."""


class _WalkStream(Reader):
    """The layer's tar stream over walked segments: decompressed bytes, and holes that can only be
    skipped (a read inside one means the tar stream has a header where the TOC says data is)."""

    def __init__(self, segments: Iterator[tuple[str, object]]) -> None:
        self._segments = segments
        self._kind = ""
        self._bytes: Iterator[bytes] | None = None
        self._hole_left = 0
        self._chunk = b""
        self._at = 0

    def _advance(self) -> bool:
        for kind, value in self._segments:
            self._kind = kind
            if kind == "hole":
                self._hole_left = value  # type: ignore[assignment]
                if self._hole_left:
                    return True
            else:
                self._bytes = value  # type: ignore[assignment]
                return True
        return False

    def _next_piece(self) -> None:
        """The next non-empty piece of the run being decompressed, or the run's end."""
        for part in self._bytes:
            if part:
                self._chunk, self._at = part, 0
                return
        self._bytes = None
        self._kind = ""

    def _read_some(self, n: int) -> bytes:
        while True:
            if self._at < len(self._chunk):
                out = self._chunk[self._at:self._at + n]
                self._at += len(out)
                return out
            if self._kind == "bytes" and self._bytes is not None:
                self._next_piece()
                continue
            if self._kind == "hole" and self._hole_left:
                raise _InHole()
            if not self._advance():
                return b""

    def _skip_some(self, n: int) -> int:
        while True:
            left = len(self._chunk) - self._at
            if left:
                step = min(left, n)
                self._at += step
                return step
            if self._kind == "hole" and self._hole_left:
                step = min(self._hole_left, n)
                self._hole_left -= step
                return step
            if self._kind == "bytes" and self._bytes is not None:
                self._next_piece()
                continue
            if not self._advance():
                return 0


# --- the walk -------------------------------------------------------------------------------------------
@dataclass
class Walked:
    """A seekable layer's index from its tar stream, and what the walk cost."""

    index: LayerIndex
    fetched: int  # compressed bytes fetched by range (the TOC not counted)
    holes: int


def walk_index(toc: Toc, blob_size: int, read_range: ReadRange, *, position: int, whiteouts: bool,
               what: str, hole_min: int = HOLE_MIN, max_holes: int = MAX_HOLES) -> Walked:
    """The layer's index from its tar stream (see the module docstring); TocUnusable when the TOC
    does not describe that stream (or the walk cannot be made), BadImage when the blob cannot be read."""
    entries = toc.doc["entries"]
    expected = _expected(entries)
    holes = plan_holes(entries, toc.data_end, hole_min=hole_min, max_holes=max_holes)
    ranges: list[tuple[int, int]] = []
    at = 0
    for h in holes:
        if h.start > at:
            ranges.append((at, h.start))
        at = h.end
    if toc.data_end > at:
        ranges.append((at, toc.data_end))
    compression = toc.ref.compression
    frames = _Frames(compression, what)
    pieces = _Pieces(read_range, ranges, what)
    chunks = iter(pieces)

    def segments() -> Iterator[tuple[str, object]]:
        at = 0
        for h in holes:
            if h.start > at:
                yield "bytes", frames.decompress(chunks, at, h.start)
            frames.add_hole(h)
            yield "hole", h.length
            at = h.end
        if toc.data_end > at:
            yield "bytes", frames.decompress(chunks, at, toc.data_end)
        if toc.tail is not None:  # eStargz: the TOC's own gzip member, fetched with the TOC
            yield "bytes", frames.decompress(iter([(toc.data_end, toc.tail)]), toc.data_end, toc.data_end + len(toc.tail))

    builder = IndexBuilder(position=position, whiteouts=whiteouts, what=what)
    files: list[tuple[object, int, int, str]] = []  # (rec, data offset, size, TOC digest)
    stream = _WalkStream(segments())
    walker = TarWalker(stream, what=what)
    k = 0
    try:
        for e in walker:
            if k < len(expected):
                want = expected[k]
                _compare(want, e)
            elif toc.own_member is not None and k == len(expected) and e.name == ESTARGZ_TOC_NAME:
                want = (e.name, "0", e.size, "", e.mode, e.uid, e.gid, e.mtime, _sha(toc.own_member))
            else:
                raise TocUnusable(f"the layer's tar stream holds a member the TOC does not list ({e.name!r})")
            k += 1
            rec = builder.add(e.name, e.type, e.mode, e.uid, e.gid, e.size, e.linkname, e.ordinal, e.offset, e.sparse, e.mtime)
            if rec is not None and rec.kind == FILE:
                files.append((rec, e.offset, e.size, want[DIGEST]))
        if not walker.ended and not _nothing_after(toc, blob_size, pieces):
            raise TocUnusable("the layer's tar stream does not reach its end-of-archive before the TOC, and "
                              "frames after it may hold more")
        while stream.read(1 << 20):  # the rest (end blocks, padding): every frame decompressed and placed
            pass
    except _InHole:
        raise TocUnusable("the layer's tar stream has a tar header where its TOC says a file's data lies") from None
    except TocUnusable:
        raise
    except BadImage as exc:
        if isinstance(exc, ImgquiltError) and "truncated" in exc.message and "asked at offset" in exc.message:
            raise  # the registry or file gave fewer bytes: not the TOC's fault
        raise TocUnusable(f"the layer's tar stream cannot be walked ({exc.message})") from None
    finally:
        chunks.close()  # no range request left in flight
    if k - (toc.own_member is not None) != len(expected):
        raise TocUnusable(f"the TOC lists {len(expected)} members, the layer's tar stream {k}")
    for rec, offset, size, digest in files:
        rec.extent = (digest, () if size == 0 else (frames.run_of(offset, size),))  # type: ignore[attr-defined]
    return Walked(builder.finish(walker.count), pieces.fetched, len(holes))


def _nothing_after(toc: Toc, blob_size: int, pieces: _Pieces) -> bool:
    """A zstd:chunked stream that ends without end-of-archive blocks (stargz-snapshotter writes none):
    it ends there for a full read too only when every byte after the data is a skippable frame (the
    TOC's, the footer's), which decompress to nothing. Fetched and parsed here (a few dozen bytes)."""
    ref = toc.ref
    if ref.kind != "zstd:chunked":
        return False
    head = toc.data_end
    rest = blob_size - (ref.offset + ref.length)
    if rest < 0 or rest > 1 << 20:
        return False
    try:
        before = pieces._fetch(head, ref.offset - head)
        after = pieces._fetch(ref.offset + ref.length, rest) if rest else b""
    except ImgquiltError:
        return False
    pieces.fetched += len(before) + len(after)
    if len(before) != 8 or struct.unpack("<II", before)[1] != ref.length or not _skippable(before[:4]):
        return False
    at = 0
    while at < len(after):
        if len(after) - at < 8 or not _skippable(after[at:at + 4]):
            return False
        at += 8 + struct.unpack("<I", after[at + 4:at + 8])[0]
    return at == len(after)


def _skippable(magic: bytes) -> bool:
    return 0x184D2A50 <= struct.unpack("<I", magic)[0] <= 0x184D2A5F


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _same_name(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return member_path(a) == member_path(b)
    except ImgquiltError:
        return False


def _compare(want: _Expected, got) -> None:
    """The TOC's entry and the tar header at the same place must say the same (TocUnusable)."""
    name, typeflag, size, link, mode, uid, gid, mtime, _ = want
    got_type = got.type if got.type != "7" else "0"
    if name == got.name and typeflag == got_type and (typeflag != "0" or size == got.size) \
            and (typeflag not in "12" or link == got.linkname) and mode == got.mode and uid == got.uid \
            and gid == got.gid and mtime == got.mtime:
        return  # the usual case, at once
    why = None
    if not _same_name(name, got.name):
        why = f"names {got.name!r}"
    elif got_type != typeflag:
        why = f"is of type {got_type!r}, not {typeflag!r}"
    elif typeflag == "0" and got.size != size:
        why = f"holds {got.size} bytes, not {size}"
    elif typeflag in "12" and not (link == got.linkname or (typeflag == "1" and _same_name(link, got.linkname))):
        why = f"links to {got.linkname!r}, not {link!r}"
    elif (got.mode, got.uid, got.gid) != (mode, uid, gid):
        why = f"has mode {got.mode:o} and owner {got.uid}:{got.gid}, not {mode:o} {uid}:{gid}"
    elif mtime is not None and mtime != got.mtime:
        why = f"has mtime {got.mtime}, not {mtime}"
    elif mtime is None and got.name.endswith(".py"):
        why = "has no mtime in the TOC (a Python source's mtime decides its bytecode)"
    if why is not None:
        raise TocUnusable(f"the TOC's entry {name!r} does not describe the layer's tar stream: the member "
                          f"there {why}")


# --- a file's bytes ---------------------------------------------------------------------------------------
def run_bytes(run: Run, fetched: bytes, compression: str) -> bytes | None:
    """The file's bytes from its run's compressed bytes: the frames decompressed whole, which must give
    exactly the length the walk found (or took from the TOC, for a skipped run); None otherwise."""
    start, end, skip, take, total = run
    out = bytearray()
    try:
        if compression == "zstd":
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(fetched), read_across_frames=True)
            while len(out) <= total:
                part = reader.read(min(4 << 20, total + 1 - len(out)))
                if not part:
                    break
                out += part
        else:
            rest = fetched
            while rest and len(out) <= total:
                d = zlib.decompressobj(31)
                out += d.decompress(rest, total + 1 - len(out))
                while not d.eof and d.unconsumed_tail and len(out) <= total:
                    out += d.decompress(d.unconsumed_tail, total + 1 - len(out))
                if not d.eof:
                    break
                rest = d.unused_data
    except Exception:  # noqa: BLE001 - undecodable frames are frames that are not what the walk found
        return None
    if len(out) != total:
        return None
    return bytes(out[skip:skip + take])
