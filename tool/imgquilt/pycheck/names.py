"""Python checks on patched files: a patch must not add a syntax error or an undefined name.

Only errors that the base did not have count, so a stock file with quirks does not block a queue.
Undefined names come from pyflakes when it is installed; syntax errors from compile() always.

A series is checked at the cost of one pass: each file's final state once (its base only when the
final state has errors at all), and each file's findings memoized by (check_key, checker version)
through a `Memo` the caller provides (the engine writes nothing itself). Building pyflakes' AST is
most of the cost, so a `Screen` the caller provides (ruff, in another process) may first say which
contents can have an undefined name at all; only those go through pyflakes, the rest cost a
compile(). The findings are pyflakes' either way: the screen only skips files it finds clean.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import warnings
from typing import Callable, Iterable, Protocol

from ..fs.content import Data, held, sha256_of
from ..util.gcpause import collector_paused

PARALLEL_MIN = 8  # fewer unknown files than this are not worth starting worker processes for
FORK_MIN_BYTES = 256 * 1024  # less source than this compiles faster than a fork


class Screen(Protocol):
    """A fast first look for undefined names, run beside compile(): `start` returns a call that
    gives the indexes of the items that may have one (None: the screen failed, check them all)."""

    version: str

    def start(self, items: list[tuple[bytes, str]]) -> Callable[[], set[int] | None]: ...


class Memo(Protocol):
    """Findings by check_key (the checker version is the memo's business). Asked once for all the
    keys of a check, and given all its new findings at once."""

    def get_many(self, keys: Iterable[str]) -> dict[str, list[str]]: ...

    def put_many(self, entries: dict[str, list[str]]) -> None: ...


def checker_version(screen: Screen | None = None) -> str:
    """What the findings depend on: the Python grammar, the pyflakes release and the screen's."""
    try:
        from pyflakes import __version__ as flakes
    except ImportError:
        flakes = "none"
    screened = f"-{screen.version}" if screen is not None else ""
    return f"py{sys.version_info[0]}.{sys.version_info[1]}-pyflakes{flakes}{screened}-2"


def check_key(source: Data, filename: str) -> str:
    """What the findings of a file depend on besides the checker: its bytes and its name (pyflakes
    defines `__path__` only in an `__init__.py`, and names the file in what it reports)."""
    data = held(source, filename)  # a large .py file (spooled): its bytes are checked whole, within IMGQUILT_IN_MEMORY_MAX
    # over the bytes' sha256, which the apply has already taken of these very bytes (fs.content
    # remembers it by identity): 1000 patched files are not hashed a third time for their keys
    return hashlib.sha256(filename.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(sha256_of(data))).hexdigest()


def syntax_errors(source: bytes, filename: str) -> set[str]:
    """What compile() refuses in `source` (the whole check when pyflakes is absent or the screen finds it clean)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, filename, "exec", dont_inherit=True)
    except _REFUSED as exc:
        return _refusal(exc)
    return set()


# what compile() raises for a source it refuses; MemoryError/RecursionError: nesting CPython cannot compile
_REFUSED = (SyntaxError, ValueError, MemoryError, RecursionError)


def _refusal(exc: BaseException) -> set[str]:
    """compile()'s refusal of a file as a finding."""
    if isinstance(exc, (MemoryError, RecursionError)):
        return {f"SyntaxError: too deeply nested for the Python compiler ({type(exc).__name__})"}
    return {f"SyntaxError: {getattr(exc, 'msg', exc)}"}


def python_errors(source: bytes, filename: str) -> set[str]:
    """Problems in `source`, as stable strings without line numbers (so base and result compare)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = compile(source, filename, "exec", flags=0x400, dont_inherit=True)  # ast.PyCF_ONLY_AST
            compile(tree, filename, "exec", dont_inherit=True)  # what the AST alone misses (e.g. 'return' outside function)
    except _REFUSED as exc:
        return _refusal(exc)
    try:
        from pyflakes import checker, messages
    except ImportError:
        return set()
    try:
        w = checker.Checker(tree, filename=filename)
    except (MemoryError, RecursionError):
        return set()  # compiled, yet too deep for pyflakes: no undefined-name check for this file
    kinds = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)
    return {f"{type(m).__name__}: {m.message % m.message_args}" for m in w.messages if isinstance(m, kinds)}


def located(source: Data, path: str, findings: Iterable[str]) -> list[str]:
    """`path:LINE:COL: finding` for each finding in `source` (every place it occurs, 1-based columns).

    Findings are kept without positions (base and result compare, the cache is by content), so the
    places are looked up again here, for the few findings a refusal names.
    """
    source = held(source, path)
    want = set(findings)
    places: list[tuple[int, int, str]] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = compile(source, path, "exec", flags=0x400, dont_inherit=True)  # ast.PyCF_ONLY_AST
            compile(tree, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        tree = None
        places.append((exc.lineno or 0, exc.offset or 0, f"SyntaxError: {exc.msg}"))
    except _REFUSED:
        tree = None
    if tree is not None:
        try:
            from pyflakes import checker

            for m in checker.Checker(tree, filename=path).messages:
                places.append((m.lineno, m.col + 1, f"{type(m).__name__}: {m.message % m.message_args}"))
        except (ImportError, MemoryError, RecursionError):
            pass
    out = [f"{path}:{line}:{col}: {text}" for line, col, text in sorted(places) if text in want and line]
    found = {text for line, _, text in places if text in want and line}
    return out + [f"{path}: {text}" for text in sorted(want - found)]


def new_python_errors(base: bytes | None, result: bytes, filename: str) -> list[str]:
    """Errors in `result` that `base` did not have (every error, for a new file)."""
    before = python_errors(base, filename) if base is not None else set()
    return sorted(python_errors(result, filename) - before)


def _check_one(item: tuple[bytes, str]) -> list[str]:
    return sorted(python_errors(*item))


def errors_of_many(contents: Iterable[tuple[Data, str]], memo: Memo | None = None,
                   screen: Screen | None = None) -> dict[str, set[str]]:
    """Findings of each (content, filename), keyed by check_key; each (content, name) checked once."""
    return start_errors_of_many(contents, memo, screen).result()


class PendingErrors:
    """A check under way: with a screen, compile() runs in forked children and ruff in its own
    process, so the caller may do other work (write temp files) until `result()`."""

    def __init__(self, items: dict[str, tuple[bytes, str]], found: dict[str, set[str]], memo: Memo | None,
                 screen: Screen | None) -> None:
        self.found, self.memo = found, memo
        self.keys = [k for k in items if k not in found]
        self.todo = [items[k] for k in self.keys]
        # (compile() of every item, the screen's verdict), both begun now; None: no screen, pyflakes reads all
        self._screening = (_start_compile(self.todo), screen.start(self.todo)) if screen is not None and self.todo else None
        self._done: dict[str, set[str]] | None = None

    def result(self) -> dict[str, set[str]]:
        if self._done is not None:
            return self._done
        with collector_paused():  # pyflakes' trees and scopes: collections would walk them and find nothing
            return self._result()

    def _result(self) -> dict[str, set[str]]:
        if self._screening is not None:
            compiling, flagged_by_screen = self._screening
            syntax = compiling.result()
            flagged = flagged_by_screen()
            deep = [i for i, errs in enumerate(syntax) if not errs and (flagged is None or i in flagged)]
            for i, errs in zip(deep, _checked([self.todo[i] for i in deep])):
                syntax[i] = errs
            results = syntax
        else:
            results = _checked(self.todo)
        for key, errs in zip(self.keys, results):
            self.found[key] = set(errs)
        if self.memo is not None and self.keys:
            self.memo.put_many(dict(zip(self.keys, results)))
        self._done = self.found
        return self.found

    def close(self) -> None:
        """Wait for the helpers without using their answer (the caller gave up)."""
        if self._done is None and self._screening is not None:
            compiling, flagged_by_screen = self._screening
            compiling.cancel()
            flagged_by_screen()
            self._done = self.found


def start_errors_of_many(contents: Iterable[tuple[Data, str]], memo: Memo | None = None,
                         screen: Screen | None = None) -> PendingErrors:
    """errors_of_many, begun: the memo is asked now, the rest runs until `result()`."""
    items: dict[str, tuple[bytes, str]] = {}
    for data, name in contents:
        data = held(data, name)
        items.setdefault(check_key(data, name), (data, name))
    known = memo.get_many(items) if memo is not None and items else {}
    return PendingErrors(items, {key: set(errs) for key, errs in known.items()}, memo, screen)


def _checked(items: list[tuple[bytes, str]]) -> list[list[str]]:
    """The full check of every item, in worker processes (workers.py) when there are enough."""
    from .workers import mapped, workers_wanted

    many = len(items) >= PARALLEL_MIN
    return mapped(_check_one, items, sum(len(d) for d, _ in items), workers=min(workers_wanted(), 4) if many else 1, min_bytes=0)


class _Compiling:
    """syntax_errors of every item, begun (see _start_compile)."""

    def __init__(self, items: list[tuple[bytes, str]], child: tuple[int, int] | None) -> None:
        self.items = items
        self.child = child  # (pid, read end of its pipe): it reports "[index, errors]" lines in index order
        self.done: dict[int, list[str]] = {}
        self._buf = b""

    def result(self) -> list[list[str]]:
        """Take what the child has done, and do the rest from the last item down until the two meet."""
        n = len(self.items)
        down = n - 1
        while len(self.done) < n:
            if self.child is not None:
                self._take()
            while down >= 0 and down in self.done:
                down -= 1
            if down < 0:
                break
            self.done[down] = sorted(syntax_errors(*self.items[down]))
        self.cancel()
        return [self.done[i] for i in range(n)]

    def _take(self) -> None:
        """Read the child's reports written so far (never waits)."""
        assert self.child is not None
        pid, fd = self.child
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:  # the child is done (or failed): the rest is ours
                self._stop()
                return
            lines = (self._buf + chunk).split(b"\n")
            self._buf = lines.pop()
            for line in lines:
                got = _line(line, len(self.items))
                if got is not None:
                    self.done.setdefault(got[0], got[1])

    def cancel(self) -> None:
        """Stop the child (its remaining work is not needed) and reap it."""
        if self.child is not None:
            try:
                os.kill(self.child[0], signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover - reaped already
                pass
            self._stop()

    def _stop(self) -> None:
        if self.child is not None:
            pid, fd = self.child
            self.child = None
            os.close(fd)
            os.waitpid(pid, 0)


def _line(raw: bytes, count: int) -> tuple[int, list[str]] | None:
    """One "[index, errors]" report of the child, or None if it is not one."""
    try:
        i, errs = json.loads(raw)
    except (ValueError, TypeError):
        return None
    if isinstance(i, int) and 0 <= i < count and isinstance(errs, list) and all(isinstance(e, str) for e in errs):
        return i, errs
    return None


def _start_compile(items: list[tuple[bytes, str]]) -> _Compiling:
    """syntax_errors of every item, begun. With enough source a forked child compiles the items in
    order while this process goes on (an in-place apply stages its files meanwhile): compile() holds
    the GIL, and it is most of what a screened check costs. When the answer is asked for, this
    process compiles from the last item down until it meets the child, so the two cores finish the
    rest together. (Measured on 2 vCPUs: a child per core from the start costs 40% more CPU and
    slows the staging; one child overlaps it.) With little source it is all done here, when asked."""
    total = sum(len(d) for d, _ in items)
    if total < FORK_MIN_BYTES or (os.cpu_count() or 1) < 2 or not hasattr(os, "fork"):
        return _Compiling(items, None)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no cleanup of the parent's state runs here
        code = 1
        try:
            os.close(r)
            with os.fdopen(w, "wb", buffering=0) as f:
                for i, item in enumerate(items):
                    f.write(json.dumps([i, sorted(syntax_errors(*item))]).encode() + b"\n")
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    os.set_blocking(r, False)
    return _Compiling(items, (pid, r))
