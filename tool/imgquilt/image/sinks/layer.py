"""Write file changes as one reproducible OCI layer tar (`.tar`, `.tar.gz`, `.tar.zst`).

The layer holds every changed file (the verb passes the patched, new, and the applied-record
files) at its resolved path with its mode/uid/gid (a symlink as a symlink member), a whiteout
`.wh.NAME` for every deleted file,
and the parent directories of both with the image's own metadata
(0755 root:root for parents the image lacks). Same inputs, same bytes: entries sorted as a tree
walk, PAX format, one mtime for all (epoch argument, else SOURCE_DATE_EPOCH, else 0), empty
uname/gname, and compressors with fixed headers.

gzip uses the standard library's zlib with a header written here (mtime 0, no name, OS 255), never
isal: the layer is small (the patched files only), and the digest must not depend on whether isal
is installed. zstd uses `zstandard` at a fixed level with the content size and a checksum.
"""
from __future__ import annotations

import hashlib
import io
import os
import struct
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal, Sequence

from ...errors import BadInput, UsageError
from ...fs.paths import check_member_path
from ...fs.types import FileChange
from ..mediatypes import LAYER_MEDIA_TYPES, Compression, LayerFormat
from .output_file import check_output_path, write_bytes_atomic

SUFFIXES: tuple[tuple[str, Compression], ...] = (
    (".tar.gz", "gzip"),
    (".tgz", "gzip"),
    (".tar.zst", "zstd"),
    (".tar.zstd", "zstd"),
    (".tar", "none"),
)
WHITEOUT_PREFIX = ".wh."
DEFAULT_DIR = (0o755, 0, 0)  # parents the image does not have
ZSTD_LEVEL = 19
GZIP_LEVEL = 9


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
    """A layer held in memory: the blob bytes and their identities (for image writers)."""

    data: bytes
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
    data: bytes = b""  # a file's bytes; a symlink's target


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


def layer_tar_bytes(changes: Sequence[FileChange], *, epoch: int | None = None) -> bytes:
    """The uncompressed layer tar, in memory (a layer holds only the patched files: small)."""
    mtime = resolve_epoch(epoch)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for entry in layer_entries(changes):
            tar.addfile(_tarinfo(entry, mtime), io.BytesIO(entry.data) if entry.kind in ("file", "whiteout") else None)
    return buf.getvalue()


def write_layer_tar(changes: Sequence[FileChange], out: BinaryIO, *, epoch: int | None = None) -> str:
    """Write the uncompressed layer tar to `out`; return its diff_id ("sha256:<hex>")."""
    data = layer_tar_bytes(changes, epoch=epoch)
    out.write(data)
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --- compression ------------------------------------------------------------------------------
def gzip_deterministic(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """gzip with a fixed header (mtime 0, no file name, OS unknown), the same on every platform."""
    comp = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, 9)
    body = comp.compress(data) + comp.flush()
    xfl = 2 if level == 9 else (4 if level == 1 else 0)
    header = b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + bytes([xfl, 255])
    trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return header + body + trailer


def compress(data: bytes, compression: Compression) -> bytes:
    if compression == "none":
        return data
    if compression == "gzip":
        return gzip_deterministic(data)
    if compression == "zstd":
        import zstandard

        cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=True)
        return cctx.compress(data)
    raise UsageError(f"Unknown layer compression {compression!r}.")


def compression_for(dest: Path) -> Compression:
    """The compression a layer file name asks for, by suffix."""
    name = dest.name.lower()
    for suffix, comp in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return comp
    raise UsageError(f"Cannot tell the layer format from {str(dest)!r}: name it .tar, .tar.gz or .tar.zst.")


def build_layer(changes: Sequence[FileChange], compression: LayerFormat = "gzip", *, epoch: int | None = None) -> LayerBlob:
    """The layer blob in memory, compressed as asked (zstd:chunked: a zstd blob with a TOC, and the
    annotations that announce it)."""
    tar = layer_tar_bytes(changes, epoch=epoch)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    annotations: dict[str, str] = {}
    if compression == "zstd:chunked":
        from .zstd_chunked import zstd_chunked

        blob, annotations = zstd_chunked(tar, level=ZSTD_LEVEL, mtime=resolve_epoch(epoch))
        kind: Compression = "zstd"
    else:
        blob, kind = compress(tar, compression), compression
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    return LayerBlob(blob, LAYER_MEDIA_TYPES[kind], digest, diff_id, kind, annotations)


# --- the file ---------------------------------------------------------------------------------
def check_layer_destination(dest: Path) -> Compression:
    """Refuse a bad `--layer` path before anything is computed or written; return its compression."""
    dest = Path(dest)
    comp = compression_for(dest)
    check_output_path(dest, what="layer")
    return comp


def write_layer(changes: Sequence[FileChange], dest: Path, *, epoch: int | None = None) -> LayerInfo:
    """Write the layer to `dest` (compression by suffix), atomically; return what was written."""
    dest = Path(dest)
    blob = build_layer(changes, compression_for(dest), epoch=epoch)
    write_bytes_atomic(dest, blob.data, what="layer")
    return LayerInfo(dest, blob.media_type, blob.digest, blob.diff_id, blob.size)
