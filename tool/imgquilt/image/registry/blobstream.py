"""A blob streamed from a registry, hashed as it is read: the end (b"") only after size and digest match.

Every chunk is awaited under the request's deadline (deadline.py): the first IMGQUILT_REGISTRY_DEADLINE
seconds plus one second per MIN_RATE bytes received, so a trickling registry is cut off.

On the same reader base as the local raw streams (util.reader: `read`, `readinto`, `skip`, `drain`,
`close`, this stream giving `_read_some`; `peek` beside), so layer readers take it where they take a file range (a layer download is read ahead by
layers.readahead.ReadAhead, which the decompressing thread reads). Reads are serialised by a lock;
each byte is hashed once, in order.
"""
from __future__ import annotations

import threading
from typing import BinaryIO, Callable, Iterator

import httpx

from ...errors import BadImage
from ...util.reader import Reader
from ..digests import CopyCheck, new_hasher, verify_digest
from .deadline import DEADLINE_ENV, Deadline, DeadlinePolicy



class RegistryBlobStream(Reader):
    """The body of a blob GET; `size` (from the manifest descriptor) is checked if given. Skipping and
    draining read (the base's): every byte is hashed."""

    def __init__(self, response: httpx.Response, digest: str, *, size: int | None, what: str,
                 deadline: Deadline | None = None) -> None:
        self.digest = digest
        self.deadline = deadline or DeadlinePolicy().start()
        self.size = size
        self.what = what
        self._response = response
        self._chunks: Iterator[bytes] = response.iter_raw()  # as received: no rechunking copies
        self._buffer = bytearray()
        self._hasher = new_hasher(digest)
        self._eof = False
        self._closed = False
        self._lock = threading.RLock()
        self.verified = False
        self.bytes_read = 0  # bytes handed to the caller
        self._tee: BinaryIO | None = None
        self._on_end: Callable[[bool], None] | None = None
        self.on_bytes: Callable[[int], None] | None = None  # progress: bytes received

    def tee(self, spool: BinaryIO, on_end: Callable[[bool], None]) -> None:
        """Copy every byte received into `spool`; `on_end(verified)` once the stream ends or is closed."""
        self._tee, self._on_end = spool, on_end

    def _ended(self) -> None:
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end(self.verified)

    def _receive(self) -> bytes | None:
        """The next chunk of the body as received (hashed, teed, counted, size-checked); None at its end."""
        if self._closed:
            raise BadImage(f"The download of the {self.what} {self.digest} was closed before its end.")
        received = self.bytes_read + len(self._buffer)
        try:
            with self.deadline.active(received):
                chunk = next(self._chunks, None)
            if chunk and self.deadline.passed(received + len(chunk)):
                raise httpx.ReadTimeout("the download ran past its deadline")
        except httpx.HTTPError as exc:
            self.close()
            if self.deadline.passed(received):
                policy = self.deadline.policy
                raise BadImage(f"The download of the {self.what} {self.digest} was too slow: {received} bytes "
                               f"after {policy.seconds:g} s plus one per {policy.min_rate} bytes. Nothing from it "
                               "was used.", hint=f"The registry trickles or the network is congested; try again "
                                                  f"(or allow more time with {DEADLINE_ENV}=SECONDS).") from None
            raise BadImage(f"The {self.what} {self.digest} was cut off mid-download: "
                           f"{exc.__class__.__name__}: {exc}. Nothing from it was used.",
                           hint="The registry or the network failed mid-download; try again.") from None
        if chunk is None:
            self._eof = True
            return None
        if chunk:
            self._hasher.update(chunk)
            if self._tee is not None:
                self._tee.write(chunk)
            if self.on_bytes is not None:
                self.on_bytes(len(chunk))
            total = received + len(chunk)
            if self.size is not None and total > self.size:
                self.close()
                self._verify(total)  # longer than its descriptor: a mismatch whatever the digest
        return chunk

    def _fill(self, want: int) -> None:
        """Buffer at least `want` bytes (fewer only at the end of the body)."""
        while not self._eof and len(self._buffer) < want:
            chunk = self._receive()
            if chunk:
                self._buffer += chunk

    def _verify(self, received: int) -> None:
        hint = ("The registry holds a damaged blob or the download was cut; try again, or push the image "
                "again. Nothing from it was used.")
        copy = CopyCheck(self.size, hint) if self.size is not None else None
        verify_digest(self.digest, self._hasher.hexdigest(), what=self.what, where="the registry", copy=copy,
                      read=received, hint=hint)

    def _finish(self) -> None:
        received = self.bytes_read
        self._response.close()  # the body is done; the stream stays open for its readers (b"" from now)
        try:
            self._verify(received)
            self.verified = True
        finally:
            self._ended()

    def _read_some(self, n: int) -> bytes:
        with self._lock:
            return self._read(n)

    def _read(self, n: int) -> bytes:
        self._fill(n)
        if not self._buffer:
            if not self.verified:
                self._finish()
            return b""
        take = min(n, len(self._buffer))
        if take == len(self._buffer):
            data = bytes(self._buffer)  # one copy (a slice first would make two)
            self._buffer.clear()
        else:
            with memoryview(self._buffer) as view:
                data = bytes(view[:take])
            del self._buffer[:take]
        self.bytes_read += take
        return data

    def read_chunk(self) -> bytes:
        """The next piece of the body as it was received (what is buffered, else the next chunk), handed
        over without copying it into the buffer and out again; b"" at the end, after the digest matched.
        For a reader that takes pieces of any size (layers.readahead)."""
        with self._lock:
            if not self._buffer:
                while not self._eof:
                    chunk = self._receive()
                    if chunk:
                        self.bytes_read += len(chunk)
                        return chunk
            return self._read(len(self._buffer) or 1)  # what is buffered; at the end b"", once verified

    def peek(self, n: int) -> bytes:
        with self._lock:
            self._fill(n)
            return bytes(self._buffer[:n])

    def close(self) -> None:
        self._closed = True
        self._response.close()
        self._ended()

