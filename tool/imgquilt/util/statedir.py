"""The queue's own state directory `.imgquilt/`, opened as untrusted input.

Queues are cloned from other people, so `.imgquilt` itself, any directory below it and any file
in it may be a planted symlink (`.imgquilt/work -> $HOME`), FIFO or device. Every access here walks
from the queue root with directory fds and O_NOFOLLOW: a symlink or non-directory on the way is
refused (exit 6) naming it, a file is read only if it is regular (O_NONBLOCK + fstat, size-capped)
and written with write_atomic_at, so nothing is ever read or written through a link.
"""
from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import BadInput, LinkedState, StateWriteFailed, UnsafePath
from .atomic import write_atomic_at
from .regular import read_regular_at

STATE_NAME = ".imgquilt"
STATE_FILE_CAP = 64 << 20  # state files are small JSON and lists; a bigger one is not ours
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _unsafe(shown: str, what: str) -> UnsafePath:
    cls = LinkedState if what == "a symlink" else UnsafePath
    return cls(
        f"{shown} is {what}; imgquilt keeps its state only in real directories and files inside the queue "
        "and does not follow it.",
        hint=f"Remove {shown} (imgquilt recreates what it needs); never commit .imgquilt/ to a queue.",
    )


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." or "\0" in p for p in parts):
        raise UnsafePath(f"Unsafe state path {rel!r}.")
    return parts


def open_dir_below(base_fd: int, parts: list[str], *, create: bool, shown: str) -> int | None:
    """fd of the directory `parts` below `base_fd`, no symlink followed; None if missing and not `create`."""
    fd = os.dup(base_fd)
    walked = shown
    for part in parts:
        walked = f"{walked}/{part}"
        try:
            below = _step(fd, part, create=create, walked=walked)
        finally:
            os.close(fd)
        if below is None:
            return None
        fd = below
    return fd


def _step(parent: int, part: str, *, create: bool, walked: str) -> int | None:
    """Open one directory below `parent` (made first when missing and `create`); a link is refused."""
    if create:
        with suppress(FileExistsError):  # usually there; the open below checks what is
            os.mkdir(part, 0o755, dir_fd=parent)
    try:
        return os.open(part, _DIR, dir_fd=parent)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as exc:
        return _refuse_or_raise(exc, walked, _is_link(part, parent))


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refuse_or_raise(exc: OSError, walked: str, is_link: bool) -> int:
    if exc.errno == errno.ELOOP or is_link:  # O_DIRECTORY|O_NOFOLLOW on a link is ENOTDIR
        raise _unsafe(walked, "a symlink") from None
    if exc.errno == errno.ENOTDIR:
        raise _unsafe(walked, "not a directory") from None
    if exc.errno == errno.ENAMETOOLONG:
        raise UnsafePath(f"{walked}: a path component is too long for the filesystem.") from None
    raise exc


