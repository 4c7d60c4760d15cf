"""The Python checks' pure steps run on the machine's cores: forked worker processes.

`mapped(fn, items, size)` is `[fn(x) for x in items]`, the same values in the same order, computed by
forked workers when there is enough work to pay for them (`size`: the bytes of source the items parse,
at least WORKERS_MIN_BYTES) and IMGQUILT_PYCHECK_WORKERS allows more than one. Only steps that are
functions of bytes go there (parsing, a module's interface, a file's items): a worker reads no image,
writes nothing and keeps nothing; the parent keeps every cache row and every lookup.

How it stays honest:
- the items are inherited at the fork (nothing of them is sent); each worker asks for the next chunk
  of indexes and sends back the pickled values, so a loaded core takes fewer chunks;
- a chunk whose worker fails (an exception, a crash, killed) is computed again here, so the error or
  the value is exactly the serial path's; a worker that cannot be started (no fork, no memory, no
  processes left) leaves its share to this process;
- every worker is killed and reaped before `mapped` returns or raises (KeyboardInterrupt included), and
  a worker whose parent is gone exits (its pipes close).
"""
from __future__ import annotations

import os
import pickle
import selectors
import signal
import struct
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Below this much source the serial path is as fast: measured here (docs/performance.md), a pool of two
# workers costs 10-15 ms to fork, answer and reap (load 8, with or without 1 GB held), and parsing a
# module and reading its names and items costs ~0.5 ms per KiB (13.9 s for 29 MB of vLLM sources):
# break-even near 64 KiB on two idle cores; 256 KiB (~0.12 s of work) leaves room for loaded ones.
WORKERS_MIN_BYTES = 256 * 1024
CHUNKS_PER_WORKER = 8  # chunks handed out per worker: small enough to even out a loaded core

_HEAD = struct.Struct("!I")


