"""Python checks on patched files: a patch must not add a syntax error or an undefined name.

Only errors that the base did not have count, so a stock file with quirks does not block a queue.
Undefined names come from pyflakes when it is installed; syntax errors from compile() always.

A series is checked at the cost of one pass: each file's final state once (its base only when the
final state has errors at all), many files in parallel, and each content's findings memoized by
(sha256, checker version) through a `Memo` the caller provides (the engine writes nothing itself).
"""
from __future__ import annotations

import hashlib
import os
import sys
import warnings
from typing import Iterable, Protocol

PARALLEL_MIN = 8  # fewer unknown files than this are not worth starting worker processes for


class Memo(Protocol):
    """Findings by content: `key` is the content's sha256 hex (the checker version is the memo's business)."""

    def get(self, key: str) -> list[str] | None: ...

    def put(self, key: str, errors: list[str]) -> None: ...


def checker_version() -> str:
    """What the findings depend on: the Python grammar and the pyflakes release."""
    try:
        from pyflakes import __version__ as flakes
    except ImportError:
        flakes = "none"
    return f"py{sys.version_info[0]}.{sys.version_info[1]}-pyflakes{flakes}-1"


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


def errors_of_many(contents: Iterable[tuple[bytes, str]], memo: Memo | None = None) -> dict[str, set[str]]:
    """Findings of each (content, filename), keyed by the content's sha256 hex; each content checked once."""
    todo: dict[str, tuple[bytes, str]] = {}
    found: dict[str, set[str]] = {}
    for data, name in contents:
        key = hashlib.sha256(data).hexdigest()
        if key in found or key in todo:
            continue
        known = memo.get(key) if memo is not None else None
        if known is not None:
            found[key] = set(known)
        else:
            todo[key] = (data, name)
    keys = list(todo)
    results: list[list[str]]
    workers = min(os.cpu_count() or 1, 4)
    if workers > 1 and len(keys) >= PARALLEL_MIN:
        results = _in_parallel([todo[k] for k in keys], workers)
    else:
        results = [_check_one(todo[k]) for k in keys]
    for key, errs in zip(keys, results):
        found[key] = set(errs)
        if memo is not None:
            memo.put(key, errs)
    return found


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
