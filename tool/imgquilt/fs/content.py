"""File contents as imgquilt carries them: `bytes` when small, `Spooled` (a file) when large.

Most files a queue patches are small, and carrying them as `bytes` is the fastest thing there is.
A model's weights, a tokenizer or a wheel are not: a content larger than `spool_at()` bytes is
written to an anonymous temp file (the queue's `.imgquilt/tmp` when a verb set one with
`set_spool_home`, else the system's temp directory) as it is made, and carried as a `Spooled`: an
open file, an offset and a size, its sha256 computed on the way. It reads back in chunks and lines,
never whole; sinks copy it with the kernel's copy_file_range; the object store links it (no second
copy). So memory stays flat in the size of a file.

`Data` (bytes | Spooled) is what `TargetFile.data`, `FileChange.data` and `FileResult.final` hold.
A Spooled compares equal to bytes or another Spooled with the same sha256, and `len()` is its size, so
code that only compares or measures contents takes either. Code that needs the bytes whole (the
Python check, a diff, a 3-way merge) asks `held()`, which refuses a content over `in_memory_max()`
(IMGQUILT_IN_MEMORY_MAX, default 64 MiB) with exit 6 naming the setting.

A Spooled may also be a range of a file imgquilt did not write (a big patch file, a file in a root):
then every read first checks the file is unchanged (device, inode, size, mtime, ctime as when it was
opened), and a changed one is an error, never silently other bytes.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Union

from ..errors import BadInput, SpoolFull, TooLargeToHold, UsageError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

CHUNK = 1 << 20
SPOOL_AT_ENV = "IMGQUILT_SPOOL_AT"
IN_MEMORY_MAX_ENV = "IMGQUILT_IN_MEMORY_MAX"
SPOOL_DIR_ENV = "IMGQUILT_SPOOL_DIR"
DEFAULT_SPOOL_AT = 8 << 20
DEFAULT_IN_MEMORY_MAX = 64 << 20
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(raw: str, *, name: str) -> int:
    """`8388608`, `8M`, `8MiB`, `1G`: a byte count (binary units); anything else is a UsageError."""
    m = _SIZE.match(raw)
    if not m:
        raise UsageError(f"{name}={raw!r} is not a size: give bytes, or a number with K, M or G (binary units).")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


_sizes: dict[tuple[str, str], int] = {}  # (variable, its text) -> bytes: asked per patch and per content


def _env_size(name: str, default: int) -> int:
    from ..settings import current

    raw = current().of(name)
    if not raw:
        return default
    size = _sizes.get((name, raw))
    if size is None:
        text = raw.strip()
        size = _sizes[(name, raw)] = parse_size(text, name=name) if text else default
    return size


def in_memory_max() -> int:
    """The largest content imgquilt holds in memory whole (a patch file parsed in memory, a .py file
    checked, a file diffed or merged): IMGQUILT_IN_MEMORY_MAX, default 64 MiB."""
    return max(_env_size(IN_MEMORY_MAX_ENV, DEFAULT_IN_MEMORY_MAX), 1)


def spool_at() -> int:
    """Contents larger than this are carried in a temp file, not in memory (IMGQUILT_SPOOL_AT, default
    8 MiB; never above in_memory_max()). The tests set it to a few bytes to run every streamed path."""
    return max(min(_env_size(SPOOL_AT_ENV, DEFAULT_SPOOL_AT), in_memory_max()), 0)


# --- where spooled contents go ------------------------------------------------------------------
_home: str | None = None
_make_home = None
_home_lock = threading.Lock()


def set_spool_home(path: Path | str | None, make=None) -> None:
    """Spool into `path` from now on: a verb sets its queue's `.imgquilt/tmp`, so the object store beside
    it can link a spooled result instead of copying it. `make()` (called once, at the first spool)
    creates it, checked to be a real directory; when it fails, spooling goes to the system's temp."""
    global _home, _make_home
    with _home_lock:
        _home = None if path is None else str(path)
        _make_home = make


def spool_home() -> str | None:
    return _home


