"""Python checks on patched files: a patch must not add a syntax error or an undefined name.

Only errors that the base did not have count, so a stock file with quirks does not block a queue.
Undefined names come from pyflakes when it is installed; syntax errors from compile() always.
"""
from __future__ import annotations

import warnings


def python_errors(source: bytes, filename: str) -> set[str]:
    """Problems in `source`, as stable strings without line numbers (so base and result compare)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return {f"SyntaxError: {getattr(exc, 'msg', exc)}"}
    except (MemoryError, RecursionError) as exc:  # nesting CPython cannot compile: an error of this file
        return {f"SyntaxError: too deeply nested for the Python compiler ({type(exc).__name__})"}
    try:
        from pyflakes import checker, messages
    except ImportError:
        return set()
    import ast

    try:
        tree = ast.parse(source, filename)
        w = checker.Checker(tree, filename=filename)
    except (MemoryError, RecursionError):
        return set()  # compiled, yet too deep for pyflakes: no undefined-name check for this file
    kinds = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)
    return {f"{type(m).__name__}: {m.message % m.message_args}" for m in w.messages if isinstance(m, kinds)}


def new_python_errors(base: bytes | None, result: bytes, filename: str) -> list[str]:
    """Errors in `result` that `base` did not have (every error, for a new file)."""
    before = python_errors(base, filename) if base is not None else set()
    return sorted(python_errors(result, filename) - before)
