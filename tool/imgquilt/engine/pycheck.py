"""Python checks on patched files: a patch must not add a syntax error or an undefined name.

Only errors that the base did not have count, so a stock file with quirks does not block a queue.
Undefined names come from pyflakes when it is installed; syntax errors from compile() always.

A series is checked at the cost of one pass: each file's final state once (its base only when the
final state has errors at all), and each content's findings memoized by (sha256, checker version)
through a `Memo` the caller provides (the engine writes nothing itself). Building pyflakes' AST is
most of the cost, so a `Screen` the caller provides (ruff, in another process) may first say which
contents can have an undefined name at all; only those go through pyflakes, the rest cost a
compile(). The findings are pyflakes' either way: the screen only skips files it finds clean.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from typing import Callable, Iterable, Protocol

PARALLEL_MIN = 8  # fewer unknown files than this are not worth starting worker processes for
FORK_MIN_BYTES = 256 * 1024  # less source than this compiles faster than a fork


class Screen(Protocol):
    """A fast first look for undefined names, run beside compile(): `start` returns a call that
    gives the indexes of the items that may have one (None: the screen failed, check them all)."""

    version: str

    def start(self, items: list[tuple[bytes, str]]) -> Callable[[], set[int] | None]: ...


class Memo(Protocol):
    """Findings by content: a key is the content's sha256 hex (the checker version is the memo's
    business). Asked once for all the keys of a check, and given all its new findings at once."""

    def get_many(self, keys: Iterable[str]) -> dict[str, list[str]]: ...

    def put_many(self, entries: dict[str, list[str]]) -> None: ...


def checker_version(screen: Screen | None = None) -> str:
    """What the findings depend on: the Python grammar, the pyflakes release and the screen's."""
    try:
        from pyflakes import __version__ as flakes
    except ImportError:
        flakes = "none"
    screened = f"-{screen.version}" if screen is not None else ""
    return f"py{sys.version_info[0]}.{sys.version_info[1]}-pyflakes{flakes}{screened}-1"


def syntax_errors(source: bytes, filename: str) -> set[str]:
    """What compile() refuses in `source` (the whole check when pyflakes is absent or the screen finds it clean)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return {f"SyntaxError: {getattr(exc, 'msg', exc)}"}
    except (MemoryError, RecursionError) as exc:  # nesting CPython cannot compile: an error of this file
        return {f"SyntaxError: too deeply nested for the Python compiler ({type(exc).__name__})"}
    return set()


def python_errors(source: bytes, filename: str) -> set[str]:
    """Problems in `source`, as stable strings without line numbers (so base and result compare)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = compile(source, filename, "exec", flags=0x400, dont_inherit=True)  # ast.PyCF_ONLY_AST
            compile(tree, filename, "exec", dont_inherit=True)  # what the AST alone misses (e.g. 'return' outside function)
    except (SyntaxError, ValueError) as exc:
        return {f"SyntaxError: {getattr(exc, 'msg', exc)}"}
    except (MemoryError, RecursionError) as exc:  # nesting CPython cannot compile: an error of this file
        return {f"SyntaxError: too deeply nested for the Python compiler ({type(exc).__name__})"}
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


def new_python_errors(base: bytes | None, result: bytes, filename: str) -> list[str]:
    """Errors in `result` that `base` did not have (every error, for a new file)."""
    before = python_errors(base, filename) if base is not None else set()
    return sorted(python_errors(result, filename) - before)


def _check_one(item: tuple[bytes, str]) -> list[str]:
    return sorted(python_errors(*item))


def errors_of_many(contents: Iterable[tuple[bytes, str]], memo: Memo | None = None,
                   screen: Screen | None = None) -> dict[str, set[str]]:
    """Findings of each (content, filename), keyed by the content's sha256 hex; each content checked once."""
    return start_errors_of_many(contents, memo, screen).result()


