"""Outputs appear whole or not at all: write a temp file beside the destination, fsync, rename."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
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


@contextmanager
def atomic_file(dest: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """Yield a file to write; on success it replaces `dest`, on error it is removed."""
    dest = Path(dest)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
        fsync_dir(dest.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write(dest: Path, data: bytes, mode: int = 0o644) -> None:
    with atomic_file(dest, mode) as f:
        f.write(data)
