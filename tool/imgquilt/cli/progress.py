"""Progress of image reads on stderr: layer reads and registry downloads, while they run.

`--progress=auto` (the default; IMGQUILT_PROGRESS sets another): on a terminal, one line per layer
being read (the layers read at once are shown at once: a scan ahead reads the next layer down while
the current one is read), each with its bar, bytes of the total the manifest gives, rate and time
left, redrawn five times a second and cut to the terminal's width (80 columns when it is not known),
so a line never wraps; the lines go before any output is printed. Off a terminal (a pipe, a CI log):
one plain line when a layer read has taken a second and is still going, one more every ~5 s while it
goes on, and one when it is done (a read faster than a second prints nothing: a warm cache stays
quiet). `--progress=plain`: those lines for every layer, at once. `--progress=never` (or `--quiet`):
nothing. With --json, `auto` draws no bars on a terminal (the document may share it); lines off one
go to stderr, apart from the document on stdout.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

from ..errors import shown

MODES = ("never", "auto", "plain")
TICK = 0.2  # seconds between redraws on a terminal
FIRST_LINE_AFTER = 1.0  # off a terminal (auto): a layer read this long gets its lines
EVERY = 5.0  # off a terminal: a line this often while a read goes on
DEFAULT_WIDTH = 80


def mode(asked: str | None, json_output: bool, stream: TextIO | None = None) -> str:
    """What to show: "bars" (a terminal), "lines" (plain), "delayed" (plain, for reads past a second), "none"."""
    from ..settings import current

    asked = asked or current().progress or "auto"  # --progress, --quiet, else IMGQUILT_PROGRESS
    stream = stream or sys.stderr
    if asked not in MODES:
        from ..errors import UsageError

        raise UsageError(f"--progress takes never, auto or plain, not {asked!r}.")
    if asked == "never":
        return "none"
    if asked == "plain":
        return "lines"
    if stream.isatty():
        return "none" if json_output else "bars"
    return "delayed"


def terminal_width(stream: TextIO) -> int:
    """The terminal's own width (the kernel's, which follows a resize), else COLUMNS, else 80."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or DEFAULT_WIDTH
    except (OSError, ValueError, AttributeError):
        pass
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and int(cols) > 0 else DEFAULT_WIDTH


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


@dataclass
class Task:
    """One layer being read (or one download)."""

    key: str
    label: str
    total: int | None
    started: float
    done: int = 0
    finished: float | None = None
    said: float | None = None  # when its last plain line was written
    announced: bool = False


