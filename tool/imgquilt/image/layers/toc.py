"""Seekable layers (zstd:chunked, eStargz): the index from the layer's table of contents, file bytes by range.

Both formats compress every file's data on its own (zstd frames, gzip members) and append a table of
contents (TOC, JSON) that names each tar member and where its compressed bytes lie. Reading one:
1. the manifest, verified by its digest, carries the TOC's checksum in a layer annotation:
   - zstd:chunked (`io.github.containers.zstd-chunked.manifest-checksum`, or the older
     `io.containers.zstd-chunked.*` keys skopeo 1.9 and stargz-snapshotter write): the sha256 of the
     compressed TOC, whose place the `manifest-position` annotation gives (offset:length:size:1);
   - eStargz (`containerd.io/snapshot/stargz/toc.digest`): the sha256 of the TOC JSON, which sits in a
     gzip member the 51-byte footer at the end of the blob points to;
2. the TOC is fetched by range and checked against that checksum; the footer, which only says where to
   look, is never trusted for anything else;
3. the TOC is not believed about the layer's members: when it names a tar-split (zstd:chunked from
   containers/storage 1.47 on), layers.tar_split builds the index from the tar-split's own headers and
   the TOC must match it member for member; otherwise layers.toc_walk walks the tar stream itself by
   range (the TOC only says which runs of frames are the big files' data, to skip) into the index a
   full read builds, and the TOC must match that;
4. a file's bytes are fetched by range, decompressed and checked against the length the walk found
   and the TOC's sha256 before use.
A TOC whose checksum does not match is DigestMismatch (exit 6): nothing from it is used. A TOC that
cannot be used (absent, of an unknown version, over the size cap, a regular file without a digest, a
registry that ignores Range, a TOC that does not describe the tar stream) raises TocUnusable, and the
layer is read whole as any other. The layer's own digest is not checked on this path (only the whole
blob could be hashed): the TOC's checksum and the per-file digests are what vouch for every byte used.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from typing import Callable, Literal

from ...errors import BadImage
from ..digests import verify_digest
from .tarwalk import BytesStream, TarWalker

ZSTD_CHECKSUM_KEYS = ("io.github.containers.zstd-chunked.manifest-checksum",
                      "io.containers.zstd-chunked.manifest-checksum")
ZSTD_POSITION_KEYS = ("io.github.containers.zstd-chunked.manifest-position",
                      "io.containers.zstd-chunked.manifest-position")
TAR_SPLIT_POSITION_KEY = "io.github.containers.zstd-chunked.tarsplit-position"  # offset:length:uncompressed
ESTARGZ_DIGEST_KEY = "containerd.io/snapshot/stargz/toc.digest"
ESTARGZ_TOC_NAME = "stargz.index.json"
ESTARGZ_FOOTER = 51
SKIPPABLE_HEADER = 8  # a zstd skippable frame's magic and length, before the TOC it holds
MAX_TOC = 128 << 20  # compressed or not: a bigger TOC is not held in memory (the layer is read whole)
_SHA256 = re.compile(r"^sha256:([0-9a-f]{64})$")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

ReadRange = Callable[[int, int], "bytes | None"]  # (offset, length) -> the bytes; None: ranges are not served
Kind = Literal["zstd:chunked", "estargz"]


class TocUnusable(Exception):
    """The layer's table of contents cannot be used; the layer is read whole instead."""


@dataclass(frozen=True)
class TocRef:
    """What the manifest says about a layer's TOC: its format, the checksum that verifies it, where it is."""

    kind: Kind
    digest: str  # zstd:chunked: of the compressed TOC; eStargz: of the TOC JSON
    offset: int = 0  # zstd:chunked only: the compressed TOC's place in the blob
    length: int = 0
    size: int = 0  # its uncompressed size
    tar_split: tuple[int, int, int] | None = None  # zstd:chunked: where the tar-split lies (offset, length, size)

    @property
    def compression(self) -> str:
        return "zstd" if self.kind == "zstd:chunked" else "gzip"


