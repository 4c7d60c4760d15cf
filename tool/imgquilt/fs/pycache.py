"""Where CPython looks for the bytecode of a source file, and the record of one such file.

The engine removes the bytecode a change makes stale (an apply's `bytecode`); the Python check
judges what it would run (pycheck.bytecode): both find it here. Nothing is read but what the
source already listed (fs.types.ListsDirs).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, TypeGuard

from .types import DirMeta, ListsDirs, Source

PYCACHE = "__pycache__"


@dataclass(frozen=True)
class Bytecode:
    """One bytecode file CPython could load for a source: its resolved path, the source's resolved
    path, and how it is found (`pycache`: __pycache__/NAME.TAG.pyc; `sourceless`: NAME.pyc)."""

    path: str
    source: str
    how: str
    optimize: int = 0  # the -O level its name says (opt-1, opt-2)
    parents: tuple[DirMeta, ...] = field(default=(), compare=False)  # its directories in the source, root first



# --- where bytecode lives ---------------------------------------------------------------------
def pycache_names(stem: str, names: Sequence[str]) -> list[tuple[str, int]]:
    """(name, -O level) of every `STEM.TAG[.opt-N].pyc` among `names` (any interpreter's tag)."""
    out = []
    for name in names:
        if not (name.startswith(stem + ".") and name.endswith(".pyc")):
            continue
        middle = name[len(stem) + 1 : -4].split(".")
        if len(middle) == 1 and middle[0]:
            out.append((name, 0))
        elif len(middle) == 2 and middle[0] and middle[1] in ("opt-1", "opt-2"):
            out.append((name, int(middle[1][-1])))
    return sorted(out)


def source_dirs(named: str, resolved: str) -> list[tuple[str, str]]:
    """(directory, module stem) pairs a source may be imported as: by the path the patch names and by
    the path it resolves to (they differ when the file itself is a symlink); the pyc goes beside the
    path the importer found."""
    out = []
    for path in (named, resolved):
        d, _, name = path.rpartition("/")
        pair = (d, name[:-3])
        if name.endswith(".py") and pair not in out:
            out.append(pair)
    return out


def is_python_source(path: str) -> bool:
    return path.endswith(".py") and path.rpartition("/")[2] != ".py"


def _join(d: str, name: str) -> str:
    return f"{d}/{name}" if d else name


_LISTS_DIRS: dict[type, bool] = {}


def _lists_dirs(source: Source) -> TypeGuard[ListsDirs]:
    """isinstance(source, ListsDirs), asked once per class (a runtime Protocol check is slow: once per target)."""
    kind = type(source)
    known = _LISTS_DIRS.get(kind)
    if known is None:
        known = _LISTS_DIRS[kind] = isinstance(source, ListsDirs)
    return known


def find_bytecode(source: Source, named: str, resolved: str, *, source_gone: bool,
                  kinds: tuple[str, ...] = ("file",)) -> list[Bytecode]:
    """Every bytecode file `source` shows that CPython could load for the source file at `named`
    (`resolved`): __pycache__/STEM.*.pyc of any interpreter and -O level, and, when the source is
    gone, the sourceless STEM.pyc beside it. Only what the source already read is looked at (see
    fs.types.ListsDirs). `kinds`: the entry kinds counted (a symlink in __pycache__ is followed by
    CPython, but an apply does not remove one)."""
    if not is_python_source(resolved) or not _lists_dirs(source):
        return []
    found: dict[str, Bytecode] = {}
    for d, stem in source_dirs(named, resolved):
        cache = source.peek_dir(_join(d, PYCACHE))
        if cache is not None:
            names = [n for n, node in cache.entries.items() if node.kind in kinds]
            for name, opt in pycache_names(stem, names):
                path = _join(cache.resolved, name)
                found.setdefault(path, Bytecode(path, resolved, "pycache", opt, cache.parents))
        if source_gone:
            here = source.peek_dir(d)
            node = here.entries.get(stem + ".pyc") if here is not None else None
            if here is not None and node is not None and node.kind in kinds:
                path = _join(here.resolved, stem + ".pyc")
                found.setdefault(path, Bytecode(path, resolved, "sourceless", 0, here.parents))
    return [found[p] for p in sorted(found)]
