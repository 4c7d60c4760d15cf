"""Outputs appear whole or not at all: write a temp file beside the destination, fsync, rename.

The one place that does this dance for paths (atomic_write) and for names in a directory fd
(write_atomic_at, for trees read and written with O_NOFOLLOW).

A temp file is named `.NAME.imgquilt-XXXXXXXX.tmp` (NAME cut to TEMP_NAME_BYTES, so a long name
still leaves room; `.NAME.imgquilt-tmp` for write_atomic_at, whose writers hold the tree's lock) and
flock'ed by its writer until it is renamed: a command killed mid-write
leaves one that nobody holds, which the next command may remove (queue.interrupted) without ever
taking a live writer's file.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO, Iterator


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (best effort: some filesystems refuse fsync on directories)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


TEMP_NAME_BYTES = 200  # of NAME in a temp name: the rest (prefix, marker, suffix) stays under 255
TEMP_MARK = ".imgquilt-"


def temp_prefix(name: str) -> str:
    """`.NAME.imgquilt-` with NAME cut (on a character boundary) to TEMP_NAME_BYTES bytes."""
    raw = name.encode("utf-8", "surrogateescape")[:TEMP_NAME_BYTES]
    return "." + raw.decode("utf-8", "ignore") + TEMP_MARK


def write_atomic_at(dir_fd: int, name: str, data, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace `name` in the directory `dir_fd` whole, never through a symlink: temp beside it, fsync, rename.

    `data`: bytes, or a large file's Spooled (linked in when it is imgquilt's own temp on this
    filesystem, else copied by the kernel). `durable=False` skips the fsyncs: for entries named by the
    hash of their bytes and checked on every read, which a crash may lose but never makes wrong."""
    from ..fs.content import link_content_at, write_all

    tmp = temp_prefix(name) + "tmp"
    with suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)  # left by a crash
    lock = -1
    try:
        if link_content_at(data, dir_fd, tmp):
            _chmod_at(dir_fd, tmp, mode)
        else:
            fd = _locked_temp_at(dir_fd, tmp)
            try:
                write_all(fd, data)
                os.fchmod(fd, mode)
                if durable:
                    os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
            lock = fd  # held until the rename: whoever finds this temp unlocked knows its writer is dead
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    finally:
        if lock >= 0:
            os.close(lock)
    if durable:
        with suppress(OSError):  # best effort, as fsync_dir
            os.fsync(dir_fd)


def _nameless_locked(dir_fd: int) -> int:
    """A new nameless file (O_TMPFILE) in `dir_fd`, flock'ed by this process and open for writing, for
    the caller to link under a temp name: no one ever sees that name unlocked. -1 where the
    filesystem has no O_TMPFILE (NFS)."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except (OSError, AttributeError):
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _link_nameless(fd: int, dir_fd: int, name: str) -> None:
    os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)


def _locked_temp_at(dir_fd: int, tmp: str) -> int:
    """A new file named `tmp` in `dir_fd`, flock'ed by this process (as _locked_temp); its fd, open for
    writing."""
    fd = _nameless_locked(dir_fd)
    if fd >= 0:
        try:
            _link_nameless(fd, dir_fd, tmp)
            return fd
        except OSError:
            os.close(fd)  # no /proc, or linking refused: the portable way below
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _chmod_at(dir_fd: int, name: str, mode: int) -> None:
    """chmod a file just made in `dir_fd` (opened without following a link: fchmod on its fd)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _locked_temp(dest: Path) -> tuple[int, str]:
    """(fd, path) of a new temp file beside `dest`, flock'ed by this process until the fd closes.

    Where the filesystem has O_TMPFILE the file is made nameless, locked, then linked under its temp
    name: no one ever sees that name unlocked, so whoever finds it unlocked knows its writer is dead
    (`check` says so at once, whatever the file's age). Elsewhere (NFS) mkstemp then flock."""
    parent = str(dest.parent or ".")
    prefix = temp_prefix(dest.name)
    dir_fd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # only a place to make the file in
    try:
        fd = _nameless_locked(dir_fd)
        if fd >= 0:
            try:
                for _ in range(100):
                    name = prefix + next(tempfile._get_candidate_names()) + ".tmp"  # type: ignore[attr-defined]  # noqa: SLF001 - mkstemp's names
                    try:
                        _link_nameless(fd, dir_fd, name)
                        return fd, os.path.join(parent, name)
                    except FileExistsError:
                        continue
            except OSError:
                pass  # no /proc, or linking refused: the portable way below
            os.close(fd)
    finally:
        os.close(dir_fd)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=parent)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until after the rename: a sweeper never takes a live temp
    except BaseException:
        os.close(fd)
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return fd, tmp


@contextmanager
def atomic_file(dest: Path, mode: int = 0o644, *, durable: bool = True) -> Iterator[BinaryIO]:
    """Yield a file to write; on success it replaces `dest`, on error it is removed.

    `durable=False` skips the fsyncs: for cache entries that carry their own checksum, where a
    crash may lose an entry but never makes a wrong one pass."""
    dest = Path(dest)
    fd, tmp = _locked_temp(dest)
    try:
        with os.fdopen(os.dup(fd), "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
        if durable:
            fsync_dir(dest.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    finally:
        os.close(fd)


def atomic_write(dest: Path, data, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace `dest` with `data` (bytes, or a large file's Spooled: copied by the kernel) whole or not at all."""
    from ..fs.content import write_all

    with atomic_file(dest, mode, durable=durable) as f:
        f.flush()
        write_all(f.fileno(), data)


def rename_at(dir_fd: int, src: str, dst: str) -> None:
    """Rename `src` to `dst` inside the directory `dir_fd`, durably (the directory is fsync'd)."""
    os.rename(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    with suppress(OSError):  # best effort, as fsync_dir
        os.fsync(dir_fd)


def publish(tmp: Path, dest: Path) -> None:
    """Rename a finished temp file (written and checked beside `dest`) over `dest`, durably."""
    os.replace(tmp, dest)
    fsync_dir(Path(dest).parent)


def write_new_file(path: Path, data) -> None:
    """Create `path` (it must not exist) with `data` (bytes, or a large file's Spooled: copied by the
    kernel), flushed to disk: for a directory put in place later."""
    from ..fs.content import write_all

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new_at(dir_fd: int, name: str, data: bytes) -> None:
    """Create `name` in `dir_fd` (it must not exist, no link followed) with `data`, flushed to disk: for
    a file that means nothing until something written after it names it (a journal's backups)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def replace_dir(tmp: Path, dest: Path) -> None:
    """Put the finished directory `tmp` at `dest`, durably.

    A missing or empty `dest` is replaced by the rename itself; a non-empty one is moved aside
    first, put back if the rename fails, and removed once the new one is in place.
    """
    old: Path | None = None
    if dest.is_dir() and not dest.is_symlink() and any(dest.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
        os.rename(dest, old / "previous")
    try:
        os.rename(tmp, dest)
    except BaseException:
        if old is not None and not dest.exists():
            os.rename(old / "previous", dest)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    fsync_dir(Path(dest).parent)