def _spool_dirs() -> list[str]:
    global _make_home
    with _home_lock:
        if _make_home is not None:
            make, _make_home = _make_home, None
            try:
                make()
            except Exception:  # a read-only or hostile queue: spool elsewhere
                globals()["_home"] = None
    from ..settings import current

    dirs = [d for d in ((current().of(SPOOL_DIR_ENV) or "").strip() or None, _home) if d]
    return dirs + [tempfile.gettempdir()]


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # no room (a full disk, a quota, RLIMIT_FSIZE)


def _anonymous_file() -> tuple[int, str]:
    """A new temp file with no name (O_TMPFILE; else made and unlinked at once), and the directory it is
    in: nothing to clean up, even after kill -9. O_TMPFILE files can still be linked into the store
    (`Spooled.link_at`). A directory that refuses one (read-only, full, not there, a loop of links) gives
    way to the next."""
    last: OSError | None = None
    for d in _spool_dirs():
        try:
            return os.open(d, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600), d
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT, errno.EACCES,
                                 errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.ELOOP, *_FULL):
                raise
            last = exc
        try:
            fd, name = tempfile.mkstemp(prefix=".imgquilt-spool-", dir=d)
        except OSError as exc:
            last = exc
            continue
        os.unlink(name)
        return fd, d
    if last is not None and last.errno in _FULL:
        raise spool_full(", ".join(_spool_dirs()), last, 0)
    raise BadInput(f"imgquilt found no directory to spool a large file into ({last}).",
                   hint=f"Set {SPOOL_DIR_ENV} to a writable directory with room for the file.")


def spool_full(where: str, exc: OSError, written: int) -> SpoolFull:
    """No room to set a large content aside in `where` (the spool directory, or each one tried)."""
    code = errno.errorcode.get(exc.errno or 0, "error")
    done = f" after {written} bytes" if written else ""
    return SpoolFull(f"The spool directory {where} is full ({code}{done}): imgquilt sets aside there each "
                     f"content larger than {SPOOL_AT_ENV} ({spool_at()} bytes) while it works, and there is no "
                     "room for this one (what it was reading is not at fault).",
                     hint=f"Free space there, or point {SPOOL_DIR_ENV} at a directory with room for the largest "
                          "file the command reads or writes, and run again.")


