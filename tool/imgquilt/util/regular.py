"""Read a file only if it is a regular file of bounded size: never hang on a FIFO, never fill memory.

Queue files (`series`, `patches/`, the work tree, rebase files) come from other people. O_NONBLOCK
keeps the open of a FIFO from blocking; fstat then refuses anything but a regular file, and a size
cap gives a clear error instead of reading a huge (or sparse) file into memory.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import BadInput, LinkedState

PATCH_FILE_CAP = 64 << 20  # one patch file, series, targets.lock
READ_BUFFER = 1 << 16  # an explicit buffer size: open() asks isatty() (an ioctl) only when it picks one


def read_regular_file(path: Path, *, cap: int = PATCH_FILE_CAP, follow: bool = True) -> bytes | None:
    """The bytes of the regular file at `path`, None if it does not exist; anything else is exit 6."""
    return _read(str(path), None, shown=str(path), cap=cap, follow=follow)


def open_regular_file(path: Path, *, follow: bool = True) -> int | None:
    """An fd (blocking, close-on-exec) of the regular file at `path`, None if it does not exist; a FIFO,
    device or directory is exit 6, as read_regular_file. No size cap: the caller streams it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    shown = str(path)
    try:
        fd = os.open(str(path), flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise LinkedState(f"{shown} is a symlink; imgquilt does not follow it.", hint=f"Replace {shown} with a regular file.") from None
        raise BadInput(f"{shown} cannot be opened as a regular file ({os.strerror(exc.errno or 0)}).") from None
    try:
        _check_regular(fd, shown=shown, cap=1 << 62)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_at(dir_fd: int, name: str, *, shown: str, cap: int) -> bytes | None:
    """The bytes of the regular file `name` in `dir_fd` (None if missing); anything else is exit 6.

    O_NONBLOCK keeps a FIFO from hanging the open; fstat then refuses it (and devices, directories).
    """
    return _read(name, dir_fd, shown=shown, cap=cap, follow=False)


def _read(name: str, dir_fd: int | None, *, shown: str, cap: int, follow: bool) -> bytes | None:
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise LinkedState(f"{shown} is a symlink; imgquilt does not follow it.", hint=f"Replace {shown} with a regular file.") from None
        raise BadInput(f"{shown} cannot be opened as a regular file ({os.strerror(exc.errno or 0)}).",
                       hint="Check the path and its permissions.") from None
    try:
        _check_regular(fd, shown=shown, cap=cap)
    except BaseException:
        os.close(fd)
        raise
    # a buffer size given: no isatty() ioctl per file (thousands a run); reads still loop to the size asked
    with os.fdopen(fd, "rb", buffering=READ_BUFFER) as f:  # fdopen refuses a directory fd: checked above
        return read_capped(f, shown=shown, cap=cap)


def read_capped(f, *, shown: str, cap: int) -> bytes:
    """Read an open file whole, only if it is a regular file of at most `cap` bytes.

    Reads what fstat says it holds (plus one byte, to see it grow), never `cap` bytes at once: a
    read reserves its whole size, and the caps (4 GiB for an object) are far above what files hold."""
    size = _check_regular(f.fileno(), shown=shown, cap=cap)
    os.set_blocking(f.fileno(), True)
    data = f.read(size + 1)
    if len(data) > size:  # it grew while we read: take the rest in bounded reads, up to the cap
        parts = [data]
        total = len(data)
        while total <= cap:
            more = f.read(min(1 << 20, cap + 1 - total))
            if not more:
                break
            parts.append(more)
            total += len(more)
        data = b"".join(parts)
    if len(data) > cap:
        raise BadInput(f"{shown} grew past {cap} bytes while it was read.",
                       hint="Something is still writing it: wait for it to finish, then run the command again.")
    return data


def _check_regular(fd: int, *, shown: str, cap: int) -> int:
    """The size of the regular file open at `fd`; anything else, or a size over `cap`, is exit 6."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{shown} is not a regular file (a directory, FIFO, socket or device); imgquilt does not read it.",
                       hint=f"Replace {shown} with a regular file.")
    if st.st_size > cap:
        raise BadInput(f"{shown} is {st.st_size} bytes, more than imgquilt reads ({cap} bytes).",
                       hint="Split it (one patch per file), or check that it is the file you meant.")
    return st.st_size


