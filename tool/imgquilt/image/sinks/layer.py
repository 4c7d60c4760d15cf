"""Write file changes as one reproducible OCI layer tar (`.tar`, `.tar.gz`, `.tar.zst`).

The layer holds every changed file (the verb passes the patched, new, and the applied-record
files) at its resolved path with its mode/uid/gid (a symlink as a symlink member), a whiteout
`.wh.NAME` for every deleted file,
and the parent directories of both with the image's own metadata
(0755 root:root for parents the image lacks). Same inputs, same bytes: entries sorted as a tree
walk, PAX format, one mtime for all (epoch argument, else SOURCE_DATE_EPOCH, else 0), empty
uname/gname, and compressors with fixed headers.

gzip uses the standard library's zlib with a header written here (mtime 0, no name, OS 255), never
isal: the digest must not depend on whether isal is installed. zstd uses `zstandard` with a
checksum. The level is the caller's (`--compression-level`), by default chosen for throughput:
gzip 1 (zlib's fastest, as go-containerregistry writes layers; 4x zlib 6's speed, 10x zlib 9's, on
text ~20% larger than 6) and zstd 3 (zstd's own default: faster than gzip 1 and smaller than gzip 9).
See docs/performance.md.

The tar is streamed through the compressor: a file's contents (bytes, or a Spooled: a large file
kept in a temp file) are copied in chunks, and both digests (diff_id over the tar, digest over the
blob) are computed on the way, so a layer holding a 1 GiB file costs no more memory than one
holding a 1 KiB file. The compressor is fed in fixed 1 MiB pieces whatever the contents are carried
in, so the bytes never depend on how a file was held.
"""
from __future__ import annotations

import hashlib
import io
import os
import struct
import tarfile
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal, Sequence

from ...errors import BadInput, UsageError
from ...fs.content import Data, SpoolWriter, open_reader, sha256_of
from ...fs.paths import check_member_path
from ...fs.types import FileChange
from ..mediatypes import LAYER_MEDIA_TYPES, Compression, LayerFormat
from .output_file import check_output_path, output_file

SUFFIXES: tuple[tuple[str, Compression], ...] = (
    (".tar.gz", "gzip"),
    (".tgz", "gzip"),
    (".tar.zst", "zstd"),
    (".tar.zstd", "zstd"),
    (".tar", "none"),
)
WHITEOUT_PREFIX = ".wh."
DEFAULT_DIR = (0o755, 0, 0)  # parents the image does not have
GZIP_LEVEL = 1  # the default levels: chosen for throughput (module docstring, docs/performance.md)
ZSTD_LEVEL = 3
LEVELS = {"gzip": range(1, 10), "zstd": range(1, 20)}
FEED = 1 << 20  # the compressor is fed in pieces of exactly this size (the last one shorter)
_AHEAD = 4  # pieces handed to the compressor's thread and not yet written (memory: FEED each)


@dataclass(frozen=True)
class LayerInfo:
    """A layer file written to disk."""

    path: Path
    media_type: str
    digest: str  # "sha256:<hex>" of the file as written (compressed)
    diff_id: str  # "sha256:<hex>" of the uncompressed tar
    size: int  # bytes of the file as written


@dataclass(frozen=True)
class LayerBlob:
    """A layer made for an image writer: the blob (bytes, or a Spooled when large) and its identities."""

    data: Data
    media_type: str
    digest: str
    diff_id: str
    compression: Compression
    annotations: dict[str, str] = field(default_factory=dict, hash=False, compare=False)  # zstd:chunked's TOC

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class LayerEntry:
    """One tar member of the layer."""

    path: str  # relative, no leading slash
    kind: Literal["dir", "file", "whiteout", "symlink"]
    mode: int
    uid: int
    gid: int
    data: Data = b""  # a file's bytes (spooled when large); a symlink's target


# --- the entries ------------------------------------------------------------------------------
def resolve_epoch(epoch: int | None = None) -> int:
    """The mtime for every entry: `epoch`, else SOURCE_DATE_EPOCH, else 0."""
    if epoch is not None:
        if epoch < 0:
            raise UsageError(f"The epoch must be a non-negative number of seconds, not {epoch}.")
        return int(epoch)
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(
            f"SOURCE_DATE_EPOCH={raw!r} is not a non-negative integer.",
            hint="Set it to seconds since 1970 (e.g. `git log -1 --format=%ct`), or unset it.",
        )
    return value