class _Backing:
    """An open file that Spooled contents read with pread: our own temp (`owned`), or a file imgquilt
    only reads, whose stamp must not change while it is used."""

    __slots__ = ("fd", "owned", "stamp", "shown", "__weakref__")

    def __init__(self, fd: int, *, owned: bool, shown: str = "") -> None:
        self.fd = fd
        self.owned = owned
        self.shown = shown
        self.stamp = None if owned else _stamp(os.fstat(fd))

    def check(self) -> None:
        if self.stamp is not None and _stamp(os.fstat(self.fd)) != self.stamp:
            raise BadInput(f"{self.shown or 'A file imgquilt reads'} changed while imgquilt read it.",
                           hint="Run again once nothing else writes to it.")

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except (OSError, TypeError):
            pass


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _pread_full(fd: int, n: int, pos: int) -> bytes:
    parts = []
    while n > 0:
        got = os.pread(fd, min(n, 64 << 20), pos)
        if not got:
            raise BadInput("A spooled file ended early (was it truncated by another process?).")
        parts.append(got)
        n -= len(got)
        pos += len(got)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class Spooled:
    """A content held in a file: `size` bytes at `offset` of an open file; sha256 known (or computed once)."""

    __slots__ = ("_backing", "offset", "size", "_sha256")

    def __init__(self, backing: _Backing, offset: int, size: int, sha256: str | None = None) -> None:
        self._backing = backing
        self.offset = offset
        self.size = size
        self._sha256 = sha256

    # --- made from ---
    @classmethod
    def of_file(cls, fd: int, *, shown: str, offset: int = 0, size: int | None = None,
                sha256: str | None = None) -> "Spooled":
        """A range of a file imgquilt reads but does not own (takes `fd`; it is closed with the last user)."""
        backing = _Backing(fd, owned=False, shown=shown)
        total = os.fstat(fd).st_size
        return cls(backing, offset, total - offset if size is None else size, sha256)

    def with_sha256(self, sha256: str) -> "Spooled":
        """The same content, its sha256 known (computed by a caller that read it anyway)."""
        return Spooled(self._backing, self.offset, self.size, sha256)

    def slice(self, offset: int, size: int) -> "Spooled":
        """`size` bytes from `offset` of this content (sha256 computed when asked)."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError("slice outside the content")
        return Spooled(self._backing, self.offset + offset, size)

    # --- identity ---
    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            h = hashlib.sha256()
            for chunk in self.chunks():
                h.update(chunk)
            self._sha256 = h.hexdigest()
        return self._sha256

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Spooled):
            return self.size == other.size and (self is other or self.sha256 == other.sha256)
        if isinstance(other, (bytes, bytearray, memoryview)):
            return self.size == len(other) and self.sha256 == hashlib.sha256(other).hexdigest()
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        # equal to bytes with the same content, so the same hash as those bytes where they can be read
        return hash(self.pread(self.size, 0)) if self.size <= in_memory_max() else hash(self.sha256)

    def __repr__(self) -> str:
        return f"Spooled(size={self.size}, sha256={self._sha256 or '?'})"

    # --- reading ---
    @property
    def fd(self) -> int:
        return self._backing.fd

    @property
    def owned(self) -> bool:
        """True for a temp file of imgquilt's own (nobody else can write it)."""
        return self._backing.owned

    def pread(self, n: int, pos: int) -> bytes:
        """Up to `n` bytes from `pos` (relative to this content)."""
        n = max(0, min(n, self.size - pos))
        if not n:
            return b""
        self._backing.check()
        return _pread_full(self._backing.fd, n, self.offset + pos)

    def head(self, n: int) -> bytes:
        return self.pread(n, 0)

    def __getitem__(self, key):
        """A slice (step 1) or one byte, read from the file: `data[:4]`, `data[8:16]` work on a Spooled
        as on bytes; anything that needs the whole content asks held() instead."""
        if isinstance(key, int):
            if key < 0:
                key += self.size
            if not 0 <= key < self.size:
                raise IndexError("Spooled index out of range")
            return self.pread(1, key)[0]
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a Spooled takes an index or a slice with step 1")
        start, stop, _ = key.indices(self.size)
        if start == 0 and stop - start > in_memory_max():
            raise TooLargeToHold(f"A slice of {stop - start} bytes of a spooled file was asked for whole.")
        return self.pread(max(0, stop - start), start)

    def chunks(self, size: int = CHUNK, start: int = 0) -> Iterator[bytes]:
        self._backing.check()
        pos = start
        while pos < self.size:
            n = min(size, self.size - pos)
            yield _pread_full(self._backing.fd, n, self.offset + pos)
            pos += n
        self._backing.check()

    def reader(self) -> "SpooledReader":
        return SpooledReader(self)

    def to_bytes(self, what: str = "a file") -> bytes:
        """The whole content, when it is at most in_memory_max() bytes; else TooLargeToHold (exit 6)."""
        limit = in_memory_max()
        if self.size > limit:
            raise TooLargeToHold(
                f"{what} is {self.size} bytes; imgquilt holds at most {limit} bytes of one file in memory, "
                "and this step needs it whole.",
                hint=f"Raise the limit with {IN_MEMORY_MAX_ENV}=SIZE (e.g. 2G) if the machine has the memory.")
        return self.pread(self.size, 0)

    # --- writing it elsewhere ---
    def copy_to_fd(self, out_fd: int) -> None:
        """Append the content to `out_fd` (at its position) in the kernel where it can: copy_file_range."""
        self._backing.check()
        pos, end = self.offset, self.offset + self.size
        use_cfr = hasattr(os, "copy_file_range")
        while pos < end:
            n = min(end - pos, 1 << 30)
            if use_cfr:
                try:
                    done = os.copy_file_range(self._backing.fd, out_fd, n, pos)
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF):
                        raise
                    use_cfr = False
                    continue
                if done == 0:
                    raise BadInput("A spooled file ended early (was it truncated by another process?).")
                pos += done
                continue
            data = _pread_full(self._backing.fd, min(n, CHUNK), pos)
            view = memoryview(data)
            while view:
                view = view[os.write(out_fd, view):]
            pos += len(data)
        self._backing.check()

    def link_at(self, dir_fd: int, name: str) -> bool:
        """Make `name` in `dir_fd` hold this content without copying it: a hard link to our own temp
        (it is never written again), else a reflink (copy-on-write) of any file. False: neither
        works here (another filesystem, no reflinks); nothing was made."""
        whole = self.offset == 0 and os.fstat(self._backing.fd).st_size == self.size
        if whole and self._backing.owned:
            try:
                os.link(f"/proc/self/fd/{self._backing.fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)
                return True
            except OSError:
                pass
        return self._reflink_at(dir_fd, name)

    def _reflink_at(self, dir_fd: int, name: str) -> bool:
        import fcntl

        if self.offset != 0 or os.fstat(self._backing.fd).st_size != self.size:
            return False
        try:
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        except OSError:
            return False
        try:
            fcntl.ioctl(out, 0x40049409, self._backing.fd)  # FICLONE
            self._backing.check()
            return True
        except OSError:
            os.close(out)
            out = -1
            try:
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                pass
            return False
        finally:
            if out >= 0:
                os.close(out)


class SpooledReader:
    """A file-like reader over a Spooled (its own position; pread underneath)."""

    def __init__(self, content: Spooled) -> None:
        self._c = content
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        left = self._c.size - self._pos
        if n < 0 or n > left:
            n = left
        if n <= 0:
            return b""
        data = self._c.pread(min(n, 64 << 20), self._pos)
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._c.size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def close(self) -> None:
        pass


Data = Union[bytes, Spooled]


class SpoolWriter:
    """Collects a content written in pieces: in memory up to `at` bytes, then into an anonymous temp
    file; `finish()` gives bytes or a Spooled whose sha256 was computed on the way."""

    def __init__(self, at: int | None = None) -> None:
        self._at = spool_at() if at is None else at
        self._buf = bytearray()
        self._fd = -1
        self._dir = ""
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) > (CHUNK if self._fd >= 0 else self._at):
            self._flush()

    def tell(self) -> int:
        """Bytes written so far (a tar writer asks)."""
        return self.size + len(self._buf)

    def write_content(self, data: Data) -> None:
        if isinstance(data, Spooled):
            for chunk in data.chunks():
                self.write(chunk)
        else:
            self.write(data)

    @property
    def spilled(self) -> bool:
        return self._fd >= 0

    def _flush(self) -> None:
        if self._fd < 0:
            self._fd, self._dir = _anonymous_file()
        view = memoryview(self._buf)
        self._hash.update(view)
        start = self.size
        self.size += len(view)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            if exc.errno in _FULL:  # the spool's own disk, not whatever was being read
                raise spool_full(self._dir, exc, start + len(self._buf) - len(view)) from None
            code = errno.errorcode.get(exc.errno or 0, "error")
            raise BadInput(f"Cannot write to the spool directory {self._dir}: {exc.strerror or exc} ({code}).",
                           hint=f"Point {SPOOL_DIR_ENV} at a writable directory of your own, and run again.") from None
        finally:
            view.release()
        self._buf = bytearray()

    def finish(self) -> Data:
        if self._fd < 0:
            out = bytes(self._buf)
            self._buf = bytearray()
            return out
        if self._buf:
            self._flush()
        fd, self._fd = self._fd, -1
        return Spooled(_Backing(fd, owned=True), 0, self.size, self._hash.hexdigest())

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._buf = bytearray()

    def __del__(self) -> None:
        self.abort()


