"""Reading blobs where they lie (a file in a layout, or a member of an archive at an offset).

Three raw streams on the one reader base (util.reader: `read`, `skip`, `drain`, `close`; each gives its
`_read_some`), with `peek` beside:
- `FileRange`: positional reads of a byte range; `skip` seeks. Used where no digest is to be checked
  (a flat tar) or where the blob was already verified and its file has not changed since.
- `CheckedRange`: a FileRange whose digest a second thread computes over the whole range while the
  caller reads (and seeks) where it likes. The end of the stream (b"") and `drain` only ever return
  after the digest matched; a mismatch raises DigestMismatch instead. Callers that build results
  from a blob therefore read it to its end (`drain`) before they use anything from it.
- `HashingRange`: reads the range in order and hashes every byte in line (`open_blob`, for copies).
"""
from __future__ import annotations

import io
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ...cache.seal import entry_seal, entry_sealed
from ...errors import BadImage, BadInput
from ...util.reader import Reader
from ...util.regular import read_regular_file
from ..digests import CopyCheck, new_hasher, sha256_digest, split_digest, verify_digest

CHUNK = 2 << 20  # 2 MiB reads: big enough to amortise syscalls and hashing calls


@dataclass(frozen=True)
class BlobLocation:
    """Where a blob's bytes are: `size` bytes at `offset` in the file at `path`."""

    path: Path
    offset: int
    size: int

    def describe(self) -> str:
        return str(self.path) if self.offset == 0 else f"{self.path} (at byte {self.offset})"


def file_location(path: Path) -> BlobLocation | None:
    """The whole of a regular file as a blob location; None if there is no such file."""
    try:
        return BlobLocation(path, 0, path.stat().st_size) if path.is_file() else None
    except OSError:
        return None


Fingerprint = tuple[int, int, int, int, int]


