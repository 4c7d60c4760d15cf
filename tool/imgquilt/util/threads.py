"""Work done ahead of need yields the CPU to the work that is needed now.

A cold read scans the next layers down ahead, on threads of their own, while the calling thread reads
the layer it needs (image.image_source). On a 2-core machine the decompression of those layers and
the needed one share the cores evenly unless told otherwise, so the needed read, the one the command
waits on, gets about half of what it could. A scan ahead marks its thread (`mark_ahead`), and the
thread that decompresses its layer (image.layers.compression, started from it) raises its own
niceness (`yield_cpu`): the needed read's decompression keeps a core of its own, the reads ahead take
what is left, and all of it once the needed read is done.

Only the decompression yields, not the threads that walk the tar headers or receive a download:
those hold Python's GIL for most of their work, and a thread holding the GIL that the scheduler
leaves waiting stalls the needed read too (measured: a walked zstd:chunked layer from a registry,
4.95 s against 5.1-5.3 s with the whole scan niced; docs/performance.md).

Linux only: there `setpriority(PRIO_PROCESS, tid)` names one thread. Elsewhere the same call names a
process (another one, by that number), so nothing is done.
"""
from __future__ import annotations

import os
import sys
import threading

AHEAD_NICENESS = 10  # CFS weight 110 against 1024 at nice 0: the needed read keeps ~9/10 of a shared core


def yield_cpu(steps: int = AHEAD_NICENESS) -> bool:
    """Lower the calling thread's scheduling priority by `steps` of niceness (at most to 19). Whether
    it was done. Best effort: refused or unsupported, the thread runs as it was."""
    now = niceness()
    if now is None or steps <= 0:
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, now + steps))
    except OSError:
        return False
    return True


def niceness() -> int | None:
    """The calling thread's niceness (None where a thread's cannot be read: not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (OSError, AttributeError):
        return None


_local = threading.local()


def mark_ahead() -> None:
    """Say that the calling thread works ahead of need (a layer read ahead): `is_ahead()` in it is True."""
    _local.ahead = True


def is_ahead() -> bool:
    """Whether the calling thread was marked by `mark_ahead`."""
    return bool(getattr(_local, "ahead", False))