def workers_wanted() -> int:
    """IMGQUILT_PYCHECK_WORKERS (default, or anything but a whole number of at least 1: the number of
    cores); 1 keeps the checks in this process."""
    from ..settings import current

    raw = (current().pycheck_workers or "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return os.cpu_count() or 1


def worth_workers(size: int) -> bool:
    """Whether `size` bytes of source to parse pay for worker processes here."""
    return size >= WORKERS_MIN_BYTES and hasattr(os, "fork") and workers_wanted() >= 2


def mapped(fn: Callable[[T], R], items: Sequence[T], size: int, *, workers: int | None = None,
           min_bytes: int = WORKERS_MIN_BYTES) -> list[R]:
    """[fn(x) for x in items], in forked workers when `size` bytes of source are worth it."""
    n = min(workers if workers is not None else workers_wanted(), len(items))
    if n < 2 or size < min_bytes or not hasattr(os, "fork"):
        return [fn(x) for x in items]
    return _Pool(fn, items, n).run()


class _Pool:
    def __init__(self, fn: Callable[[Any], Any], items: Sequence[Any], n: int) -> None:
        self.fn, self.items, self.n = fn, items, n
        step = max(1, len(items) // (n * CHUNKS_PER_WORKER))
        self.chunks = [range(i, min(i + step, len(items))) for i in range(0, len(items), step)]
        self.next = 0  # the next chunk to hand out
        self.done: dict[int, Any] = {}
        self.kids: dict[int, tuple[int, int, int]] = {}  # pid -> (task write end, result read end, chunk or -1)
        self.buffers: dict[int, bytearray] = {}
        self.open_fds: set[int] = set()  # the parent's pipe ends not closed yet

    def run(self) -> list[Any]:
        sel = selectors.DefaultSelector()
        try:
            values = self._run(sel)
        except BaseException:
            self._reap_all(sel)  # a second ^C while reaping is absorbed: the first one is raised
            raise
        interrupted = self._reap_all(sel)
        if interrupted is not None:
            raise interrupted
        return values

    def _run(self, sel: selectors.BaseSelector) -> list[Any]:
        for _ in range(self.n):
            if not self._start(sel):
                break
        while self.kids:
            for key, _ in sel.select():
                if key.data in self.kids:  # not ended by an earlier key of this round
                    self._read(sel, key.data)
        # what no worker did (none started, or one failed): here, as the serial path would
        for chunk in self.chunks:
            for i in chunk:
                if i not in self.done:
                    self.done[i] = self.fn(self.items[i])
        return [self.done[i] for i in range(len(self.items))]

    def _reap_all(self, sel: selectors.BaseSelector) -> KeyboardInterrupt | None:
        """Kill and reap every worker still there, whatever interrupts this; the interrupt it absorbed."""
        interrupted: KeyboardInterrupt | None = None
        while self.kids:
            try:
                for pid in list(self.kids):
                    try:
                        os.kill(pid, signal.SIGKILL)  # all of them first: none goes on working meanwhile
                    except ProcessLookupError:  # pragma: no cover - gone already
                        pass
                for pid in list(self.kids):
                    self._end(sel, pid, kill=True)
            except KeyboardInterrupt as exc:  # the next round takes up where this one stopped
                interrupted = exc
        sel.close()
        return interrupted

    def _start(self, sel: selectors.BaseSelector) -> bool:
        """Fork one worker and hand it a chunk; False when it cannot be started."""
        if self.next >= len(self.chunks):
            return False
        try:
            task_r, task_w = os.pipe()
        except OSError:
            return False
        try:
            res_r, res_w = os.pipe()
        except OSError:
            os.close(task_r)
            os.close(task_w)
            return False
        try:
            pid = os.fork()
        except OSError:  # no memory or no processes left: this process does the rest
            for fd in (task_r, task_w, res_r, res_w):
                os.close(fd)
            return False
        if pid:
            self.kids[pid] = (task_w, res_r, -1)  # first: from here on, `run`'s cleanup kills and reaps it
            self.open_fds.update((task_w, res_r))
        else:  # the worker: nothing of the parent's cleanup runs here
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)  # a ^C ends it at once; the parent reaps it
                os.close(task_w)
                os.close(res_r)
                for fd in self.open_fds:  # the other workers' ends (its own are not there): their EOF is theirs
                    os.close(fd)
                _serve(self.fn, self.items, self.chunks, task_r, res_w)
                code = 0
            finally:
                os._exit(code)
        os.close(task_r)
        os.close(res_w)
        self.buffers[pid] = bytearray()
        sel.register(res_r, selectors.EVENT_READ, pid)
        self._hand(sel, pid)
        return True

    def _hand(self, sel: selectors.BaseSelector, pid: int) -> None:
        """The next chunk to `pid`, or its end when there is none."""
        task_w, res_r, _ = self.kids[pid]
        if self.next >= len(self.chunks):
            self._end(sel, pid, kill=False)
            return
        c = self.next
        self.next += 1
        try:
            os.write(task_w, _HEAD.pack(c))
        except OSError:  # it is gone: its chunk is done here at the end
            self._end(sel, pid, kill=True)
            return
        self.kids[pid] = (task_w, res_r, c)

    def _read(self, sel: selectors.BaseSelector, pid: int) -> None:
        task_w, res_r, c = self.kids[pid]
        try:
            got = os.read(res_r, 1 << 20)
        except OSError:
            got = b""
        if not got:  # it ended or died before answering: its chunk is done here at the end
            self._end(sel, pid, kill=True)
            return
        buf = self.buffers[pid]
        buf += got
        if len(buf) < _HEAD.size:
            return
        (length,) = _HEAD.unpack_from(buf)
        if len(buf) < _HEAD.size + length:
            return
        payload = bytes(buf[_HEAD.size: _HEAD.size + length])
        del buf[: _HEAD.size + length]
        try:
            ok, values = pickle.loads(payload)
        except Exception:  # noqa: BLE001 - a garbled answer: the chunk is done here
            ok, values = False, None
        if ok and isinstance(values, list) and len(values) == len(self.chunks[c]):
            for i, v in zip(self.chunks[c], values):
                self.done[i] = v
            self._hand(sel, pid)
        else:  # it failed on this chunk: the same work here gives the serial path's value or error
            self._end(sel, pid, kill=True)

    def _end(self, sel: selectors.BaseSelector, pid: int, *, kill: bool) -> None:
        """Close `pid`'s pipes, kill it if asked, reap it; interrupted, a second call finishes the job
        (each pipe end is closed at most once, the worker is forgotten only once reaped)."""
        task_w, res_r, _ = self.kids[pid]
        if res_r in self.open_fds:
            try:
                sel.unregister(res_r)
            except (KeyError, ValueError):  # never registered
                pass
        for fd in (task_w, res_r):  # a waiting worker reads EOF and exits
            if fd in self.open_fds:
                self.open_fds.discard(fd)
                os.close(fd)
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover - gone already
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # reaped by an interrupted call before
            pass
        self.kids.pop(pid, None)
        self.buffers.pop(pid, None)


def _serve(fn: Callable[[Any], Any], items: Sequence[Any], chunks: list[range], task_r: int, res_w: int) -> None:
    """The worker's loop: read a chunk's number, answer its values, until the parent closes the pipe."""
    while True:
        head = _read_exactly(task_r, _HEAD.size)
        if head is None:
            return
        (c,) = _HEAD.unpack(head)
        try:
            payload = pickle.dumps((True, [fn(items[i]) for i in chunks[c]]), pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - the parent computes the chunk again and meets the error itself
            payload = pickle.dumps((False, None))
        data = memoryview(_HEAD.pack(len(payload)) + payload)
        while data:
            data = data[os.write(res_w, data):]


def _read_exactly(fd: int, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        got = os.read(fd, n - len(out))
        if not got:
            return None
        out += got
    return out
