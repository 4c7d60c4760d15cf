"""Streams whose bytes a thread of its own produces into a short queue of chunks.

`ChunkQueue` is the shared machinery (a producing thread, a bounded queue, reading and skipping over
the chunks as the primitives of the reader base, util.reader; errors handed to the reader, a stop that
unblocks the producer). Two streams use it:
compression.Decompressed (the thread decompresses) and ReadAhead here (the thread reads a raw stream:
for a download, receiving and hashing then run on one core while another decompresses, instead of
one thread doing all three in turn).
"""
from __future__ import annotations

import queue
import threading

from ...util.reader import Reader

CHUNK = 1 << 20
DEPTH = 8  # chunks ReadAhead's thread may run ahead (8 MiB of compressed bytes)


class ChunkQueue(Reader):
    """Chunks produced by `_produce` (run in a thread started on the first read), read in order.

    `_produce` hands each chunk to `_put` (False: stop producing), then b"" at the end; an exception
    it raises is handed to the reader through `_error`. Skipping drops what the chunks hold unread.
    """

    def __init__(self, depth: int) -> None:
        self._queue: queue.Queue = queue.Queue(depth)
        self._chunk = b""
        self._at = 0
        self._ended = False
        self._stop = False
        self._thread: threading.Thread | None = None

    # --- the producing thread ---
    def _produce(self) -> None:  # pragma: no cover - every subclass has its own
        raise NotImplementedError

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # handed to the reading thread, which decides what it means
            self._put(exc)

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"imgquilt-{type(self).__name__.lower()}", daemon=True)
        self._thread.start()

    def _stopped(self) -> bool:
        return self._stop

    def _put(self, item) -> bool:
        while not self._stopped():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def _error(self, exc: BaseException) -> BaseException:
        return exc

    # --- the stream ---
    def _next_chunk(self) -> bool:
        """Wait for the next chunk; False at the end of the stream."""
        if self._ended:
            return False
        if self._thread is None:
            self._start()
        item = self._queue.get()
        if isinstance(item, BaseException):
            self._ended = True
            raise self._error(item)
        if not item:
            self._ended = True
            return False
        self._chunk, self._at = item, 0
        return True

    def _read_some(self, n: int) -> bytes:
        """Up to n bytes (at most one chunk's worth); b"" at the end."""
        if self._at >= len(self._chunk) and not self._next_chunk():
            return b""
        chunk, at = self._chunk, self._at
        if at == 0 and n >= len(chunk):
            self._at = len(chunk)
            return chunk  # the common case: hand the chunk over, no copy
        data = chunk[at : at + n]
        self._at = at + len(data)
        return data

    def _skip_some(self, n: int) -> int:
        left = len(self._chunk) - self._at
        if left <= 0:
            if not self._next_chunk():
                return 0
            left = len(self._chunk)
        step = min(left, n)
        self._at += step
        return step

    def _join(self) -> None:
        """Stop the producing thread and wait for it (after `_stop` was set)."""
        if self._thread is not None:
            while self._thread.is_alive():
                try:  # unblock a producer waiting on a full queue
                    while True:
                        self._queue.get_nowait()
                except queue.Empty:
                    pass
                self._thread.join(0.01)


class ReadAhead(ChunkQueue):
    """`raw` read by a thread in CHUNK reads; its end (b"") only after the inner stream's own end,
    where it checks its digest (a mismatch reaches the reader as the error it is)."""

    def __init__(self, raw) -> None:
        super().__init__(DEPTH)
        self.raw = raw
        self._lock = threading.Lock()  # the decompressing thread reads through dup(), the walker may drain

    def _produce(self) -> None:
        # a download hands over each piece as received (RegistryBlobStream.read_chunk): no copy in and out
        read = getattr(self.raw, "read_chunk", None) or (lambda: self.raw.read(CHUNK))
        while True:
            data = read()
            if not self._put(data) or not data:
                return

    def _read_some(self, n: int) -> bytes:
        with self._lock:
            return super()._read_some(n)

    def _skip_some(self, n: int) -> int:
        with self._lock:
            return super()._skip_some(n)

    @property
    def verified(self) -> bool:
        return bool(getattr(self.raw, "verified", False))

    @property
    def closed(self) -> bool:
        return self._stop

    def dup(self) -> "SharedHandle":
        return SharedHandle(self)

    def close(self) -> None:
        self._stop = True
        self.raw.close()  # first: a reading thread blocked on the network wakes up
        self._join()


class SharedHandle(Reader):
    """Another reader's handle on a stream (for the decompressing thread): reads go to it (which
    serialises them), closing the handle closes nothing."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def _read_some(self, n: int) -> bytes:
        return self._stream.read(n)
