"""A layer tar written as zstd:chunked: a plain zstd stream that a reader can also take apart by range.

The format containers/storage's compressor writes (pkg/chunked, as vendored by the skopeo and podman
of Debian 12): every regular file's data is a zstd frame of its own; the tar headers between them
(and the padding before each) are frames too; then two zstd skippable frames, which any zstd
decoder passes over: the table of contents (the zstd-compressed JSON `{"version":1,"entries":[...]}`,
one entry per tar member with its metadata, the sha256 of its data and the offsets of its frame) and a
40-byte footer (TOC offset, compressed and uncompressed lengths, type 1, the magic "GnUlInUx"). The
layer descriptor carries `io.containers.zstd-chunked.manifest-checksum` (sha256 of the compressed TOC)
and `.manifest-position` (offset:length:uncompressed length:1), which is where readers look.

The layer's tar-split follows the TOC (a third skippable frame: the tar stream without the files'
data, layers.tar_split), named by the TOC's `tarSplitDigest` and the `tarsplit-position` annotation, and
the footer is containers/storage's 64-byte one that also says where the tar-split is: so the newest
containers/storage pulls the layer by parts (it refuses a TOC without a tar-split), and imgquilt
checks the TOC against it instead of walking the stream. The tar-split records the CRC-64 of each
file's data, computed here in Python (about 2 MB/s): a layer holding more than TAR_SPLIT_MAX_DATA of
file data is written without one (the TOC alone, as before: imgquilt then walks the stream, the newest
containers/storage pulls it whole). Same tar, same bytes: fixed zstd level,
sorted members (the tar writer's), times as the tar has them.
"""
from __future__ import annotations

import hashlib
import json
import struct
from datetime import datetime, timezone

from ...errors import UsageError
from ...fs.content import Data, SpoolWriter, chunks_of, is_spooled, pread_of, slice_of
from ..layers.tarwalk import BytesStream, TarWalker
from ..layers.tar_split import TarSplitWriter, crc64_iso
from ..layers.toc import SKIPPABLE_HEADER, TAR_SPLIT_POSITION_KEY, ZSTD_CHECKSUM_KEYS, ZSTD_POSITION_KEYS

SKIPPABLE_MAGIC = b"\x50\x2a\x4d\x18"
FOOTER_MAGIC = b"GnUlInUx"
_TYPES = {"0": "reg", "7": "reg", "1": "hardlink", "2": "symlink", "3": "char", "4": "block", "5": "dir", "6": "fifo"}
# the keys skopeo 1.9 and stargz-snapshotter write and read (the second of each pair in layers.toc)
CHECKSUM_KEY = ZSTD_CHECKSUM_KEYS[1]
POSITION_KEY = ZSTD_POSITION_KEYS[1]


def _skippable(data: bytes) -> bytes:
    return SKIPPABLE_MAGIC + struct.pack("<I", len(data)) + data


TAR_SPLIT_MAX_DATA = 16 << 20


def _modtime(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Tape:
    """The blob as it is written (a SpoolWriter: bytes when small, a temp file when large) and its length."""

    def __init__(self) -> None:
        self.out = SpoolWriter()
        self.size = 0

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.size += len(data)


def _frame(cctx, data: Data, out: _Tape) -> str:
    """One zstd frame of `data` (streamed for a large file, its size in the frame header as one-shot
    compression writes it); returns the data's sha256."""
    if not is_spooled(data):
        out.write(cctx.compress(data))
        return hashlib.sha256(data).hexdigest()
    comp = cctx.compressobj(size=len(data))
    for chunk in data.chunks():
        out.write(comp.compress(chunk))
    out.write(comp.flush())
    return data.sha256


def zstd_chunked(tar: Data, *, level: int, mtime: int | None, crc64=crc64_iso,
                 split_max: int = TAR_SPLIT_MAX_DATA) -> tuple[Data, dict[str, str]]:
    """The uncompressed layer `tar` (bytes, or a Spooled when large) as a zstd:chunked blob (likewise),
    and the annotations its descriptor needs. `mtime` is the one modification time every member has
    (layer.resolve_epoch; None: each member's own). A large file is compressed into its frame in
    chunks, never held. `crc64`: the tar-split's checksum of a file's data (chunks -> 8 bytes); no
    tar-split when the layer's file data is over `split_max` bytes."""
    import zstandard

    def piece(a: int, b: int) -> bytes:
        return pread_of(tar, b - a, a)

    cctx = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
    out = _Tape()
    pending = bytearray()  # tar headers (and padding) not yet in a frame
    entries: list[dict] = []
    split: TarSplitWriter | None = TarSplitWriter()
    data_size = 0
    pos = 0
    for e in TarWalker(BytesStream(tar), what="new layer"):
        head = piece(pos, e.offset)
        pending += head
        if split is not None:
            split.segment(head)
        kind = _TYPES.get(e.type)
        if kind is None:  # pragma: no cover - the layer writer makes dirs and regular files only
            raise UsageError(f"zstd:chunked cannot hold the tar member {e.name!r} of type {e.type!r}.")
        entry: dict = {"type": kind, "name": e.name}
        if e.linkname:
            entry["linkName"] = e.linkname
        if e.mode:
            entry["mode"] = e.mode
        if kind == "reg" and e.size:
            entry["size"] = e.size
        if e.uid:
            entry["uid"] = e.uid
        if e.gid:
            entry["gid"] = e.gid
        entry["modtime"] = _modtime(e.mtime if mtime is None else mtime)
        if kind == "reg" and e.size:
            if pending:
                out.write(cctx.compress(bytes(pending)))
                pending.clear()
            data = slice_of(tar, e.offset, e.size)
            start = out.size
            sha = _frame(cctx, data, out)
            entry.update(digest="sha256:" + sha, offset=start, endOffset=out.size)
            data_size += e.size
        if split is not None and data_size > split_max:
            split = None
        if split is not None:
            crc = None
            if kind == "reg" and e.size:
                crc = crc64(chunks_of(data))
            split.file(e.name, e.size, crc)
        entries.append(entry)
        pos = e.offset + e.size  # header-only members have size 0
    tail = piece(pos, len(tar))  # the last padding and the end-of-archive blocks
    pending += tail
    out.write(cctx.compress(bytes(pending)))
    doc: dict = {"version": 1, "entries": entries}
    split_text = split_packed = b""
    if split is not None:
        split.segment(tail)
        split_text = split.text()
        split_packed = cctx.compress(split_text)
        doc["tarSplitDigest"] = "sha256:" + hashlib.sha256(split_packed).hexdigest()
    try:
        toc = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        out.out.abort()
        raise UsageError("A path in the layer is not UTF-8, which a zstd:chunked TOC (JSON) cannot name.",
                         hint="Use --compression zstd or gzip for this layer.") from None
    packed = cctx.compress(toc)
    toc_offset = out.size + SKIPPABLE_HEADER
    out.write(_skippable(packed))
    annotations = {CHECKSUM_KEY: "sha256:" + hashlib.sha256(packed).hexdigest(),
                   POSITION_KEY: f"{toc_offset}:{len(packed)}:{len(toc)}:1"}
    split_offset = 0
    if split is not None:
        split_offset = out.size + SKIPPABLE_HEADER
        out.write(_skippable(split_packed))
        annotations[TAR_SPLIT_POSITION_KEY] = f"{split_offset}:{len(split_packed)}:{len(split_text)}"
    out.write(_skippable(struct.pack("<QQQQQQQ", toc_offset, len(packed), len(toc), 1, split_offset,
                                     len(split_packed), len(split_text)) + FOOTER_MAGIC))
    return out.out.finish(), annotations
