"""A raw stream read ahead by a thread of its own, into a short queue of chunks.

For a download: receiving and hashing (the blob stream hashes what it receives) then run on one core
while another decompresses, instead of one thread doing all three in turn. Same small interface as the
raw streams (`read`, `readinto`, `skip`, `drain`, `close`, `dup`, `verified`, `closed`); the end (b"")
is handed over only after the inner stream reached its own end, which is where it checks its digest.
"""
from __future__ import annotations

import queue
import threading

CHUNK = 1 << 20
DEPTH = 8  # chunks the reading thread may run ahead (8 MiB of compressed bytes)


class ReadAhead:
    """`raw` read by a thread in CHUNK reads; errors (a digest mismatch at the end) reach the reader."""

    seekable = False

    def __init__(self, raw) -> None:
        self.raw = raw
        self._queue: queue.Queue = queue.Queue(DEPTH)
        self._chunk = b""
        self._at = 0
        self._ended = False
        self._stop = False
        self._lock = threading.Lock()  # the decompressing thread reads through dup(), the walker may drain
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        try:
            while not self._stop:
                data = self.raw.read(CHUNK)
                if not self._put(data) or not data:
                    return
        except BaseException as exc:  # handed to the reader, which decides what it means
            self._put(exc)

    def _put(self, item) -> bool:
        while not self._stop:
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def _next(self) -> bool:
        if self._ended:
            return False
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="imgquilt-read-ahead", daemon=True)
            self._thread.start()
        item = self._queue.get()
        if isinstance(item, BaseException):
            self._ended = True
            raise item
        if not item:
            self._ended = True
            return False
        self._chunk, self._at = item, 0
        return True

    def read(self, n: int = -1) -> bytes:
        with self._lock:
            if n < 0:
                parts = [self._chunk[self._at:]]
                self._at = len(self._chunk)
                while self._next():
                    parts.append(self._chunk)
                    self._at = len(self._chunk)
                return b"".join(parts)
            if n == 0 or (self._at >= len(self._chunk) and not self._next()):
                return b""
            data = self._chunk[self._at:self._at + n]
            self._at += len(data)
            return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def skip(self, n: int) -> int:
        done = 0
        while done < n:
            part = self.read(min(CHUNK, n - done))
            if not part:
                break
            done += len(part)
        return done

    def drain(self) -> None:
        """Read to the end: the inner stream's digest is checked there."""
        while self.read(CHUNK):
            pass

    @property
    def verified(self) -> bool:
        return bool(getattr(self.raw, "verified", False))

    @property
    def closed(self) -> bool:
        return self._stop

    def dup(self) -> "_Shared":
        return _Shared(self)

    def close(self) -> None:
        self._stop = True
        self.raw.close()  # first: a reading thread blocked on the network wakes up
        if self._thread is not None:
            while self._thread.is_alive():
                try:  # unblock a reading thread waiting on a full queue
                    while True:
                        self._queue.get_nowait()
                except queue.Empty:
                    pass
                self._thread.join(0.01)


class _Shared:
    """A second handle on a ReadAhead (for the decompressing thread); closing it closes nothing."""

    def __init__(self, stream: ReadAhead) -> None:
        self._stream = stream
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        return self._stream.read(n)

    def readinto(self, b) -> int:
        return self._stream.readinto(b)

    def close(self) -> None:
        self.closed = True
