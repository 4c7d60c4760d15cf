"""How big the shared cache is, emptying it, and keeping it under a size cap (least recently used first).

Every entry is a file named by its digest; `DigestStore.get` touches an entry's mtime when it is used,
so the oldest mtime is the least recently used. The cap is `IMGQUILT_CACHE_MAX` (bytes, or with a
K/M/G/T suffix, powers of 1024), 20 GiB by default; `0` turns eviction off.

Only what imgquilt wrote is counted, evicted or pruned, recognised by its part and name (`ENTRY`
below: a sha256 below its two-hex fan-out directory, a `sha256-HEX` layer pointer, a `verified/`
marker, the findings database, and the temp names imgquilt's writers use). Anything else in the
cache directory (another program's files, with IMGQUILT_CACHE_DIR=~/.cache by mistake) is never
touched; nothing is removed with rmtree, only files by name and directories once they are empty.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import UsageError
from . import Usage, cache_root
from .trust import PARTS, CacheDir

_HEX = r"[0-9a-f]{64}"
_TEMP = r"(?:\.{name}\.imgquilt-tmp|\.{name}\.[A-Za-z0-9_]{{6,}}\.tmp|{name}\.tmp\d+)"  # write_atomic_at, atomic_write, markers


def _entry(name: str) -> re.Pattern[str]:
    return re.compile("^(?:" + name + "|" + _TEMP.format(name=name) + ")$")


_DIGEST_ENTRY = _entry(_HEX)
ENTRY = {  # part: (fan-out directory pattern or None, entry name pattern)
    "files": (re.compile(r"^[0-9a-f]{2}$"), _DIGEST_ENTRY),
    "layer-index": (re.compile(r"^[0-9a-f]{2}$"), _DIGEST_ENTRY),
    "manifests": (re.compile(r"^[0-9a-f]{2}$"), _DIGEST_ENTRY),
    "configs": (re.compile(r"^[0-9a-f]{2}$"), _DIGEST_ENTRY),
    "layers": (None, _entry("sha256-" + _HEX)),
    "verified": (None, _entry(r"sha(?:256|384|512)-[0-9a-f]{64,128}-[0-9a-f]{16}")),
    "pycheck": (None, re.compile(r"^findings\.sqlite(?:-journal|-wal|-shm)?$")),
    "rootfs": (None, _DIGEST_ENTRY),  # the marker of an unpacked tree (cache.rootfs); prune removes the trees too
    # the OCI layout containers-storage images are copied into (image.sources.store_copy): its blobs
    "store-images": ("blobs/sha256", _DIGEST_ENTRY),
    "parsed": (re.compile(r"^[0-9a-f]{2}$"), _DIGEST_ENTRY),  # sealed parses of large files (cache.parsed)
}
assert set(ENTRY) == set(PARTS)

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
    from ..settings import current

    raw = current().cache_max
    if raw is None or not raw.strip():
        return DEFAULT_CAP
    m = _SIZE.match(raw)
    if not m:
        raise UsageError(f"IMGQUILT_CACHE_MAX={raw!r} is not a size.", hint="Write bytes, or e.g. 500M, 20G; 0 for no cap.")
    return int(m.group(1)) << _UNITS[m.group(2).upper()]


def _entries(root: Path) -> Iterator[tuple[Path, int, int]]:
    """(path, size, mtime) of every file imgquilt wrote below root (see ENTRY); nothing else, no link followed."""
    for part, (fanout, name) in ENTRY.items():
        base = root / part
        try:
            if not stat.S_ISDIR(os.lstat(base).st_mode):
                continue
        except OSError:
            continue
        if fanout is None:
            dirs = [base]
        elif isinstance(fanout, str):  # a fixed directory below the part (an OCI layout's blobs/sha256)
            dirs = [base / fanout] if _is_dir(base / fanout) and not _linked(base, fanout) else []
        else:
            dirs = [d for d in _listing(base) if fanout.match(d.name) and _is_dir(d)]
        for d in dirs:
            for path in _listing(d):
                if not name.match(path.name):
                    continue
                try:
                    st = path.lstat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    # an unpacked tree's marker stands for the tree: its size is the tree's (cache.rootfs)
                    yield path, (_tree_size(path) if part == "rootfs" else st.st_size), st.st_mtime_ns


def _tree_size(marker: Path) -> int:
    from .rootfs import marker_size

    return marker_size(marker)


def _listing(d: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(d)]
    except OSError:
        return []


def _linked(base: Path, rel: str) -> bool:
    """Whether a directory on the way from `base` to `base/rel` is a link (never followed)."""
    at = base
    for name in rel.split("/"):
        at = at / name
        try:
            if stat.S_ISLNK(os.lstat(at).st_mode):
                return True
        except OSError:
            return True
    return False


def _is_dir(p: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode)
    except OSError:
        return False


def _checked(root: Path | None) -> Path:
    """The cache root, checked as every use of it is (trust.py): a cache that is not the user's alone is
    neither measured nor emptied."""
    root = root or cache_root()
    for part in PARTS:
        CacheDir(root, part)
    return root


def report(root: Path | None = None) -> CacheReport:
    root = _checked(root)
    parts: dict[str, Usage] = {}
    sizes: dict[str, list[int]] = {}
    for path, size, _ in _entries(root):
        sizes.setdefault(path.relative_to(root).parts[0], []).append(size)
    for part in sorted(sizes):
        parts[part] = Usage(len(sizes[part]), sum(sizes[part]))
    return CacheReport(root, size_cap(), parts)


def prune(root: Path | None = None) -> Usage:
    """Empty the cache of imgquilt's entries; returns what was removed. Entries are immutable, so a
    concurrent reader that loses one just reads it again from its source. Other files stay."""
    root = _checked(root)
    removed = entries = 0
    for path, size, _ in list(_entries(root)):
        try:
            path.unlink()
        except OSError:
            continue
        removed += size
        entries += 1
    _prune_trees(root / "rootfs")
    for part, (fanout, _) in ENTRY.items():  # directories go only once empty (rmdir refuses otherwise)
        if isinstance(fanout, str):
            _rmdir(root / part / fanout)
        elif fanout is not None:
            for d in _listing(root / part):
                if fanout.match(d.name) and _is_dir(d):
                    _rmdir(d)
        _rmdir(root / part)
    return Usage(entries, removed)


def _prune_trees(part: Path) -> None:
    """The unpacked trees (and half-unpacked ones) of cache.rootfs, never through a link."""
    from .rootfs import _rmtree

    for d in _listing(part):
        if re.match(r"^(?:[0-9a-f]{64}\.tree|\.unpack-.+|pool)$", d.name) and _is_dir(d):
            _rmtree(d)


def _rmdir(d: Path) -> None:
    try:
        os.rmdir(d)
    except OSError:
        pass


def trim(root: Path | None = None, cap: int | None = None, keep: frozenset[Path] = frozenset()) -> Usage:
    """Evict least recently used entries until the cache is under its cap (never those in `keep`: what
    the running command is about to read); returns what was evicted."""
    root = root or cache_root()
    cap = size_cap() if cap is None else cap
    if cap <= 0 or not root.is_dir():
        return Usage(0, 0)
    entries = list(_entries(_checked(root)))
    total = sum(size for _, size, _ in entries)
    evicted = freed = 0
    for path, size, _ in sorted(entries, key=lambda e: e[2]):
        if total <= cap:
            break
        if path in keep:
            continue
        if path.parent.name == "rootfs" and _DIGEST_ENTRY.match(path.name) and len(path.name) == 64:
            from .rootfs import evict

            if not evict(path):  # a tree in use stays
                continue
        else:
            try:
                path.unlink()
            except OSError:
                continue
        total -= size
        evicted += 1
        freed += size
    return Usage(evicted, freed)