def fingerprint(path: Path) -> Fingerprint:
    """What identifies a file's current content without reading it (ctime changes on every write)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


_MARKER = "verified-blob"


class VerifiedBlobs:
    """Blobs whose digest imgquilt has checked, keyed by location and the file's fingerprint.

    Kept in memory for the process and, with a cache directory, on disk: a later run may then skip
    over (seek past) the data of an unchanged, already verified blob instead of hashing it again. A
    marker on disk is believed only when sealed under the cache key (cache.seal).
    """

    def __init__(self, cache_dir: Path | None = None) -> None:
        self._dir = cache_dir / "verified" if cache_dir is not None else None
        self._mem: dict[tuple[str, str, int, int], Fingerprint] = {}

    @staticmethod
    def _key(digest: str, loc: BlobLocation) -> tuple[str, str, int, int]:
        return (digest, str(Path(loc.path).resolve()), loc.offset, loc.size)

    def _marker(self, key: tuple[str, str, int, int]) -> Path | None:
        if self._dir is None:
            return None
        algo, hexpart = split_digest(key[0])
        where = sha256_digest(json.dumps(key[1:]).encode())[7:23]
        return self._dir / f"{algo}-{hexpart}-{where}"

    def is_verified(self, digest: str, loc: BlobLocation | None) -> bool:
        if loc is None:
            return False  # a download: no file whose fingerprint could vouch for it
        key = self._key(digest, loc)
        try:
            now = fingerprint(loc.path)
        except OSError:
            return False
        if self._mem.get(key) == now:
            return True
        marker = self._marker(key)
        if marker is None:
            return False
        try:  # the queue's cache is untrusted: a link or FIFO planted as a marker is never followed
            saved = json.loads(read_regular_file(marker, cap=1 << 16, follow=False) or b"")
        except (OSError, ValueError, BadInput):
            return False
        if not isinstance(saved, dict) or tuple(saved.get("fingerprint") or ()) != now or saved.get("key") != list(key):
            return False
        if not entry_sealed(saved.get("seal"), _MARKER, json.dumps([list(key), list(now)])):
            return False  # not one this user (or team key) wrote: hash the blob again, never an error
        self._mem[key] = now
        return True

    def trusted_now(self, digest: str, loc: BlobLocation | None) -> Fingerprint | None:
        """The file's fingerprint when `digest` is known verified for it (else None): for a sink that
        links the blob and must not hash it again."""
        if loc is None or not self.is_verified(digest, loc):
            return None
        try:
            return fingerprint(loc.path)
        except OSError:
            return None

    def relinked(self, digest: str, loc: BlobLocation, before: Fingerprint) -> bool:
        """After a hard link to the verified blob (which changes its ctime, nothing else): remember it
        as verified again, when device, inode, size and mtime are what they were. False: it changed."""
        try:
            now = fingerprint(loc.path)
        except OSError:
            return False
        if now[:4] != before[:4]:
            return False
        self.mark(digest, loc, now)
        return True

    def mark(self, digest: str, loc: BlobLocation | None, seen: Fingerprint) -> None:
        """Record that `digest` matched the blob at `loc` while its file had fingerprint `seen`."""
        if loc is None:
            return
        try:
            if fingerprint(loc.path) != seen:
                return  # the file changed while we read it: remember nothing
        except OSError:
            return
        key = self._key(digest, loc)
        self._mem[key] = seen
        marker = self._marker(key)
        if marker is None:
            return
        seal = entry_seal(_MARKER, json.dumps([list(key), list(seen)]))
        if seal is None:
            return  # no cache key: a marker would never be believed
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            tmp = marker.with_name(marker.name + f".tmp{os.getpid()}")
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644), "w") as f:
                f.write(json.dumps({"key": list(key), "fingerprint": list(seen), "seal": seal}))
            os.replace(tmp, marker)
        except OSError:
            pass  # the cache is an optimisation only


def _open_fd(loc: BlobLocation, what: str, *, check_size: bool = True) -> int:
    try:
        fd = os.open(loc.path, os.O_RDONLY)
    except OSError as exc:
        raise BadImage(f"Cannot open {what} at {loc.describe()}: {exc.strerror}.") from None
    size = os.fstat(fd).st_size
    if check_size and loc.offset + loc.size > size:
        os.close(fd)
        raise BadImage(
            f"The {what} at {loc.describe()} is truncated: it should hold {loc.size} bytes "
            f"but the file ends after {max(0, size - loc.offset)}.",
            hint="The archive or layout is incomplete; copy it again.",
        )
    return fd


class _OwnsFd(Reader):
    """A reader that owns one file descriptor: closing closes it."""

    _fd: int

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FileRange(_OwnsFd):
    """A byte range of a file, read with pread; skipping seeks. Nothing is verified."""

    seekable = True
    chunk = CHUNK

    def __init__(self, loc: BlobLocation, *, what: str = "blob", fd: int | None = None) -> None:
        self.loc = loc
        self._fd = _open_fd(loc, what) if fd is None else fd
        self._pos = 0
        self.bytes_read = 0

    @property
    def offset(self) -> int:
        """How far into the range reading (or skipping) got: a progress bar's count of stored bytes."""
        return self._pos

    def dup(self) -> "FileRange":
        """The same range of the same open file (not of whatever the path names by now)."""
        return FileRange(self.loc, fd=os.dup(self._fd))

    def _read_some(self, n: int) -> bytes:
        n = min(n, self.loc.size - self._pos)
        if n <= 0:
            return b""
        data = os.pread(self._fd, n, self.loc.offset + self._pos)
        self._pos += len(data)
        self.bytes_read += len(data)
        return data

    def readinto(self, b) -> int:
        left = self.loc.size - self._pos
        view = memoryview(b).cast("B")
        if len(view) > left:
            view = view[: max(0, left)]
        if not len(view):
            return 0
        n = os.preadv(self._fd, [view], self.loc.offset + self._pos)  # straight into the caller's buffer
        self._pos += n
        self.bytes_read += n
        return n

    def pread(self, n: int, pos: int) -> bytes:
        n = max(0, min(n, self.loc.size - pos))
        return os.pread(self._fd, n, self.loc.offset + pos) if n else b""

    def peek(self, n: int) -> bytes:
        return self.pread(n, self._pos)

    def _skip_some(self, n: int) -> int:
        n = max(0, min(n, self.loc.size - self._pos))
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos



def _content_stamp(fd: int) -> tuple[int, int, int, int]:
    """What changes when a file's bytes change (unlike ctime, which a new hard link changes too)."""
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class RangeDigest:
    """The digest of a byte range, computed by a thread of its own.

    hashlib and pread release the GIL, so on a second core this costs the reader (a decompressor,
    a tar walk) nothing. `check()` waits for the thread and raises DigestMismatch on a mismatch.
    """

    def __init__(self, loc: BlobLocation, digest: str, *, what: str, fd: int) -> None:
        self.loc = loc
        self.digest = digest
        self.what = what
        self._fd = os.dup(fd)  # the file the reader has open, whatever its path names later
        self._content = _content_stamp(self._fd)
        self._stop = False
        self._error: str | None = None
        self._hexdigest: str | None = None
        self._thread = threading.Thread(target=self._run, name="imgquilt-digest", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            hasher = new_hasher(self.digest)
            buf = memoryview(bytearray(min(CHUNK, max(self.loc.size, 1))))
            pos, end = 0, self.loc.size
            while pos < end and not self._stop:
                n = os.preadv(self._fd, [buf[: min(len(buf), end - pos)]], self.loc.offset + pos)
                if n <= 0:
                    self._error = "truncated (the file shrank while read)"
                    return
                hasher.update(buf[:n])
                pos += n
            self._hexdigest = hasher.hexdigest()
        except OSError as exc:
            self._error = f"unreadable ({exc.strerror})"

    def check(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise BadImage(f"The {self.what} at {self.loc.describe()} is {self._error}.")
        if self._hexdigest is None:
            raise RuntimeError("digest thread stopped early")
        verify_digest(self.digest, self._hexdigest, what=self.what, where=self.loc.describe())
        # the reader and the digest thread read the file separately: both saw these bytes
        if _content_stamp(self._fd) != self._content:
            raise BadImage(f"The {self.what} at {self.loc.describe()} changed while imgquilt read it.",
                           hint="Run again once nothing else writes to the image.")

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _Fold:
    """A range's digest computed by the one thread that reads it in order (the decompressor): the
    compressed bytes are hashed in the read that feeds the inflater, not in a second pass."""

    def __init__(self, digest: str, fd: int) -> None:
        self.hasher = new_hasher(digest)
        self.pos = 0  # bytes hashed, from the start of the range
        self.lock = threading.Lock()
        self.done = False  # verified (or being verified): no more reads
        self.content = _content_stamp(fd)


class FoldedRange(FileRange):
    """A reader of a CheckedRange's bytes in order (its `dup()` in fold mode): every byte read goes
    through the range's digest on the way."""

    def __init__(self, loc: BlobLocation, fold: _Fold, *, fd: int) -> None:
        super().__init__(loc, fd=fd)
        self._fold = fold

    def readinto(self, b) -> int:
        with self._fold.lock:
            if self._fold.done:
                return 0
            n = super().readinto(b)
            if n:
                self._fold.hasher.update(memoryview(b).cast("B")[:n])
                self._fold.pos += n
            return n

    def _read_some(self, n: int) -> bytes:
        with self._fold.lock:
            if self._fold.done:
                return b""
            data = super()._read_some(n)
            if data:
                self._fold.hasher.update(data)
                self._fold.pos += len(data)
            return data

    _skip_some = Reader._skip_some  # by reading: every byte goes through the digest


class CheckedRange(FileRange):
    """A FileRange (skip seeks) whose digest is checked before its end is seen.

    `read` returns b"" and `drain` returns only once the digest matched; `verified` is then True.
    The digest is computed by a second thread over the stored bytes; with `fold` (a compressed blob,
    which its decompressor reads through `dup()` from start to end), by that reader instead, in the
    same read: one pass over the file, no thread of its own (the rest, if the decompressor stopped
    short, is hashed when the range is drained).
    """

    def __init__(self, loc: BlobLocation, digest: str, *, what: str = "blob", fold: bool = False) -> None:
        super().__init__(loc, what=what)
        self._fold: _Fold | None = None
        self._digest: RangeDigest | None = None
        try:
            if fold:
                self._fold = _Fold(digest, self._fd)
            else:
                self._digest = RangeDigest(loc, digest, what=what, fd=self._fd)
        except BaseException:
            super().close()
            raise
        self.digest = digest
        self.what = what
        self.verified = False

    def dup(self) -> FileRange:
        if self._fold is not None:
            return FoldedRange(self.loc, self._fold, fd=os.dup(self._fd))
        return super().dup()

    def _verify(self) -> None:
        if self.verified:
            return
        if self._fold is None:
            assert self._digest is not None
            self._digest.check()
            self.verified = True
            return
        fold = self._fold
        with fold.lock:
            fold.done = True  # the decompressor's reader reads nothing more
            pos, end = fold.pos, self.loc.size
            while pos < end:
                data = os.pread(self._fd, min(CHUNK, end - pos), self.loc.offset + pos)
                if not data:
                    raise BadImage(f"The {self.what} at {self.loc.describe()} is truncated (the file shrank while read).")
                fold.hasher.update(data)
                pos += len(data)
            fold.pos = pos
            verify_digest(self.digest, fold.hasher.hexdigest(), what=self.what, where=self.loc.describe())
            if _content_stamp(self._fd) != fold.content:
                raise BadImage(f"The {self.what} at {self.loc.describe()} changed while imgquilt read it.",
                               hint="Run again once nothing else writes to the image.")
        self.verified = True

    def _read_some(self, n: int) -> bytes:
        data = super()._read_some(n)
        if not data:
            self._verify()
        return data

    def drain(self) -> None:
        """Wait for the digest: raises DigestMismatch (or truncation) if the blob is bad."""
        super().drain()
        self._verify()

    def close(self) -> None:
        if self._digest is not None:
            self._digest.close()
        super().close()


class HashingRange(_OwnsFd):
    """A byte range read sequentially and hashed in line; b"" (the end) only after the digest matched.
    Skipping and draining read (the base's): the bytes must pass through the hash.

    With `copy`, a short file is no truncation error of its own: the byte count is checked with the digest.
    """

    chunk = CHUNK

    def __init__(self, loc: BlobLocation, digest: str, *, what: str = "blob", copy: CopyCheck | None = None) -> None:
        self.loc = loc
        self.digest = digest
        self.what = what
        self.copy = copy
        self._fd = _open_fd(loc, what, check_size=copy is None)
        self._hasher = new_hasher(digest)
        self._pos = 0
        self._done = False
        self.verified = False
        self.bytes_read = 0

    def _finish(self) -> None:
        self._done = True
        verify_digest(self.digest, self._hasher.hexdigest(), what=self.what, where=self.loc.describe(),
                      copy=self.copy, read=self.bytes_read)
        self.verified = True

    def _read_some(self, n: int) -> bytes:
        n = min(n, self.loc.size - self._pos)
        if n <= 0:
            if not self._done:
                self._finish()
            return b""
        data = os.pread(self._fd, n, self.loc.offset + self._pos)
        if not data and self.copy is not None:
            self._finish()  # a short copy: the byte count says so
        if not data:
            self._done = True
            raise BadImage(f"The {self.what} at {self.loc.describe()} is truncated (the file shrank while read).")
        self._hasher.update(data)
        self._pos += len(data)
        self.bytes_read += len(data)
        return data

    def peek(self, n: int) -> bytes:
        n = max(0, min(n, self.loc.size - self._pos))
        return os.pread(self._fd, n, self.loc.offset + self._pos) if n else b""



class HashingStream(Reader):
    """Hash whatever passes through another stream (for digests over decompressed data); skipping and
    draining read through the hash."""

    chunk = CHUNK

    def __init__(self, inner, digest: str, *, what: str, copy: CopyCheck | None = None) -> None:
        self._inner = inner
        self.digest = digest
        self.what = what
        self.copy = copy
        self._hasher = new_hasher(digest)
        self.verified = False
        self.bytes_read = 0

    def _check_end(self) -> None:
        verify_digest(self.digest, self._hasher.hexdigest(), what=self.what, copy=self.copy, read=self.bytes_read)
        self.verified = True

    def _read_some(self, n: int) -> bytes:
        data = self._inner.read(n)
        if data:
            self._hasher.update(data)
            self.bytes_read += len(data)
        elif not self.verified:
            self._check_end()
        return data

    def close(self) -> None:
        self._inner.close()
        super().close()


def read_verified(loc: BlobLocation, digest: str, *, what: str, limit: int) -> bytes:
    """Read a small blob (manifest, config, index) whole and check its digest."""
    if loc.size > limit:
        raise BadImage(f"The {what} {digest} is {loc.size} bytes; more than imgquilt accepts ({limit}).")
    with FileRange(loc, what=what) as f:
        data = f.read_exactly(loc.size)
    if len(data) != loc.size:
        raise BadImage(f"The {what} at {loc.describe()} is truncated.")
    verify_digest(digest, _hash(digest, data), what=what, where=loc.describe())
    return data


def _hash(digest: str, data: bytes) -> str:
    h = new_hasher(digest)
    h.update(data)
    return h.hexdigest()


class BlobFile(io.RawIOBase):
    """A blob as a read-only binary file (Layer.open_blob): verified as it is read.

    Reading to the end raises DigestMismatch if the bytes do not match; a caller that copies the
    blob somewhere must therefore read it to its end before keeping the copy.
    """

    def __init__(self, stream) -> None:
        super().__init__()
        self._s = stream

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        data = self._s.read(len(b))
        n = len(data)
        b[:n] = data
        return n

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        return self._s.read(n)

    def close(self) -> None:
        if not self.closed:
            self._s.close()
        super().close()
