"""How big the shared cache is, emptying it, and keeping it under a size cap (least recently used first).

Every entry is a file named by its digest; `DigestStore.get` touches an entry's mtime when it is used,
so the oldest mtime is the least recently used. The cap is `IMGQUILT_CACHE_MAX` (bytes, or with a
K/M/G/T suffix, powers of 1024), 20 GiB by default; `0` turns eviction off.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from . import Usage, cache_root

DEFAULT_CAP = 20 << 30
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", re.I)
_UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


@dataclass(frozen=True)
class CacheReport:
    """The cache as `imgquilt cache` shows it: where, the cap, and what each part holds."""

    root: Path
    cap: int  # 0: no cap
    parts: dict[str, Usage]

    @property
    def total(self) -> Usage:
        return Usage(sum(u.entries for u in self.parts.values()), sum(u.bytes for u in self.parts.values()))


def size_cap() -> int:
    """The cap in bytes from IMGQUILT_CACHE_MAX (a bad value is a usage error naming it)."""
    raw = os.environ.get("IMGQUILT_CACHE_MAX")
    if raw is None or not raw.strip():
        return DEFAULT_CAP
    m = _SIZE.match(raw)
    if not m:
        raise UsageError(f"IMGQUILT_CACHE_MAX={raw!r} is not a size.", hint="Write bytes, or e.g. 500M, 20G; 0 for no cap.")
    return int(m.group(1)) << _UNITS[m.group(2).upper()]


def _entries(root: Path):
    """(path, size, mtime) of every file below root; symlinks are not followed."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            yield path, st.st_size, st.st_mtime_ns


def report(root: Path | None = None) -> CacheReport:
    root = root or cache_root()
    parts: dict[str, Usage] = {}
    if root.is_dir():
        for part in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
            sizes = [size for _, size, _ in _entries(part)]
            parts[part.name] = Usage(len(sizes), sum(sizes))
    return CacheReport(root, size_cap(), parts)


def prune(root: Path | None = None) -> Usage:
    """Empty the cache; returns what was removed. Entries are immutable, so a concurrent reader that
    loses one just reads it again from its source."""
    root = root or cache_root()
    removed = report(root).total
    if root.is_dir():
        for part in root.iterdir():
            if part.is_dir() and not part.is_symlink():
                shutil.rmtree(part, ignore_errors=True)
            else:
                try:
                    part.unlink()
                except OSError:
                    pass
    return removed


def trim(root: Path | None = None, cap: int | None = None) -> Usage:
    """Evict least recently used entries until the cache is under its cap; returns what was evicted."""
    root = root or cache_root()
    cap = size_cap() if cap is None else cap
    if cap <= 0 or not root.is_dir():
        return Usage(0, 0)
    entries = list(_entries(root))
    total = sum(size for _, size, _ in entries)
    evicted = freed = 0
    for path, size, _ in sorted(entries, key=lambda e: e[2]):
        if total <= cap:
            break
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        evicted += 1
        freed += size
    return Usage(evicted, freed)
