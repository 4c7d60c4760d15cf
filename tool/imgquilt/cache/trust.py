"""The shared cache as a trust boundary: used only when it is yours alone, and even then read as data.

The cache holds verdicts that are not self-evident from their names (a layer's index says what a
blob holds; a pycheck row says a file is clean; a `verified/` marker says a local blob matched its
digest). Each such entry is sealed under the cache key (cache/seal.py) and believed only when its
seal verifies, so a cache restored from another job or machine is recomputed, never believed. On top
of that, as ssh does with ~/.ssh, a cache is used only when

- its directory, and every directory above it, is owned by the user or root and writable by no one
  else (a directory writable by a group is allowed when that group is the user's own private
  group, as Debian's ssh allows; an ancestor writable by all is allowed when it is sticky, as /tmp);
- every part imgquilt uses inside it (`files`, `layer-index`, `layers`, `verified`, `pycheck`,
  `manifests`, `configs`, `rootfs`, `store-images`, `parsed`) is a real directory (never a link) passing the same test;
- and entries are read and written through directory fds without following links: a link, FIFO or
  directory where an entry should be is dropped (the link itself, never what it names) and reads
  as absent.

Anything else is refused (exit 6, UnsafeCache) before any of it is read. Since nobody else can
write there, checking once per process is enough: no other user can swap a part afterwards.
"""
from __future__ import annotations

import errno
import os
import stat
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from ..errors import UnsafeCache, UnsafePath
from ..util.atomic import write_atomic_at
from ..util.ownership import problem_of
from ..util.statedir import open_dir_below

PARTS = ("files", "layer-index", "layers", "verified", "pycheck", "manifests", "configs", "rootfs", "store-images",
         "parsed")
_checked: dict[str, Path] = {}
_HINT = ("imgquilt trusts its shared cache as it trusts your home directory, so it uses only one that is yours "
         "alone. Fix the owner or mode (chmod go-w), point IMGQUILT_CACHE_DIR at a directory of your own, or run "
         "with IMGQUILT_NO_CACHE=1.")


def forget_checks() -> None:
    """Check every directory again on next use (the checks are memoized per process)."""
    _checked.clear()


def _refuse(path: Path, problem: str, what: str = "The shared cache") -> UnsafeCache:
    return UnsafeCache(f"{what} {path} is {problem}; imgquilt does not use it.", hint=_HINT)


def trusted_root(root: Path) -> Path:
    """`root` (made, mode 0700, when missing), checked with every directory above it; memoized."""
    key = os.fspath(root)
    if key in _checked:
        return _checked[key]
    with suppress(OSError):  # a cache that cannot be made is no error: nothing is read from it, writes fail
        os.makedirs(root, mode=0o700, exist_ok=True)
    real = Path(os.path.realpath(root))  # links above the cache (~/.cache -> /data/cache) are the user's setup
    own = True
    for d in (real, *real.parents):
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            own = False
            continue
        problem = problem_of(st, ancestor=not own)
        if problem is not None:
            raise _refuse(real, problem) if own else _refuse(d, problem, "The directory above the shared cache,")
        own = False
    _checked[key] = real
    return real


