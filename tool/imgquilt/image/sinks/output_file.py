"""Output files and directories appear whole or not at all (through util.atomic); OS errors become a UsageError."""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from ...errors import UsageError
from ...fs.content import Data, is_spooled, link_content_at, write_all
from ...util.atomic import atomic_file, replace_dir


def check_output_path(dest: Path, *, what: str) -> None:
    """Refuse an output whose directory is missing or which names a directory."""
    if not dest.parent.is_dir():
        raise UsageError(f"Cannot write the {what} {str(dest)!r}: directory {str(dest.parent)!r} does not exist.")
    if dest.is_dir():
        raise UsageError(f"Cannot write the {what} {str(dest)!r}: it is a directory.")


@contextmanager
def output_file(dest: Path, *, what: str = "output") -> Iterator[BinaryIO]:
    """A temp file beside `dest` that replaces it on success; OS errors become a UsageError."""
    dest = Path(dest)
    check_output_path(dest, what=what)
    try:
        with atomic_file(dest) as fh:
            yield fh
    except OSError as exc:
        raise UsageError(f"Cannot write the {what} {str(dest)!r}: {exc.strerror or exc}.") from None


def write_bytes_atomic(dest: Path, data: bytes, *, what: str = "output") -> None:
    """Write `data` to `dest` whole or not at all."""
    with output_file(dest, what=what) as fh:
        fh.write(data)


@contextmanager
def output_dir(dest: Path, *, failure: str) -> Iterator[Path]:
    """A new directory beside `dest` to fill; it takes `dest`'s place on success and is removed on error.

    `failure` starts the message of the UsageError an OS error becomes ("Cannot write the overlay 'x'").
    """
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    except OSError as exc:
        raise UsageError(f"{failure}: {exc.strerror}.") from None
    try:
        os.chmod(tmp, 0o755)
        yield tmp
        replace_dir(tmp, dest)  # an earlier directory is moved aside, then dropped
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise UsageError(f"{failure}: {exc.strerror or exc}.") from None
        raise


def put_content(dest: Path, data: Data) -> None:
    """Put `data` at `dest` whole or not at all: a spooled content is linked there when it can be (its
    own temp file, same filesystem; or a reflink), else copied by the kernel; bytes are written."""
    dest = Path(dest)
    if is_spooled(data):
        tmp = f".{dest.name}.imgquilt-{os.getpid()}-{id(data)}.tmp"
        dfd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            if link_content_at(data, dfd, tmp):
                os.chmod(tmp, 0o644, dir_fd=dfd)
                os.replace(tmp, dest.name, src_dir_fd=dfd, dst_dir_fd=dfd)
                os.fsync(dfd)
                return
        finally:
            os.close(dfd)
    with atomic_file(dest) as fh:
        fh.flush()
        write_all(fh.fileno(), data)
