"""Layer compression: detected from the blob's first bytes (as containerd does), streamed.

gzip goes through isal (several times faster than zlib; its reader handles multi-member streams
and checks every member's CRC and length), falling back to the standard gzip module; zstd through
`zstandard`, across frames. Both release the GIL while they work, so a layer is decompressed by a
thread of its own into a short queue of chunks, and the tar walk (and the digest thread) run
beside it on another core. Compressed bytes are read with preadv straight into the decompressor's
buffer (a memory map measured no faster beyond noise, and would turn a file truncated under us
into SIGBUS). Decompressed streams are on the same reader base as the raw ones (util.reader);
skipping drops whole chunks, since neither format can seek.
"""
from __future__ import annotations

import zlib

from ...errors import BadImage
from ..mediatypes import Compression
from ...util.threads import is_ahead, yield_cpu
from .readahead import ChunkQueue

try:  # isal is the fast path; the standard library is the fallback
    from isal.igzip import GzipFile as _IsalGzipFile  # public API: measured no slower than its private reader
except ImportError:  # pragma: no cover - isal is a dependency
    _IsalGzipFile = None

try:
    import zstandard as _zstd
except ImportError:  # pragma: no cover
    _zstd = None  # type: ignore[assignment]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_OTHER_MAGIC = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
OUT_CHUNK = 4 << 20  # decompressed bytes per queued chunk
IN_CHUNK = 4 << 20  # compressed bytes per read, straight into the decompressor's buffer
FIRST_CHUNK = 64 << 10  # the first chunk is small: detection only needs the first header
QUEUE_CHUNKS = 4  # how far the decompressing thread may run ahead (16 MiB)
# The decompressing thread takes the GIL back after each chunk in and out, and may wait up to the
# switch interval (5 ms) for it while the tar walk runs. Measured on a layer of many small members
# (/usr/share): 1 MiB or 16 MiB chunks did worse than 4 MiB; a 0.1 ms switch interval helped the
# scan alone (+14% -> +5% over decompressing) but not the scan with its digest thread, nor the CLI
# run as a whole, so the interval is left alone.


def detect(head: bytes, *, what: str) -> Compression:
    """The compression of a blob from its first bytes; "none" for an uncompressed tar."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    for magic, name in _OTHER_MAGIC.items():
        if head.startswith(magic):
            raise BadImage(f"The {what} is compressed with {name}, which imgquilt does not read.",
                           hint="Recompress the image with gzip or zstd (e.g. `skopeo copy`).")
    return "none"


def _open_reader(source, kind: Compression):
    if kind == "gzip":
        if _IsalGzipFile is not None:
            return _IsalGzipFile(fileobj=source, mode="rb")
        import gzip  # pragma: no cover - isal is a dependency

        return gzip.GzipFile(fileobj=source, mode="rb")  # pragma: no cover
    return _zstd.ZstdDecompressor().stream_reader(  # type: ignore[union-attr]
        source, read_size=IN_CHUNK, read_across_frames=True, closefd=False)


class Decompressed(ChunkQueue):
    """The decompressed bytes of a raw stream (gzip or zstd), produced by a thread of its own.

    `raw` is a FileRange (or CheckedRange, or a download's ReadAhead): the thread reads the same byte
    range through a handle of its own (`raw.dup()`). `raw.drain()` is what verifies the blob; it is
    called before a decompression error is reported, so a blob that does not match its digest is
    reported as such.
    """

    def __init__(self, raw, kind: Compression, *, what: str) -> None:
        if kind not in ("gzip", "zstd"):  # pragma: no cover - callers only wrap compressed streams
            raise ValueError(kind)
        if kind == "zstd" and _zstd is None:  # pragma: no cover
            raise BadImage(f"The {what} is zstd-compressed but the zstandard module is missing.")
        super().__init__(QUEUE_CHUNKS)
        self.raw = raw
        self.kind = kind
        self.what = what
        self._source = None
        self._yield = False

    # --- the decompressing thread ---
    def _start(self) -> None:
        # a descriptor of its own, on the same open file: the caller may close `raw` (or the path
        # may name another file by then) while the thread still reads
        self._source = self.raw.dup()
        self._yield = is_ahead()  # a layer read ahead of need: its decompression yields the CPU (util.threads)
        try:
            super()._start()
        except BaseException:
            self._source.close()
            raise

    def _stopped(self) -> bool:
        return self._stop or self.raw.closed

    @property
    def stored_offset(self) -> int | None:
        """How much of the stored (compressed) blob the thread has read: a progress bar's count."""
        return getattr(self._source if self._source is not None else self.raw, "offset", None)

    def _produce(self) -> None:
        source, reader = self._source, None
        if self._yield:
            yield_cpu()
        try:
            reader = _open_reader(source, self.kind)
            size = FIRST_CHUNK
            while True:
                data = reader.read(size)
                if not self._put(data) or not data:
                    return
                size = OUT_CHUNK
        finally:
            if reader is not None:
                try:
                    reader.close()
                except Exception:  # noqa: BLE001 - closing a broken stream must not mask the real error
                    pass
            source.close()

    def _error(self, exc: BaseException) -> BaseException:
        if isinstance(exc, BadImage):
            return exc
        if isinstance(exc, (OSError, EOFError, zlib.error, ValueError)) \
                or (_zstd is not None and isinstance(exc, _zstd.ZstdError)) \
                or type(exc).__name__ in ("IsalError", "error", "BadGzipFile"):
            return self._corrupt(exc)
        return exc

    def _corrupt(self, exc: BaseException) -> BadImage:
        # the raw bytes decide first: a blob that does not match its digest is reported as such
        drain = getattr(self.raw, "drain", None)
        if drain is not None:
            drain()
        return BadImage(
            f"The {self.what} is not valid {self.kind} data ({exc}); it is corrupt or truncated.",
            hint="Fetch or copy the image again.",
        )

    # --- the stream ---
    def drain(self) -> None:
        """Verify the raw blob (the rest of the tar needs no decompression)."""
        self.raw.drain()

    def close(self) -> None:
        self._stop = True
        self._join()
        self.raw.close()
        super().close()