class PendingErrors:
    """A check under way: with a screen, compile() runs in forked children and ruff in its own
    process, so the caller may do other work (write temp files) until `result()`."""

    def __init__(self, items: dict[str, tuple[bytes, str]], found: dict[str, set[str]], memo: Memo | None,
                 screen: Screen | None) -> None:
        self.found, self.memo = found, memo
        self.keys = [k for k in items if k not in found]
        self.todo = [items[k] for k in self.keys]
        self.screen = screen if self.todo else None
        self._flagged = screen.start(self.todo) if self.screen is not None else None
        self._syntax = _start_compile(self.todo) if self.screen is not None else None
        self._done: dict[str, set[str]] | None = None

    def result(self) -> dict[str, set[str]]:
        if self._done is not None:
            return self._done
        if self._syntax is not None and self._flagged is not None:
            syntax = self._syntax()
            flagged = self._flagged()
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
        if self._done is None and self._syntax is not None and self._flagged is not None:
            self._syntax()
            self._flagged()
            self._done = self.found


def start_errors_of_many(contents: Iterable[tuple[bytes, str]], memo: Memo | None = None,
                         screen: Screen | None = None) -> PendingErrors:
    """errors_of_many, begun: the memo is asked now, the rest runs until `result()`."""
    items: dict[str, tuple[bytes, str]] = {}
    for data, name in contents:
        items.setdefault(hashlib.sha256(data).hexdigest(), (data, name))
    known = memo.get_many(items) if memo is not None and items else {}
    return PendingErrors(items, {key: set(errs) for key, errs in known.items()}, memo, screen)


def _checked(items: list[tuple[bytes, str]]) -> list[list[str]]:
    """The full check of every item, in worker processes when there are enough."""
    workers = min(os.cpu_count() or 1, 4)
    if workers > 1 and len(items) >= PARALLEL_MIN:
        return _in_parallel(items, workers)
    return [_check_one(i) for i in items]


def _compiled(items: list[tuple[bytes, str]]) -> list[list[str]]:
    """syntax_errors of every item (in forked children when there is enough source)."""
    return _start_compile(items)()


def _start_compile(items: list[tuple[bytes, str]]) -> Callable[[], list[list[str]]]:
    """syntax_errors of every item, begun. With enough source a forked child compiles it all while this
    process goes on (an in-place apply stages its files meanwhile): compile() holds the GIL, and it is
    most of what a screened check costs. One child, not one per core: measured on 2 vCPUs, two
    children cost 40% more CPU for little less wall time, while one overlaps the staging's I/O.
    With little source it is done here, when asked."""
    total = sum(len(d) for d, _ in items)
    if total < FORK_MIN_BYTES or (os.cpu_count() or 1) < 2 or not hasattr(os, "fork"):
        return lambda: [sorted(syntax_errors(*i)) for i in items]
    everything = list(range(len(items)))
    pid, fd = _fork_compile(items, everything)

    def result() -> list[list[str]]:
        got = _collect(pid, fd, len(items))
        if got is None:  # the child failed: do it here
            got = [sorted(syntax_errors(*i)) for i in items]
        return got

    return result


def _fork_compile(items: list[tuple[bytes, str]], share: list[int]) -> tuple[int, int]:
    """A child that writes the syntax errors of `share` as JSON to a pipe and exits; (pid, read end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no cleanup of the parent's state runs here
        code = 1
        try:
            os.close(r)
            doc = json.dumps([sorted(syntax_errors(*items[i])) for i in share]).encode()
            with os.fdopen(w, "wb") as f:
                f.write(doc)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _collect(pid: int, fd: int, count: int) -> list[list[str]] | None:
    with os.fdopen(fd, "rb") as f:
        doc = f.read()
    _, status = os.waitpid(pid, 0)
    try:
        got = json.loads(doc) if os.waitstatus_to_exitcode(status) == 0 else None
    except ValueError:
        return None
    if not isinstance(got, list) or len(got) != count:
        return None
    if not all(isinstance(e, list) and all(isinstance(x, str) for x in e) for e in got):
        return None
    return got


def _in_parallel(items: list[tuple[bytes, str]], workers: int) -> list[list[str]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        ctx = multiprocessing.get_context("fork")  # the workers inherit what is imported already
    except ValueError:  # pragma: no cover - no fork on this platform
        return [_check_one(i) for i in items]
    chunk = max(1, len(items) // (workers * 4))
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(_check_one, items, chunksize=chunk))