def spool_from(chunks, at: int | None = None) -> Data:
    """A content from an iterable of byte chunks (bytes when it stays small)."""
    w = SpoolWriter(at)
    try:
        for c in chunks:
            w.write(c)
    except BaseException:
        w.abort()
        raise
    return w.finish()


# --- helpers over Data (bytes or Spooled) -----------------------------------------------------
_DIGESTS: dict[int, tuple[bytes, str]] = {}  # id -> (the bytes, held so the id stays theirs; their sha256)
_DIGESTS_HELD = [0]
_DIGESTS_MAX = 64 << 20  # bytes kept alive for it, the oldest let go first
_DIGEST_MEMO_MIN = 4096  # below this, hashing costs less than remembering
_digests_lock = threading.Lock()


def sha256_of(data: Data) -> str:
    """The content's sha256 (hex). One content is hashed once per process: a base is checked when read
    from the cache, against its pin, and again when it is remembered, and a result likewise, all of
    the same immutable `bytes` object, so its digest is remembered by identity (the object is held
    while remembered, so its id cannot be another's)."""
    if isinstance(data, Spooled):
        return data.sha256
    if type(data) is not bytes or len(data) < _DIGEST_MEMO_MIN:
        return hashlib.sha256(data).hexdigest()
    hit = _DIGESTS.get(id(data))
    if hit is not None and hit[0] is data:
        return hit[1]
    digest = hashlib.sha256(data).hexdigest()
    with _digests_lock:
        _DIGESTS[id(data)] = (data, digest)
        _DIGESTS_HELD[0] += len(data)
        while _DIGESTS_HELD[0] > _DIGESTS_MAX and _DIGESTS:
            old, _ = _DIGESTS.pop(next(iter(_DIGESTS)))
            _DIGESTS_HELD[0] -= len(old)
    return digest