def _tree_key(path: str) -> tuple[str, ...]:
    # a tree walk order: a directory comes right before its own children
    return tuple(path.split("/"))


def layer_entries(changes: Sequence[FileChange]) -> list[LayerEntry]:
    """Every member of the layer, sorted; parents come before their children."""
    files: dict[str, LayerEntry] = {}
    dirs: dict[str, LayerEntry] = {}
    known_dirs: dict[str, tuple[int, int, int]] = {}
    wanted_dirs: set[str] = set()

    for ch in changes:
        resolved = check_member_path(ch.resolved, what="resolved path")
        for meta in ch.parents:
            known_dirs.setdefault(meta.path, (meta.mode & 0o7777, meta.uid, meta.gid))
        if ch.data is not None and ch.link:
            entry = LayerEntry(resolved, "symlink", 0o777, ch.uid, ch.gid, ch.data)
        elif ch.data is not None:
            entry = LayerEntry(resolved, "file", ch.mode & 0o7777, ch.uid, ch.gid, ch.data)
        else:
            parent, _, name = resolved.rpartition("/")
            wh = f"{parent}/{WHITEOUT_PREFIX}{name}" if parent else f"{WHITEOUT_PREFIX}{name}"
            entry = LayerEntry(wh, "whiteout", 0o644, 0, 0)
        if entry.path in files:
            raise BadInput(f"Two results for one layer path {entry.path!r}; the apply result is inconsistent.")
        files[entry.path] = entry
        parts = entry.path.split("/")
        wanted_dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))

    for d in wanted_dirs:
        if d in files:
            raise BadInput(f"{d!r} is both a file and a parent directory in the layer; the apply result is inconsistent.")
        mode, uid, gid = known_dirs.get(d, DEFAULT_DIR)
        dirs[d] = LayerEntry(d, "dir", mode, uid, gid)
    return sorted([*dirs.values(), *files.values()], key=lambda e: _tree_key(e.path))