def _first(annotations: dict[str, str], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if key in annotations:
            return annotations[key]
    return None


def toc_ref(annotations: dict[str, str], blob_size: int, compression: str) -> TocRef | None:
    """The TOC a layer descriptor's annotations announce (`compression`: what its media type says);
    None when it announces none. stargz-snapshotter's zstd:chunked carries the eStargz key too: the
    compression tells the formats apart."""
    z_sum = _first(annotations, ZSTD_CHECKSUM_KEYS)
    e_sum = annotations.get(ESTARGZ_DIGEST_KEY)
    if z_sum is None and e_sum is None:
        return None
    if compression == "zstd" and z_sum is not None:
        kind, digest = "zstd:chunked", z_sum
    elif compression == "gzip" and e_sum is not None:
        kind, digest = "estargz", e_sum
    else:
        raise TocUnusable(f"the layer's TOC annotations do not fit its {compression} media type")
    if not _SHA256.match(digest or ""):
        raise TocUnusable(f"the TOC checksum annotation {digest!r} is not a sha256 digest")
    if kind == "estargz":
        if blob_size <= ESTARGZ_FOOTER:
            raise TocUnusable("the blob is too small to hold an eStargz footer")
        return TocRef("estargz", digest)
    position = _first(annotations, ZSTD_POSITION_KEYS) or ""
    parts = position.split(":")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        raise TocUnusable(f"the zstd:chunked position annotation {position!r} is not offset:length:size:type")
    offset, length, size, manifest_type = (int(p) for p in parts)
    if manifest_type != 1:
        raise TocUnusable(f"the zstd:chunked TOC is of type {manifest_type}, not 1 (CRFS)")
    if length > MAX_TOC or size > MAX_TOC:
        raise TocUnusable(f"the TOC is bigger than imgquilt holds in memory ({MAX_TOC >> 20} MiB)")
    if offset < SKIPPABLE_HEADER or offset + length > blob_size:
        raise TocUnusable("the zstd:chunked TOC position lies outside the blob")
    return TocRef("zstd:chunked", digest, offset, length, size, _tar_split_position(annotations, blob_size))


def _tar_split_position(annotations: dict[str, str], blob_size: int) -> tuple[int, int, int] | None:
    """Where the tar-split lies, as the annotation says (None: it says nothing usable; a TOC that names
    a tar-split then cannot be checked against it, and is walked)."""
    parts = annotations.get(TAR_SPLIT_POSITION_KEY, "").split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    offset, length, size = (int(p) for p in parts)
    if offset < SKIPPABLE_HEADER or offset + length > blob_size or length > MAX_TOC or size > MAX_TOC:
        return None
    return offset, length, size


# --- reading the TOC --------------------------------------------------------------------------
@dataclass(frozen=True)
class Toc:
    """A verified TOC: its JSON document, where the file data ends, and (eStargz) the member it is."""

    ref: TocRef
    doc: dict
    data_end: int  # every file's compressed runs lie before this offset
    own_member: bytes | None = None  # eStargz: the TOC JSON, which the layer's tar holds as stargz.index.json
    tail: bytes | None = None  # eStargz: the TOC's gzip member itself (compressed, at data_end): the tar stream's end


def _fetch(read_range: ReadRange, offset: int, length: int, what: str) -> bytes:
    data = read_range(offset, length)
    if data is None:
        raise TocUnusable("the registry does not serve byte ranges")
    if len(data) != length:
        raise BadImage(f"The {what} is truncated: {length} bytes were asked at offset {offset}, {len(data)} came.")
    return data


def read_toc(ref: TocRef, blob_size: int, read_range: ReadRange, *, what: str) -> Toc:
    """Fetch and verify the TOC (DigestMismatch when it is not the one the manifest names)."""
    if ref.kind == "zstd:chunked":
        raw = _fetch(read_range, ref.offset, ref.length, what)
        verify_digest(ref.digest, hashlib.sha256(raw).hexdigest(), what=f"table of contents of the {what}",
                      hint="The layer's TOC is not the one its manifest names: the blob was altered or the "
                           "registry served other bytes.")
        try:
            import zstandard

            text = zstandard.ZstdDecompressor().decompress(raw, max_output_size=ref.size or MAX_TOC)
        except Exception as exc:  # noqa: BLE001 - a verified TOC that does not decompress is unusable
            raise TocUnusable(f"the TOC does not decompress ({exc})") from None
        return Toc(ref, _parse(text), ref.offset - SKIPPABLE_HEADER)
    footer = _fetch(read_range, blob_size - ESTARGZ_FOOTER, ESTARGZ_FOOTER, what)
    toc_offset = _estargz_footer(footer)
    length = blob_size - ESTARGZ_FOOTER - toc_offset
    if toc_offset <= 0 or length <= 0:
        raise TocUnusable("the eStargz footer points outside the blob")
    if length > MAX_TOC:
        raise TocUnusable(f"the TOC is bigger than imgquilt holds in memory ({MAX_TOC >> 20} MiB)")
    member = _fetch(read_range, toc_offset, length, what)
    text = _estargz_toc_json(member)
    verify_digest(ref.digest, hashlib.sha256(text).hexdigest(), what=f"table of contents of the {what}",
                  hint="The layer's TOC is not the one its manifest names: the blob was altered or the "
                       "registry served other bytes.")
    return Toc(ref, _parse(text), toc_offset, own_member=text, tail=member)


def _estargz_footer(footer: bytes) -> int:
    """The TOC's offset from the footer: an empty gzip member whose extra field is 'SG' + "%016xSTARGZ"."""
    if footer[:4] != b"\x1f\x8b\x08\x04" or footer[10:14] != b"\x1a\x00SG" or footer[14:16] != b"\x16\x00" \
            or footer[32:38] != b"STARGZ":
        raise TocUnusable("the blob does not end in an eStargz footer")
    try:
        return int(footer[16:32], 16)
    except ValueError:
        raise TocUnusable("the eStargz footer holds no TOC offset") from None


def _estargz_toc_json(member: bytes) -> bytes:
    """The JSON of `stargz.index.json`, the one tar member the TOC's gzip member holds."""
    try:
        tar = _gunzip(member, 0, MAX_TOC + 4096)
    except zlib.error as exc:
        raise TocUnusable(f"the TOC does not decompress ({exc})") from None
    walker = TarWalker(BytesStream(tar), what="eStargz TOC")
    try:
        entry = next(iter(walker))
    except (StopIteration, BadImage):
        raise TocUnusable("the TOC's member is not a tar holding stargz.index.json") from None
    if entry.name != ESTARGZ_TOC_NAME or entry.type != "0" or (entry.mode, entry.uid, entry.gid) != (0, 0, 0):
        # only the JSON is covered by the checksum: its header must be the one the estargz writer makes
        raise TocUnusable(f"the TOC's member is {entry.name!r} ({entry.type}, {entry.mode:o} "
                          f"{entry.uid}:{entry.gid}), not stargz.index.json as eStargz writes it")
    try:
        return walker.read_data()
    except BadImage:
        raise TocUnusable("the TOC's member is truncated") from None


def _parse(text: bytes) -> dict:
    try:
        doc = _loads(text)
    except (ValueError, RecursionError) as exc:
        raise TocUnusable(f"the TOC is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("entries"), list):
        raise TocUnusable("the TOC is not version 1 with a list of entries")
    return doc


def _loads(text: bytes):
    """JSON, with orjson (a dependency: it parses a 30 MB TOC in about half the time); json where it is
    missing. Both give the same document for any TOC a producer writes; what orjson refuses and json
    takes (integers past 64 bits, NaN, lone surrogates) no valid TOC holds, and is TocUnusable either way."""
    return json_loader()(text)


def json_loader():
    """The function `_loads` parses with (for a caller that parses many small documents)."""
    try:
        import orjson
    except ImportError:  # pragma: no cover - a dependency; json still reads every TOC
        return json.loads
    return orjson.loads


def _modtime(text: object) -> int:
    """A TOC entry's `modtime` (RFC 3339, the tar header's mtime) in whole seconds; 0 when absent or bad
    (only a timestamp pyc's judgement looks at it)."""
    if type(text) is not str:
        return 0
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp())
    except (ValueError, OverflowError, OSError):
        return 0


def _gunzip(data: bytes, skip: int, cap: int) -> bytes:
    """Up to `cap` bytes after the first `skip` of the gzip members in `data`."""
    want = skip + cap
    out = bytearray()
    rest = data
    while rest and len(out) < want:
        d = zlib.decompressobj(31)
        out += d.decompress(rest, want - len(out))
        while not d.eof and d.unconsumed_tail and len(out) < want:
            out += d.decompress(d.unconsumed_tail, want - len(out))
        if not d.eof:
            break
        rest = d.unused_data
    return bytes(out[skip:])