class CacheDir:
    """One part of the shared cache (checked: see the module docstring); entries are named by
    paths relative to it (`ab/ab12…`) and never reached through a link."""

    def __init__(self, root: Path, part: str) -> None:
        if part not in PARTS:
            raise ValueError(f"not a part of the cache: {part!r}")
        self.root = trusted_root(root)
        self.part = part
        self.path = self.root / part
        key = os.fspath(self.path)
        if key not in _checked:
            with suppress(OSError):
                os.mkdir(self.path, 0o700)
            try:
                problem = problem_of(os.lstat(self.path))
            except FileNotFoundError:
                problem = None  # could not be made (a read-only cache): every read misses, writes fail
            if problem is not None:
                raise _refuse(self.path, problem, "A part of the shared cache,")
            _checked[key] = self.path

    @contextmanager
    def _dir(self, rel_dir: str, *, create: bool) -> Iterator[int | None]:
        """fd of `rel_dir` below this part, no link followed; None when missing (or not a directory)."""
        try:
            base = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            yield None
            return
        try:
            parts = [p for p in rel_dir.split("/") if p]
            fd = open_dir_below(base, parts, create=create, shown=str(self.path))
        except (OSError, UnsafePath):  # a link or a file where a fan-out directory should be: no entry there
            fd = None
        finally:
            os.close(base)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def read(self, rel: str, *, cap: int) -> bytes | None:
        """The regular file `rel`, or None (missing; a link or anything not regular is dropped)."""
        parent, _, name = rel.rpartition("/")
        with self._dir(parent, create=False) as fd:
            return None if fd is None else self._read_at(fd, name, rel, cap)

    def _read_at(self, dfd: int, name: str, rel: str, cap: int, spool_over: int | None = None):
        """The entry `name` in `dfd`: its bytes, or (with `spool_over`) a Spooled over the open file when it
        is larger; None when missing, and a link, a FIFO, a directory or a file over `cap` is dropped
        (not an entry imgquilt wrote). One open, one fstat and the reads: a warm apply of 1000 patches
        reads 1000 entries (the generic regular-file reader's fdopen, second fstat and fcntls were
        two thirds of each read)."""
        try:
            ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:  # a link (ELOOP), or what cannot be opened for reading
            _drop(dfd, name)
            return None
        try:
            st = os.fstat(ffd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
                _drop(dfd, name)
                return None
            _touch(dfd, name, st)
            if spool_over is not None and st.st_size > spool_over:
                from ..fs.content import Spooled

                spooled, ffd = Spooled.of_file(ffd, shown=f"{self.path}/{rel}"), -1  # the Spooled owns it now
                return spooled
            os.set_blocking(ffd, True)
            data = _read_whole(ffd, st.st_size, cap)
            if data is None:
                _drop(dfd, name)  # grew past the cap while read: not an entry imgquilt wrote
            return data
        finally:
            if ffd >= 0:
                os.close(ffd)

    def read_content_many(self, rels: list[str], *, cap: int) -> dict:
        """read_content of each of `rels`, each fan-out directory opened once for the entries in it."""
        from ..fs.content import spool_at

        by_dir: dict[str, list[tuple[str, str]]] = {}
        for rel in rels:
            parent, _, name = rel.rpartition("/")
            by_dir.setdefault(parent, []).append((name, rel))
        out: dict = {}
        limit = spool_at()
        for parent, names in by_dir.items():
            with self._dir(parent, create=False) as fd:
                for name, rel in names:
                    out[rel] = None if fd is None else self._read_at(fd, name, rel, cap, spool_over=limit)
        return out

    def read_content(self, rel: str, *, cap: int):
        """Like read(), but a file larger than spool_at() comes back as a Spooled over the open file
        (checked unchanged on every read), never held."""
        from ..fs.content import spool_at

        parent, _, name = rel.rpartition("/")
        with self._dir(parent, create=False) as fd:
            return None if fd is None else self._read_at(fd, name, rel, cap, spool_over=spool_at())

    def exists(self, rel: str) -> bool:
        parent, _, name = rel.rpartition("/")
        with self._dir(parent, create=False) as fd:
            if fd is None:
                return False
            try:
                return stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
            except OSError:
                return False

    def write(self, rel: str, data, *, mode: int = 0o444, durable: bool = True) -> bool:
        """Replace `rel` whole (directories made as needed); False when the cache cannot be written.
        `data`: bytes or a Spooled; `durable=False`: no fsync (util.atomic.write_atomic_at)."""
        parent, _, name = rel.rpartition("/")
        try:
            with self._dir(parent, create=True) as fd:
                if fd is None:
                    return False
                with suppress(FileNotFoundError):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode):
                        _drop(fd, name)
                write_atomic_at(fd, name, data, mode, durable=durable)
        except OSError:
            return False
        return True

    def unlink(self, rel: str) -> None:
        parent, _, name = rel.rpartition("/")
        with self._dir(parent, create=False) as fd:
            if fd is not None:
                _drop(fd, name)


TOUCH_AFTER = 3600  # seconds: an entry read is marked used (its mtime, for eviction) at most once an hour


def _touch(dir_fd: int, name: str, st: os.stat_result) -> None:
    """Mark the entry used, for least-recently-used eviction, unless it was within the hour (a
    metadata write per read otherwise: 1000 of them in a warm 1000-patch apply)."""
    if time.time() - st.st_mtime > TOUCH_AFTER:
        with suppress(OSError):
            os.utime(name, dir_fd=dir_fd, follow_symlinks=False)


def _read_whole(fd: int, size: int, cap: int) -> bytes | None:
    """Everything in `fd`, None past `cap`: one read when it still holds the `size` fstat said."""
    data = os.read(fd, size + 1)
    if len(data) == size:  # a regular file reads short only at its end: the usual case, done
        return data
    parts, total = [data], len(data)  # it grew or shrank since the fstat: read on to the end or the cap
    while total <= cap and (more := os.read(fd, min(1 << 20, cap + 1 - total))):
        parts.append(more)
        total += len(more)
    return None if total > cap else b"".join(parts)


def _drop(dir_fd: int, name: str) -> None:
    """Remove what is at `name` (a file or a link, never followed; an empty directory)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except IsADirectoryError:
        with suppress(OSError):
            os.rmdir(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.EISDIR or exc.errno == errno.EPERM:
            with suppress(OSError):
                os.rmdir(name, dir_fd=dir_fd)