# --- the tar ----------------------------------------------------------------------------------
def _tarinfo(entry: LayerEntry, mtime: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(entry.path)
    ti.mode = entry.mode
    ti.uid = entry.uid
    ti.gid = entry.gid
    ti.uname = ""
    ti.gname = ""
    ti.mtime = mtime
    ti.devmajor = ti.devminor = 0
    if entry.kind == "dir":
        ti.type = tarfile.DIRTYPE
        ti.size = 0
    elif entry.kind == "symlink":
        ti.type = tarfile.SYMTYPE
        ti.linkname = entry.data.decode("utf-8", "surrogateescape")
        ti.size = 0
    else:
        ti.type = tarfile.REGTYPE
        ti.size = len(entry.data)
    return ti


def default_level(compression: Compression) -> int | None:
    return {"gzip": GZIP_LEVEL, "zstd": ZSTD_LEVEL}.get(compression)


def check_level(compression: str, level: int | None) -> None:
    """`--compression-level`: 1-9 for gzip, 1-19 for zstd; nothing for an uncompressed layer."""
    if level is None:
        return
    kind = "zstd" if compression.startswith("zstd") else compression
    if kind not in LEVELS:
        raise UsageError(f"--compression-level {level}: an uncompressed layer ({compression}) has no level.")
    if level not in LEVELS[kind]:
        r = LEVELS[kind]
        raise UsageError(f"--compression-level {level} is out of range for {kind}: use {r.start}-{r.stop - 1}.")


class _Sink:
    """Where the tar goes: hashed (diff_id), compressed in FEED pieces, the blob hashed (digest) and written."""

    def __init__(self, out, compression: Compression, level: int | None, size: int | None = None) -> None:
        self.out = out
        self.compression = compression
        self.tar_hash = hashlib.sha256()
        self.blob_hash = hashlib.sha256()
        self.tar_size = 0
        self.size = 0
        self._pending = bytearray()
        self._crc = 0
        self._thread: ThreadPoolExecutor | None = None  # the compressor's, made for the first whole piece
        self._queued: deque[Future] = deque()
        level = default_level(compression) if level is None else level
        if compression == "gzip":
            self._comp = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 9)
            xfl = 2 if level == 9 else (4 if level == 1 else 0)
            self._emit(b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + bytes([xfl, 255]))
        elif compression == "zstd":
            import zstandard

            # the content size in the frame header, as one-shot compression writes it (some readers need it)
            self._comp = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True).compressobj(
                size=-1 if size is None else size)
        elif compression == "none":
            self._comp = None
        else:
            raise UsageError(f"Unknown layer compression {compression!r}.")

    def _emit(self, data: bytes) -> None:
        if data:
            self.blob_hash.update(data)
            self.size += len(data)
            self.out.write(data)

    def _feed(self, piece) -> None:
        if self._comp is None:
            self._emit(bytes(piece))
            return
        if self.compression == "gzip":
            self._crc = zlib.crc32(piece, self._crc)
        self._emit(self._comp.compress(piece))

    def tell(self) -> int:
        return self.tar_size

    def write(self, data) -> int:
        n = len(data)
        self.tar_hash.update(data)
        self.tar_size += n
        self._pending += data
        if len(self._pending) >= FEED:
            view = memoryview(self._pending)
            whole = len(view) - len(view) % FEED
            for at in range(0, whole, FEED):
                self._feed_aside(bytes(view[at : at + FEED]))
            view.release()
            del self._pending[:whole]
        return n

    def _feed_aside(self, piece: bytes) -> None:
        """Compress (and hash and write) `piece` on the compressor's thread, in order, while this one
        goes on making the tar: zlib, zstd, hashlib and file writes let go of the GIL, so a layer of
        1000 files costs the longer of the two, not their sum. At most _AHEAD pieces wait."""
        if self._comp is None:
            self._feed(piece)
            return
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="imgquilt-compress")
        self._queued.append(self._thread.submit(self._feed, piece))
        while len(self._queued) > _AHEAD:
            self._queued.popleft().result()  # an error there (a full disk) is raised here

    def _drain(self) -> None:
        try:
            while self._queued:
                self._queued.popleft().result()
        finally:
            self.abort()  # nothing left queued: only the thread to end

    def abort(self) -> None:
        """The tar failed: no piece is compressed or written after this returns."""
        for job in self._queued:
            job.cancel()
        self._queued.clear()
        if self._thread is not None:
            self._thread.shutdown(wait=True, cancel_futures=True)
            self._thread = None

    def close(self) -> None:
        self._drain()
        if self._pending:
            self._feed(self._pending)
            self._pending = bytearray()
        if self.compression == "gzip":
            self._emit(self._comp.flush())
            self._emit(struct.pack("<II", self._crc & 0xFFFFFFFF, self.tar_size & 0xFFFFFFFF))
        elif self.compression == "zstd":
            self._emit(self._comp.flush())


def write_tar(changes: Sequence[FileChange], out, *, epoch: int | None = None) -> None:
    """The uncompressed layer tar, written to `out` (anything with `write`), file contents in chunks."""
    mtime = resolve_epoch(epoch)
    tar = tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8", copybufsize=FEED)
    for entry in layer_entries(changes):
        if entry.kind in ("dir", "symlink"):
            tar.addfile(_tarinfo(entry, mtime))  # a symlink's target is in its header, not a body
        else:
            tar.addfile(_tarinfo(entry, mtime), open_reader(entry.data))
    tar.close()