def chunks_of(data: Data, size: int = CHUNK, start: int = 0) -> Iterator[bytes]:
    """The content from `start` on, `size` bytes at a time (bytes that fit in one chunk: themselves)."""
    if isinstance(data, Spooled):
        yield from data.chunks(size, start)
    elif start == 0 and len(data) <= size:
        if data:
            yield data
    else:
        view = memoryview(data)
        for i in range(start, len(data), size):
            yield bytes(view[i : i + size])


def pread_of(data: Data, n: int, pos: int) -> bytes:
    """Up to `n` bytes from `pos` (fewer only at the end): a Spooled read from its file, bytes sliced."""
    return data.pread(n, pos) if isinstance(data, Spooled) else data[pos : pos + n]


def slice_of(data: Data, offset: int, size: int) -> Data:
    """`size` bytes from `offset` of the content, carried as the content is (a Spooled's range is not read)."""
    return data.slice(offset, size) if isinstance(data, Spooled) else data[offset : offset + size]


def head_of(data: Data, n: int) -> bytes:
    return data.head(n) if isinstance(data, Spooled) else data[:n]


def held(data: Data, what: str = "a file") -> bytes:
    """The content as bytes (a Spooled read whole, within in_memory_max(); else TooLargeToHold)."""
    return data.to_bytes(what) if isinstance(data, Spooled) else data


def held_if_small(data: Data) -> bytes | None:
    """The content as bytes when it can be held (bytes always; a Spooled of at most in_memory_max()),
    else None: for a step that has an answer without the bytes (too large to be an apply record, to
    look for each change in)."""
    if isinstance(data, Spooled):
        return None if data.size > in_memory_max() else data.to_bytes()
    return data


def held_or_none(data: Data | None, what: str = "a file") -> bytes | None:
    return None if data is None else held(data, what)


def is_spooled(data: object) -> TypeIs[Spooled]:
    """Is the content carried in a file (so a step that would hold it whole streams it instead)?"""
    return isinstance(data, Spooled)


def link_content_at(data: Data, dir_fd: int, name: str) -> bool:
    """Make `name` in `dir_fd` hold the content without writing it (Spooled.link_at); False, and
    nothing made, where that cannot be done: bytes are always written."""
    return isinstance(data, Spooled) and data.link_at(dir_fd, name)


def open_reader(data: Data):
    """A binary file-like reader over the content."""
    import io

    return data.reader() if isinstance(data, Spooled) else io.BytesIO(data)


def write_all(fd: int, data: Data) -> None:
    """Write the whole content at `fd`'s position (a Spooled by copy_file_range)."""
    if isinstance(data, Spooled):
        data.copy_to_fd(fd)
        return
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def copy_to_spool(fd: int, *, shown: str, offset: int = 0, size: int | None = None) -> Data:
    """A range of the open file `fd` (to its end by default) copied into a spooled content, its sha256
    computed on the way; the file must not change meanwhile (size, mtime, ctime), else BadInput."""
    before = _stamp(os.fstat(fd))
    end = before[2] if size is None else offset + size
    out = SpoolWriter()
    try:
        pos = offset
        while pos < end:
            chunk = os.pread(fd, min(CHUNK, end - pos), pos)
            if not chunk:
                raise BadInput(f"{shown} shrank while imgquilt read it.", hint="Run again once nothing else writes to it.")
            out.write(chunk)
            pos += len(chunk)
        if _stamp(os.fstat(fd)) != before:
            raise BadInput(f"{shown} changed while imgquilt read it.", hint="Run again once nothing else writes to it.")
    except BaseException:
        out.abort()
        raise
    return out.finish()
