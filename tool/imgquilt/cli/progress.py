"""Byte progress bars on stderr, for people only: registry downloads and layer reads, while they run.

Shown only when stderr is a terminal and no --json document is asked for, so nothing ever lands in a
pipe, a log file or a JSON document. The bars are transient: they go before any output is printed.
"""
from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from rich.progress import Progress

_lock = threading.Lock()
_progress: Progress | None = None


def wanted(json_output: bool) -> bool:
    return sys.stderr.isatty() and not json_output


def _bars() -> Progress:
    global _progress
    with _lock:
        if _progress is None:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            from .common import err

            _progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=err(), transient=True)
            _progress.start()
        return _progress


def task(description: str, total: int | None) -> Callable[[int], None]:
    """A bar; the returned callback advances it by a byte count. Full bars of known size go away."""
    bars = _bars()
    tid = bars.add_task(description, total=total)
    bars.refresh()  # shown at once, even when the download is over before the next tick
    done = [0]

    def advance(n: int) -> None:
        if not n:
            return
        done[0] += n
        if total is not None and done[0] >= total:
            bars.remove_task(tid)
        else:
            bars.update(tid, completed=done[0])

    return advance


def layer_reads(source_label: str) -> Callable[[int, int, str], Callable[[int], None]]:
    """An ImageSource.on_layer: a bar per layer read (its tar bytes; the previous one of this source ends)."""
    last: list[Callable[[], None]] = []

    def on_layer(position: int, count: int, digest: str) -> Callable[[int], None]:
        for end in last:
            end()
        last.clear()
        bars = _bars()
        tid = bars.add_task(f"{source_label} layer {position + 1}/{count} {digest[:19]}", total=None)
        bars.refresh()
        last.append(lambda: bars.remove_task(tid))
        return lambda n: bars.advance(tid, n)

    return on_layer


def download(what: str, total: int) -> Callable[[int], None]:
    """registry.on_download: a bar per blob download."""
    return task(f"download {what[:26]}", total)


def stop() -> None:
    """Take the bars off the screen (before output is printed)."""
    global _progress
    with _lock:
        if _progress is not None:
            _progress.stop()
            _progress = None