@dataclass
class Board:
    """Every task, drawn on a terminal or written as plain lines; thread-safe (scans ahead report from threads)."""

    style: str  # "bars", "lines", "delayed"
    out: TextIO = field(default_factory=lambda: sys.stderr)
    clock: Callable[[], float] = time.monotonic
    width: Callable[[], int] = field(default=lambda: terminal_width(sys.stderr))
    tasks: dict[str, Task] = field(default_factory=dict)
    drawn: int = 0  # lines on the terminal now
    lock: threading.RLock = field(default_factory=threading.RLock)
    ticker: threading.Thread | None = None
    stopping: threading.Event = field(default_factory=threading.Event)

    # --- tasks ---------------------------------------------------------------------------------
    def start(self, key: str, label: str, total: int | None) -> Task:
        label = shown(label)  # an image reference from targets.lock, a digest from a registry: never an escape
        with self.lock:
            task = self.tasks.get(key)
            if task is None or task.finished is not None:
                task = self.tasks[key] = Task(key, label, total, self.clock())
            elif task.total is None:
                task.total = total
            if self.style == "lines":
                self._line(task, "reading")
            elif self.style == "bars":
                self.draw()  # at once: a read may be over before the next tick
            self._ensure_ticker()
            return task

    def advance(self, task: Task, n: int) -> None:
        with self.lock:
            task.done += n

    def finish(self, task: Task) -> None:
        with self.lock:
            if task.finished is not None:
                return
            task.finished = self.clock()
            if self.style != "bars" and task.announced:
                self._line(task, "read")
            if self.style == "bars":
                self.tasks.pop(task.key, None)
                self.draw()

    # --- plain lines ---------------------------------------------------------------------------
    def _line(self, task: Task, verb: str) -> None:
        now = self.clock()
        total = f" of {_size(task.total)}" if task.total else ""
        if verb == "reading" and not task.announced:
            text = f"imgquilt: reading {task.label}{total}"
        elif verb == "read":
            text = f"imgquilt: read {task.label}: {_size(task.done if not task.total else max(task.done, task.total))} in {now - task.started:.1f} s"
        else:
            pct = f" ({100 * task.done // task.total}%)" if task.total else ""
            text = f"imgquilt: reading {task.label}: {_size(task.done)}{total}{pct}, {now - task.started:.0f} s"
        task.announced, task.said = True, now
        self.out.write(text + "\n")
        self.out.flush()

    def tick(self) -> None:
        """What the clock says is due: a redraw on a terminal; the delayed and periodic plain lines."""
        with self.lock:
            if self.style == "bars":
                self.draw()
                return
            now = self.clock()
            for task in list(self.tasks.values()):
                if task.finished is not None:
                    continue
                if not task.announced and (self.style == "lines" or now - task.started >= FIRST_LINE_AFTER):
                    self._line(task, "reading")
                elif task.announced and task.said is not None and now - task.said >= EVERY:
                    self._line(task, "progress")

    # --- the terminal --------------------------------------------------------------------------
    def render(self, task: Task, width: int) -> str:
        """One line, never longer than `width` - 1 (a terminal wraps a line that fills its last column)."""
        elapsed = max(self.clock() - task.started, 1e-6)
        rate = task.done / elapsed
        if task.total:
            amount = f"{_size(min(task.done, task.total))}/{_size(task.total)}"
            left = f"{_duration((task.total - task.done) / rate)} left" if rate > 0 and task.done < task.total else ""
        else:
            amount, left = _size(task.done), ""
        tail = f" {amount} {_size(rate)}/s {left}".rstrip()
        room = width - 1 - len(tail)
        label = task.label
        bar_room = room - len(label) - 2
        if bar_room < 10:  # the label gives way first, the bar next
            label = label[: max(room - 12, 0)]
            if len(label) < len(task.label):
                label = label[:-1] + "…" if label else ""
            bar_room = room - len(label) - 2
        bar = ""
        if bar_room >= 3:
            fill = int(bar_room * min(task.done / task.total, 1.0)) if task.total else 0
            bar = "━" * fill + "╺" * (bar_room - fill) if task.total else "╺" * bar_room
        line = f"{label} {bar}{tail}" if bar else f"{label}{tail}"
        return line[: max(width - 1, 0)]

    def draw(self) -> None:
        with self.lock:
            width = max(self.width(), 20)
            lines = [self.render(t, width) for t in self.tasks.values() if t.finished is None]
            up = f"\x1b[{self.drawn}F" if self.drawn else ""
            text = up + "".join(f"\x1b[2K{ln}\n" for ln in lines) + ("\x1b[J" if len(lines) < self.drawn else "")
            self.drawn = len(lines)
            self.out.write(text)
            self.out.flush()

    def clear(self) -> None:
        with self.lock:
            if self.style == "bars" and self.drawn:
                self.out.write(f"\x1b[{self.drawn}F\x1b[J")
                self.out.flush()
            self.drawn = 0
            self.tasks.clear()

    def _ensure_ticker(self) -> None:
        if self.ticker is not None:
            return
        self.ticker = threading.Thread(target=self._run, name="imgquilt-progress", daemon=True)
        self.ticker.start()

    def _run(self) -> None:
        while not self.stopping.wait(TICK if self.style == "bars" else 0.5):
            self.tick()

    def stop(self) -> None:
        self.stopping.set()
        if self.ticker is not None and self.ticker is not threading.current_thread():
            self.ticker.join(timeout=2)
        self.clear()


_lock = threading.Lock()
_board: Board | None = None


def board(style: str) -> Board:
    global _board
    with _lock:
        if _board is None:
            _board = Board(style)
        return _board


class _Sink:
    """The callback a layer read or a download is given: stored bytes as they pass, close() at the end."""

    def __init__(self, b: Board, task: Task) -> None:
        self._board, self._task = b, task

    def __call__(self, n: int) -> None:
        if n:
            self._board.advance(self._task, n)
            if self._task.total is not None and self._task.done >= self._task.total:
                self.close()

    def close(self) -> None:
        self._board.finish(self._task)


class LayerProgress:
    """`progress=` for the API's image readers: callable as the API documents it (index, count, digest;
    only that it started), and sized() for the CLI's bars, which the image source prefers."""

    def __init__(self, style: str, label: str) -> None:
        self.style, self.label = style, label

    def __call__(self, position: int, count: int, digest: str) -> None:
        return None

    def sized(self, position: int, count: int, digest: str, size: int | None) -> _Sink:
        b = board(self.style)
        name = f"{self.label} layer {position + 1}/{count} {digest[:19]}".strip()
        return _Sink(b, b.start(digest, name, size))

    def download(self, what: str, total: int) -> _Sink:
        """A registry download (image.sources.OnDownload) is its layer's task: one line per layer."""
        return download(self.style)(what, total)


def download(style: str) -> Callable[[str, int], _Sink]:
    """image.sources.OnDownload: a download is its layer's task (one line per layer, whichever starts it)."""

    def start(what: str, total: int) -> _Sink:
        b = board(style)
        key = what.split()[-1]
        return _Sink(b, b.start(key, f"download {what[:26]}", total))

    return start


def stop() -> None:
    """Take the bars off the screen (before output is printed)."""
    global _board
    with _lock:
        if _board is not None:
            _board.stop()
            _board = None
