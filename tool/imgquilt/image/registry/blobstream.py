"""A blob streamed from a registry, hashed as it is read: the end (b"") only after size and digest match.

Same small interface as the local raw streams (`read`, `readinto`, `skip`, `peek`, `drain`, `close`),
so layer readers can take it where they take a file range.
"""
from __future__ import annotations

from typing import Iterator

import httpx

from ...errors import BadImage, DigestMismatch
from ..digests import new_hasher, split_digest

CHUNK = 1 << 20


class RegistryBlobStream:
    """The body of a blob GET; `size` (from the manifest descriptor) is checked if given."""

    seekable = False

    def __init__(self, response: httpx.Response, digest: str, *, size: int | None, what: str) -> None:
        self.digest = digest
        self.size = size
        self.what = what
        self._response = response
        self._chunks: Iterator[bytes] = response.iter_raw(CHUNK)
        self._buffer = bytearray()
        self._hasher = new_hasher(digest)
        self._eof = False
        self.verified = False
        self.bytes_read = 0  # bytes handed to the caller

    def _fill(self, want: int) -> None:
        """Buffer at least `want` bytes (fewer only at the end of the body)."""
        while not self._eof and len(self._buffer) < want:
            try:
                chunk = next(self._chunks, None)
            except httpx.HTTPError as exc:
                self.close()
                raise BadImage(f"The {self.what} {self.digest} was cut off mid-download: "
                               f"{exc.__class__.__name__}: {exc}. Nothing from it was used.",
                               hint="The registry or the network failed mid-download; try again.") from None
            if chunk is None:
                self._eof = True
            elif chunk:
                self._hasher.update(chunk)
                self._buffer += chunk
                total = self.bytes_read + len(self._buffer)
                if self.size is not None and total > self.size:
                    self.close()
                    raise DigestMismatch(f"The {self.what} {self.digest} is longer than the {self.size} bytes "
                                         "its descriptor states. Nothing from it was used.",
                                         hint="The registry holds a corrupt blob; push the image again.")

    def _finish(self) -> None:
        received = self.bytes_read
        self.close()
        if self.size is not None and received != self.size:
            raise DigestMismatch(f"The {self.what} {self.digest} is truncated: {received} of {self.size} bytes "
                                 "arrived. Nothing from it was used.",
                                 hint="The registry holds a truncated blob or the download was cut; try again, "
                                      "or push the image again.")
        actual = f"{split_digest(self.digest)[0]}:{self._hasher.hexdigest()}"
        if actual != self.digest:
            raise DigestMismatch(f"The {self.what} {self.digest} from the registry does not match its digest: "
                                 f"its bytes hash to {actual}. Nothing from it was used.",
                                 hint="The registry holds a corrupt blob; push the image again.")
        self.verified = True

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        self._fill(n if n > 0 else 1 << 62)
        if not self._buffer:
            if not self.verified:
                self._finish()
            return b""
        take = len(self._buffer) if n < 0 else min(n, len(self._buffer))
        data = bytes(self._buffer[:take])
        del self._buffer[:take]
        self.bytes_read += take
        if n < 0:
            self._finish()  # the whole rest was asked for: check it before handing it out
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def peek(self, n: int) -> bytes:
        self._fill(n)
        return bytes(self._buffer[:n])

    def skip(self, n: int) -> int:
        done = 0
        while done < n:
            part = self.read(min(CHUNK, n - done))
            if not part:
                break
            done += len(part)
        return done

    def drain(self) -> None:
        """Read to the end: raises DigestMismatch (or BadImage) if the blob is bad."""
        while self.read(CHUNK):
            pass

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> "RegistryBlobStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