def tar_size(changes: Sequence[FileChange], *, epoch: int | None = None) -> int:
    """The size write_tar's tar will have (headers made twice, contents only measured)."""
    mtime = resolve_epoch(epoch)
    total = 0
    for entry in layer_entries(changes):
        total += len(_tarinfo(entry, mtime).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
        if entry.kind in ("file", "whiteout"):
            total += -(-len(entry.data) // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    total += 2 * tarfile.BLOCKSIZE
    return -(-total // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


def stream_layer(changes: Sequence[FileChange], out, compression: Compression = "gzip", *, epoch: int | None = None,
                 level: int | None = None) -> tuple[str, str, int]:
    """Write the layer blob to `out`; (digest, diff_id, size), both digests "sha256:<hex>"."""
    sink = _Sink(out, compression, level, tar_size(changes, epoch=epoch) if compression == "zstd" else None)
    try:
        write_tar(changes, sink, epoch=epoch)
        sink.close()
    except BaseException:
        sink.abort()
        raise
    return "sha256:" + sink.blob_hash.hexdigest(), "sha256:" + sink.tar_hash.hexdigest(), sink.size


def layer_tar_bytes(changes: Sequence[FileChange], *, epoch: int | None = None) -> bytes:
    """The uncompressed layer tar, in memory (for tests and small layers; writers stream it)."""
    buf = io.BytesIO()
    write_tar(changes, buf, epoch=epoch)
    return buf.getvalue()


def write_layer_tar(changes: Sequence[FileChange], out: BinaryIO, *, epoch: int | None = None) -> str:
    """Write the uncompressed layer tar to `out`; return its diff_id ("sha256:<hex>")."""
    _digest, diff_id, _size = stream_layer(changes, out, "none", epoch=epoch)
    return diff_id


# --- compression ------------------------------------------------------------------------------
def gzip_deterministic(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """gzip with a fixed header (mtime 0, no file name, OS unknown), the same on every platform."""
    buf = io.BytesIO()
    sink = _Sink(buf, "gzip", level)
    sink.write(data)
    sink.close()
    return buf.getvalue()


def compress(data: bytes, compression: Compression, level: int | None = None) -> bytes:
    buf = io.BytesIO()
    sink = _Sink(buf, compression, level, len(data))
    sink.write(data)
    sink.close()
    return buf.getvalue()


def compression_for(dest: Path) -> Compression:
    """The compression a layer file name asks for, by suffix."""
    name = dest.name.lower()
    for suffix, comp in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return comp
    raise UsageError(f"Cannot tell the layer format from {str(dest)!r}: name it .tar, .tar.gz or .tar.zst.")


def build_layer(changes: Sequence[FileChange], compression: LayerFormat = "gzip", *, epoch: int | None = None,
                level: int | None = None) -> LayerBlob:
    """The layer blob for an image writer, compressed as asked (zstd:chunked: a zstd blob with a TOC,
    and the annotations that announce it): bytes when small, spooled to a temp file when large."""
    annotations: dict[str, str] = {}
    if compression == "zstd:chunked":
        from .zstd_chunked import zstd_chunked

        spool = SpoolWriter()
        try:
            write_tar(changes, spool, epoch=epoch)
        except BaseException:
            spool.abort()
            raise
        tar = spool.finish()
        diff_id = "sha256:" + sha256_of(tar)
        blob, annotations = zstd_chunked(tar, level=ZSTD_LEVEL if level is None else level, mtime=resolve_epoch(epoch))
        return LayerBlob(blob, LAYER_MEDIA_TYPES["zstd"], "sha256:" + sha256_of(blob), diff_id, "zstd", annotations)
    out = SpoolWriter()
    try:
        digest, diff_id, _size = stream_layer(changes, out, compression, epoch=epoch, level=level)  # type: ignore[arg-type]
    except BaseException:
        out.abort()
        raise
    return LayerBlob(out.finish(), LAYER_MEDIA_TYPES[compression], digest, diff_id, compression)  # type: ignore[index]


# --- the file ---------------------------------------------------------------------------------
def check_layer_destination(dest: Path) -> Compression:
    """Refuse a bad `--layer` path before anything is computed or written; return its compression."""
    dest = Path(dest)
    comp = compression_for(dest)
    check_output_path(dest, what="layer")
    return comp


def write_layer(changes: Sequence[FileChange], dest: Path, *, epoch: int | None = None, level: int | None = None) -> LayerInfo:
    """Write the layer to `dest` (compression by suffix), streamed into a temp file beside it that
    replaces it whole; return what was written."""
    dest = Path(dest)
    compression = compression_for(dest)
    check_level(compression, level)
    with output_file(dest, what="layer") as fh:
        digest, diff_id, size = stream_layer(changes, fh, compression, epoch=epoch, level=level)
    return LayerInfo(dest, LAYER_MEDIA_TYPES[compression], digest, diff_id, size)