def refuse_non_regular_at(dir_fd: int, name: str, *, shown: str) -> None:
    """A write replaces only a regular file: a directory, FIFO or device in the way is exit 6."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise _unsafe(shown, "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file")


class StateDir:
    """One directory below `<queue>/.imgquilt/` (e.g. StateDir(q, "work")), every access without following links."""

    def __init__(self, queue_root: Path, *sub: str) -> None:
        self.queue_root = Path(queue_root)
        self.parts = [STATE_NAME, *(p for s in sub for p in _parts(s))]
        self.shown = "/".join(self.parts)
        self.path = self.queue_root.joinpath(*self.parts)

    @contextmanager
    def opened(self, rel_dir: str = "", *, create: bool = False) -> Iterator[int | None]:
        """fd of this directory (or `rel_dir` below it); None when it does not exist and not `create`."""
        try:
            qfd = os.open(self.queue_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise BadInput(f"Queue directory {str(self.queue_root)!r} cannot be opened ({exc.strerror}).") from None
        try:
            fd = open_dir_below(qfd, self.parts + _parts(rel_dir), create=create, shown=str(self.queue_root))
        except OSError as exc:
            raise self._failed(exc, rel_dir) from None
        finally:
            os.close(qfd)
        try:
            yield fd
        except OSError as exc:  # whatever the caller did below this directory
            raise self._failed(exc, rel_dir) from None
        finally:
            if fd is not None:
                os.close(fd)

    def _failed(self, exc: OSError, rel: str) -> StateWriteFailed:
        where = f"{self.queue_root}/{self.shown}" + (f"/{rel}" if rel else "")
        return StateWriteFailed(
            f"imgquilt cannot use its state in {where}: {exc.strerror or exc}"
            + (f" ({exc.filename})" if isinstance(exc.filename, str) else "") + ".",
            hint="Make the queue's .imgquilt/ writable (and the names in it shorter), or remove it to start over.",
        )

    def _split(self, rel: str) -> tuple[str, str]:
        parts = _parts(rel)
        if not parts:
            raise UnsafePath(f"Unsafe state path {rel!r}.")
        return "/".join(parts[:-1]), parts[-1]

    def shown_path(self, rel: str) -> str:
        return f"{self.queue_root}/{self.shown}/{rel}"

    def read(self, rel: str, *, cap: int = STATE_FILE_CAP) -> bytes | None:
        """The bytes of the regular file `rel`, or None when it (or a directory on the way) does not exist."""
        parent, name = self._split(rel)
        with self.opened(parent) as fd:
            if fd is None:
                return None
            return read_regular_at(fd, name, shown=self.shown_path(rel), cap=cap)

    def write(self, rel: str, data, mode: int = 0o644, *, durable: bool = True) -> None:
        """Replace `rel` whole (directories made as needed); a link or non-regular file in the way is exit 6.
        `data`: bytes or a Spooled (util.atomic.write_atomic_at; `durable` as there)."""
        self.write_many([(rel, data)], mode, durable=durable)

    def write_many(self, items: Iterable[tuple[str, object]], mode: int = 0o644, *, durable: bool = True) -> None:
        """write() of many entries, each directory walked to (and made) once for all of them, not
        from the queue root for each: the object store's first run writes thousands."""
        by_dir: dict[str, list[tuple[str, str, object]]] = {}
        for rel, data in items:
            parent, name = self._split(rel)
            by_dir.setdefault(parent, []).append((rel, name, data))
        if not by_dir:
            return
        with self.opened(create=True) as top:
            assert top is not None
            for parent, entries in by_dir.items():
                try:
                    fd = open_dir_below(top, _parts(parent), create=True, shown=f"{self.queue_root}/{self.shown}")
                except OSError as exc:
                    raise self._failed(exc, parent) from None
                assert fd is not None
                try:
                    for rel, name, data in entries:
                        refuse_non_regular_at(fd, name, shown=self.shown_path(rel))
                        write_atomic_at(fd, name, data, mode, durable=durable)
                except OSError as exc:  # named by the directory written in, as write() of one entry says
                    raise self._failed(exc, parent) from None
                finally:
                    os.close(fd)

    def link_in(self, rel: str, data, mode: int = 0o644) -> bool:
        """Put the Spooled `data` at `rel` by reference only (a hard link to imgquilt's own temp file, or
        a reflink): False, and nothing made, where neither works (another filesystem, no reflinks)."""
        parent, name = self._split(rel)
        with self.opened(parent, create=True) as fd:
            assert fd is not None
            refuse_non_regular_at(fd, name, shown=self.shown_path(rel))
            tmp = f".{name}.imgquilt-link.tmp"
            with suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)
            if not data.link_at(fd, tmp):
                return False
            try:
                lfd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    os.fchmod(lfd, mode)
                finally:
                    os.close(lfd)
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=fd)
                raise
            return True

    def read_content(self, rel: str, *, cap: int = STATE_FILE_CAP):
        """Like read(), but a file larger than spool_at() comes back as a Spooled over the open file
        (checked unchanged on every read), never held; None when missing."""
        from ..fs.content import Spooled, spool_at

        parent, name = self._split(rel)
        with self.opened(parent) as fd:
            if fd is None:
                return None
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if not stat.S_ISREG(st.st_mode) or st.st_size <= spool_at():
                return read_regular_at(fd, name, shown=self.shown_path(rel), cap=cap)
            if st.st_size > cap:
                raise BadInput(f"{self.shown_path(rel)} is {st.st_size} bytes, more than imgquilt reads ({cap} bytes).")
            try:
                ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                return None
            if not stat.S_ISREG(os.fstat(ffd).st_mode):
                os.close(ffd)
                return read_regular_at(fd, name, shown=self.shown_path(rel), cap=cap)
            return Spooled.of_file(ffd, shown=self.shown_path(rel))

    def unlink(self, rel: str) -> None:
        """Remove `rel` if it is there (a link is removed, never followed)."""
        parent, name = self._split(rel)
        with self.opened(parent) as fd:
            if fd is None:
                return
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                raise _unsafe(self.shown_path(rel), "a directory") from None

    def is_file(self, rel: str) -> bool:
        parent, name = self._split(rel)
        with self.opened(parent) as fd:
            if fd is None:
                return False
            try:
                return stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                return False

    def regular_files(self, rels: Iterable[str]) -> set[str]:
        """Which of `rels` are regular files (is_file for many, without walking from the queue root for
        each: this directory is opened once, each directory below it once, none followed if a link)."""
        out: set[str] = set()
        by_dir: dict[str, list[tuple[str, str]]] = {}
        for rel in rels:
            parent, name = self._split(rel)
            by_dir.setdefault(parent, []).append((rel, name))
        if not by_dir:
            return out
        with self.opened() as top:
            if top is None:
                return out
            for parent, names in by_dir.items():
                try:
                    fd = open_dir_below(top, _parts(parent), create=False, shown=f"{self.queue_root}/{self.shown}")
                except OSError as exc:
                    raise self._failed(exc, parent) from None
                if fd is None:
                    continue
                try:
                    for rel, name in names:
                        with suppress(FileNotFoundError, NotADirectoryError):
                            if stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                                out.add(rel)
                finally:
                    os.close(fd)
        return out

    def exists(self) -> bool:
        with self.opened() as fd:
            return fd is not None

    def ensure(self) -> Path:
        """Create this directory (checked all the way down) and return its path, for tools that take a path."""
        with self.opened(create=True):
            pass
        return self.path
