"""One reader base for imgquilt's byte streams (blob ranges, downloads, decompressed and tar streams).

A stream supplies one primitive, `_read_some(n)`: 1 to n bytes for n > 0, b"" only at its end (where a
checking stream checks its digest and size first, so b"" means "all of it, and it matched"). `Reader`
builds the rest on it, once: `read` (n < 0: everything left), `readinto`, `read_exactly`, `skip` and
`drain` (by reading, so skipped bytes still pass a hash; a stream that can move without reading, by a
seek or by dropping a chunk it holds, overrides `_skip_some`), iteration over chunks, `close`/`closed`
and the context manager. `Wrapper` is the same over another reader whose reads and skips it extends.
"""

from __future__ import annotations

from typing import Any, Iterator

CHUNK = 1 << 20  # default step of a skip or drain by reading, and of iteration
_ALL = 1 << 30  # the step of read(-1): one chunk per call for a chunked stream, everything left for a range


class Reader:
    """The base: subclasses give `_read_some`, and `_skip_some` when skipping need not read."""

    seekable = False  # a tar walk reads a seekable stream in small steps (it skips by seeking)
    chunk = CHUNK
    _closed = False

    def _read_some(self, n: int) -> bytes:  # pragma: no cover - every stream has its own
        raise NotImplementedError

    def _skip_some(self, n: int) -> int:
        """Move up to n bytes ahead (n > 0); 0 only at the end. By default by reading: the bytes pass
        whatever the read checks."""
        return len(self._read_some(min(n, self.chunk)))

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes (fewer is no end: a stream may hand over what it holds); b"" at the end.
        n < 0: everything left, and the end was reached (so a checking stream has checked it)."""
        if n > 0:
            return self._read_some(n)
        if n == 0:
            return b""
        parts = []
        while part := self._read_some(_ALL):
            parts.append(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def read_exactly(self, n: int) -> bytes:
        """n bytes, fewer only where the stream ends (the caller says what a short read means)."""
        parts = []
        while n > 0:
            part = self._read_some(n)
            if not part:
                break
            parts.append(part)
            n -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def skip(self, n: int) -> int:
        """Move n bytes ahead; the count moved (fewer only at the end)."""
        done = 0
        while done < n:
            step = self._skip_some(n - done)
            if step <= 0:
                break
            done += step
        return done

    def drain(self) -> None:
        """Go to the end (for a checking stream: raises if its bytes are bad)."""
        while self._skip_some(1 << 62):
            pass

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(self.chunk):
            yield chunk

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Wrapper(Reader):
    """A reader over another: reads and skips go to it (a subclass extends `_read_some`/`_skip_some`);
    draining, closing and being seekable are its."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.seekable = bool(getattr(inner, "seekable", False))

    def _read_some(self, n: int) -> bytes:
        return self._inner.read(n)

    def _skip_some(self, n: int) -> int:
        return self._inner.skip(n)

    def drain(self) -> None:
        self._inner.drain()

    @property
    def closed(self) -> bool:
        return bool(getattr(self._inner, "closed", False))

    def close(self) -> None:
        self._inner.close()
