"""Layer compression: detected from the blob's first bytes (as containerd does), streamed.

gzip goes through isal's igzip (several times faster than zlib), falling back to the standard gzip
module; zstd through `zstandard`'s streaming reader, across frames. Decompressed streams expose the
same `read`/`skip` interface as the raw ones; skipping reads and discards, since neither format can
seek.
"""
from __future__ import annotations

import zlib
from typing import Literal

from ..errors import BadImage

Compression = Literal["gzip", "zstd"] | None

try:  # isal is the fast path; the standard library is the fallback
    from isal import igzip as _gzip_mod
except ImportError:  # pragma: no cover - isal is a dependency
    import gzip as _gzip_mod  # type: ignore[no-redef]

try:
    import zstandard as _zstd
except ImportError:  # pragma: no cover
    _zstd = None  # type: ignore[assignment]

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_OTHER_MAGIC = {b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
SKIP_CHUNK = 4 << 20


def detect(head: bytes, *, what: str) -> Compression:
    """The compression of a blob from its first bytes; None for an uncompressed tar."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    for magic, name in _OTHER_MAGIC.items():
        if head.startswith(magic):
            raise BadImage(f"The {what} is compressed with {name}, which imgquilt does not read.",
                           hint="Recompress the image with gzip or zstd (e.g. `skopeo copy`).")
    return None


class Decompressed:
    """The decompressed bytes of a raw stream (gzip or zstd)."""

    seekable = False

    def __init__(self, raw, kind: Compression, *, what: str) -> None:
        self.raw = raw
        self.kind = kind
        self.what = what
        if kind == "gzip":
            self._f = _gzip_mod.GzipFile(fileobj=raw, mode="rb")
        elif kind == "zstd":
            if _zstd is None:  # pragma: no cover
                raise BadImage(f"The {what} is zstd-compressed but the zstandard module is missing.")
            self._f = _zstd.ZstdDecompressor().stream_reader(
                raw, read_size=_zstd.DECOMPRESSION_RECOMMENDED_INPUT_SIZE, read_across_frames=True, closefd=False
            )
        else:  # pragma: no cover - callers only wrap compressed streams
            raise ValueError(kind)

    def read(self, n: int = -1) -> bytes:
        try:
            return self._f.read(n)
        except BadImage:
            raise
        except (OSError, EOFError, zlib.error, ValueError) as exc:
            raise self._corrupt(exc) from None
        except Exception as exc:  # zstandard.ZstdError and isal errors
            if _zstd is not None and isinstance(exc, _zstd.ZstdError):
                raise self._corrupt(exc) from None
            if type(exc).__name__ in ("IsalError", "error"):
                raise self._corrupt(exc) from None
            raise

    def _corrupt(self, exc: Exception) -> BadImage:
        # the raw bytes decide first: a blob that does not match its digest is reported as such
        drain = getattr(self.raw, "drain", None)
        if drain is not None:
            drain()
        return BadImage(
            f"The {self.what} is not valid {self.kind} data ({exc}); it is corrupt or truncated.",
            hint="Fetch or copy the image again.",
        )

    def skip(self, n: int) -> int:
        done = 0
        while done < n:
            part = self.read(min(SKIP_CHUNK, n - done))
            if not part:
                break
            done += len(part)
        return done

    def drain(self) -> None:
        """Read the raw stream to its end (verifying it); the rest needs no decompression."""
        self.raw.drain()

    def close(self) -> None:
        try:
            self._f.close()
        except Exception:  # noqa: BLE001 - closing a broken stream must not mask the real error
            pass
        self.raw.close()
