"""Write an apply's result as one reproducible OCI layer tar (`.tar`, `.tar.gz`, `.tar.zst`).

The layer holds every file the series ends with (patched, new, and the applied-record at
RECORD_PATH) at its resolved path with the FileResult's mode/uid/gid, a whiteout `.wh.NAME` for
every file the series deletes, and the parent directories of both with the image's own metadata
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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Literal

from ...engine.result import ApplyResult
from ...errors import BadInput, UsageError
from ...fs.paths import check_member_path
from ...util.atomic import atomic_file
from ...util.atomic import fsync_dir

MEDIA_TAR = "application/vnd.oci.image.layer.v1.tar"
MEDIA_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"

Compression = Literal["none", "gzip", "zstd"]
MEDIA_TYPES: dict[str, str] = {"none": MEDIA_TAR, "gzip": MEDIA_GZIP, "zstd": MEDIA_ZSTD}
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

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class LayerEntry:
    """One tar member of the layer."""

    path: str  # relative, no leading slash
    kind: Literal["dir", "file", "whiteout"]
    mode: int
    uid: int
    gid: int
    data: bytes = b""


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


def layer_entries(result: ApplyResult) -> list[LayerEntry]:
    """Every member of the layer, sorted; parents come before their children."""
    files: dict[str, LayerEntry] = {}
    dirs: dict[str, LayerEntry] = {}
    known_dirs: dict[str, tuple[int, int, int]] = {}
    wanted_dirs: set[str] = set()

    for fr in result.files:
        resolved = check_member_path(fr.resolved, what="resolved path")
        for meta in fr.target.parents:
            known_dirs.setdefault(meta.path, (meta.mode & 0o7777, meta.uid, meta.gid))
        if fr.final is not None:
            entry = LayerEntry(resolved, "file", fr.mode & 0o7777, fr.uid, fr.gid, fr.final)
        elif fr.target.data is not None:
            parent, _, name = resolved.rpartition("/")
            wh = f"{parent}/{WHITEOUT_PREFIX}{name}" if parent else f"{WHITEOUT_PREFIX}{name}"
            entry = LayerEntry(wh, "whiteout", 0o644, 0, 0)
        else:
            continue  # absent before and after: nothing to say
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
    else:
        ti.type = tarfile.REGTYPE
        ti.size = len(entry.data)
    return ti


def layer_tar_bytes(result: ApplyResult, *, epoch: int | None = None) -> bytes:
    """The uncompressed layer tar, in memory (a layer holds only the patched files: small)."""
    mtime = resolve_epoch(epoch)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for entry in layer_entries(result):
            tar.addfile(_tarinfo(entry, mtime), io.BytesIO(entry.data) if entry.kind != "dir" else None)
    return buf.getvalue()


def write_layer_tar(result: ApplyResult, out: BinaryIO, *, epoch: int | None = None) -> str:
    """Write the uncompressed layer tar to `out`; return its diff_id ("sha256:<hex>")."""
    data = layer_tar_bytes(result, epoch=epoch)
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


def build_layer(result: ApplyResult, compression: Compression = "gzip", *, epoch: int | None = None) -> LayerBlob:
    """The layer blob in memory, compressed as asked."""
    tar = layer_tar_bytes(result, epoch=epoch)
    diff_id = "sha256:" + hashlib.sha256(tar).hexdigest()
    blob = compress(tar, compression)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    return LayerBlob(blob, MEDIA_TYPES[compression], digest, diff_id, compression)


# --- atomic files -----------------------------------------------------------------------------
def check_output_path(dest: Path, *, what: str) -> None:
    """Refuse an output whose directory is missing or which names a directory."""
    if not dest.parent.is_dir():
        raise UsageError(f"Cannot write the {what} {str(dest)!r}: directory {str(dest.parent)!r} does not exist.")
    if dest.is_dir():
        raise UsageError(f"Cannot write the {what} {str(dest)!r}: it is a directory.")


@contextmanager
def output_file(dest: Path, *, what: str = "output") -> Iterator[BinaryIO]:
    """A temp file beside `dest` that replaces it on success; OS errors become a UsageError."""
    dest = Path(dest)
    check_output_path(dest, what=what)
    try:
        with atomic_file(dest) as fh:
            yield fh
    except OSError as exc:
        raise UsageError(f"Cannot write the {what} {str(dest)!r}: {exc.strerror or exc}.") from None
    fsync_dir(dest.parent)


def write_bytes_atomic(dest: Path, data: bytes, *, what: str = "output") -> None:
    """Write `data` to `dest` whole or not at all."""
    with output_file(dest, what=what) as fh:
        fh.write(data)


def check_layer_destination(dest: Path) -> Compression:
    """Refuse a bad `--layer` path before anything is computed or written; return its compression."""
    dest = Path(dest)
    comp = compression_for(dest)
    check_output_path(dest, what="layer")
    return comp


def write_layer(result: ApplyResult, dest: Path, *, epoch: int | None = None) -> LayerInfo:
    """Write the layer to `dest` (compression by suffix), atomically; return what was written."""
    dest = Path(dest)
    blob = build_layer(result, compression_for(dest), epoch=epoch)
    write_bytes_atomic(dest, blob.data, what="layer")
    return LayerInfo(dest, blob.media_type, blob.digest, blob.diff_id, blob.size)
