"""An image's layers unpacked into a directory, as the container runtime would lay them: bottom layer
first, OCI whiteouts (`.wh.NAME` deletes NAME below it, `.wh..wh..opq` hides what lower layers put in
its directory), regular files, directories, symlinks and hard links; device nodes, FIFOs and sparse
files are skipped (a sandbox brings its own /dev; no image builder writes sparse members).

Nothing is ever written outside `dest`: a member name that is absolute or holds `..` is taken as
relative and normalized, and every parent directory is resolved inside `dest` (symlinks re-rooted at
`dest`, as in the container) and then opened component by component without following a link.
Directory modes are set last, so a read-only directory of a lower layer does not stop a later one.

The tar is walked by image.layers.tarwalk (headers decoded by slicing; a file's data written from
the decompressed chunks it lies in, uncopied), not Python's tarfile: per member, that was most of
the unpacker's own CPU. Nothing is fsynced here: the tree is trusted only once cache.rootfs seals it.

With a `pool` directory (cache.rootfs's, on the same filesystem, believed by the caller), each regular
file of at least POOL_MIN bytes is stored once: files with the same bytes, mode and owner are one inode,
in a tree and across trees. Smaller files are written and not pooled: on the vLLM-sized image they are
89% of the files and 6% of the bytes, and what pooling them saved (3.5 MB of 2 GB) cost more than a
second of hashing, a pool lookup and a link each (docs/performance.md).

Two files can only be the same when they have the same size, mode and owner (their shape), and on a
real image almost every large file's shape is its own (5,440 of the vLLM image's 6,451 pooled files,
1.82 of its 1.92 GB): so a file is hashed only once its shape is known. The first file of a shape is
linked as `shapes/<size>-<mode>-<uid>-<gid>` and not hashed; a later file of that shape (of this tree
or another image's) is hashed, and so is, once per unpack, the first of its shape, which is then
linked into the pool by its sha256 as `<sha256[:2]>/<sha256>-<mode>-<uid>-<gid>` (the inode read and
hashed, by its descriptor). The later file is then linked there too, or, when the pool has its twin,
replaced by a link to it (an atomic rename) if its name still holds the inode written. The hashes
come from a thread beside the writer, which reads each file back through its descriptor into one
reused buffer (preadv and hashlib let go of the GIL).
"""
from __future__ import annotations

import hashlib
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
import posixpath
import stat
from pathlib import Path
from typing import BinaryIO, Iterable

from ..errors import BadInput
from ..fs.resolve import resolve
from ..image.layers.tarwalk import DIRECTORY, HARDLINK, SYMLINK, TarWalker
from ..util.reader import Reader
from .dirfd import open_dir
from .source import RootfsSource

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
POOL_MIN = 16 << 10  # a smaller file is not pooled (see the docstring)
SHAPES = "shapes"  # the pool's directory of each shape's first file (not hashed)
_INFLIGHT_BYTES = 128 << 20  # written, not yet hashed and linked: the hasher reads it back while it is in the page cache
_INFLIGHT_FILES = 256  # ... and the descriptors held open
_AS_ROOT = os.geteuid() == 0
_REGULAR = frozenset("07")  # regular, contiguous ("\0", the old regular, is read as "0")
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_RW = _CREATE & ~os.O_WRONLY | os.O_RDWR  # a pooled file: the hasher reads it back
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _norm(name: str) -> str | None:
    if not name.startswith((".", "/")) and "/." not in name and "//" not in name:
        return name.rstrip("/") or None  # already clean: the usual case
    parts = [p for p in posixpath.normpath("/" + name).split("/") if p not in ("", ".")]
    return "/".join(parts) or None


class _Stream(Reader):
    """A layer's tar (a binary file) as the stream TarWalker reads: read() hands over whole chunks, a skip
    reads through (the decompressing stream under it checks the layer's digest at its end)."""

    chunk = 4 << 20

    def __init__(self, f: BinaryIO) -> None:
        self._read_some = f.read  # type: ignore[method-assign,assignment]


class _Tree:
    def __init__(self, dest: Path, pool: Path | None = None) -> None:
        self.dest = dest
        self.fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.dir_modes: dict[str, int] = {}
        self.pool = pool
        self._pool_dirs: dict[str, int] = {}  # "ab" (or SHAPES) -> fd of pool/ab
        self._firsts_hashed: set[str] = set()  # the shapes whose first file this unpack hashed
        # the pool's sha256 is computed by a thread beside the writer: (its future, fd, dir fd, name, size,
        # key tail, and the first of its shape to pool beside it: its future and fd, or None and -1)
        self.hasher = ThreadPoolExecutor(1, thread_name_prefix="imgquilt-pool") if pool is not None else None
        self.pending: deque[tuple[Future, int, int, str, int, str, Future | None, int]] = deque()
        self.inflight = 0
        self.bytes = 0  # of the regular files written
        # head -> (its fd, resolved), the most recent few: a tar lists a directory's files together.
        # parent() lends these fds: valid until the next parent() call, which closes the stale ones.
        self._known: dict[str, tuple[int, str]] = {}
        self._stale: list[int] = []
        # who owns what this process creates (in a setgid directory the group is the directory's: unknown)
        self.ids = (os.geteuid(), os.getegid()) if not os.fstat(self.fd).st_mode & stat.S_ISGID else (-1, -1)
        self.umask = os.umask(0o022)
        os.umask(self.umask)

    def close(self) -> None:
        if self.hasher is not None:
            self.hasher.shutdown(wait=True, cancel_futures=True)  # no thread left holding a chunk
            for _, fd, dfd, _, _, _, _, first_fd in self.pending:
                os.close(fd)
                os.close(dfd)
                if first_fd >= 0:
                    os.close(first_fd)
            self.pending.clear()
        self.forget()
        self._close_stale()
        for fd in self._pool_dirs.values():
            os.close(fd)
        self._pool_dirs.clear()
        os.close(self.fd)

    def forget(self) -> None:
        """Drop the remembered parents: a link, a whiteout or a replaced directory may change what a path resolves to."""
        self._stale.extend(fd for fd, _ in self._known.values())
        self._known.clear()

    def _close_stale(self) -> None:
        for fd in self._stale:
            os.close(fd)
        self._stale.clear()

    def parent(self, rel: str) -> tuple[int, str, str]:
        """(fd of the resolved parent directory, made as needed, lent until the next call; the name in
        it; the resolved path)."""
        if self._stale:
            self._close_stale()
        head, _, name = rel.rpartition("/")
        known = self._known.get(head)
        if known is not None:
            resolved = known[1]
            return known[0], name, f"{resolved}/{name}" if resolved else name
        fd, resolved = self._below_known(head)
        if fd < 0:
            fd, resolved = self._resolved(head)
        if len(self._known) >= 64:
            old = next(iter(self._known))
            self._stale.append(self._known.pop(old)[0])
        self._known[head] = (fd, resolved)
        return fd, name, f"{resolved}/{name}" if resolved else name

    def _below_known(self, head: str) -> tuple[int, str]:
        """(fd, resolved) of `head` opened from its nearest remembered ancestor, component by component,
        made as needed, when every component below that is a real directory; (-1, "") when one is not
        (a symlink, a file): the caller resolves from the root then. A tar lists a directory before
        its files, so the parent of a new directory is usually remembered."""
        rest: list[str] = []
        up = head
        while up:
            up, _, last = up.rpartition("/")
            rest.append(last)
            known = self._known.get(up)
            if known is not None:
                fd, resolved = os.dup(known[0]), known[1]
                break
        else:
            fd, resolved = os.dup(self.fd), ""
        try:
            for part in reversed(rest):
                if part in ("", ".", ".."):
                    os.close(fd)
                    return -1, ""
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nfd
                resolved = f"{resolved}/{part}" if resolved else part
        except OSError:
            os.close(fd)
            return -1, ""
        return fd, resolved

    def _resolved(self, head: str) -> tuple[int, str]:
        """(fd, resolved) of `head` resolved from the root, links re-rooted at it, made as needed."""
        resolved = ""
        if head:
            try:
                r = resolve(head, RootfsSource._lookup(self.fd))
            except BadInput:
                raise _Skip() from None
            if r.node is not None and r.node.kind != "dir":
                raise _Skip()
            resolved = r.resolved
        try:
            return open_dir(self.fd, resolved.split("/") if resolved else [], create=True), resolved
        except (OSError, BadInput):
            raise _Skip() from None

    def remove(self, dfd: int, name: str) -> None:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(st.st_mode):
            self.forget()
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            try:
                for child in os.listdir(sub):
                    self.remove(sub, child)
            finally:
                os.close(sub)
            os.rmdir(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)

    def create(self, dfd: int, name: str, mode: int, flags: int = _CREATE) -> int:
        """A new empty file `name` in dfd (`mode` less the umask), whatever was there removed (never followed)."""
        mode &= 0o777
        try:
            return os.open(name, flags, mode, dir_fd=dfd)
        except FileExistsError:
            self.remove(dfd, name)
            return os.open(name, flags, mode, dir_fd=dfd)

    def pool_dir(self, key: str) -> int | None:
        """The fd of the pool's directory for `key` (made as needed); None when the pool cannot be written."""
        return self._pool_sub(key[:2])

    def _pool_sub(self, sub: str) -> int | None:
        fd = self._pool_dirs.get(sub)
        if fd is None:
            assert self.pool is not None
            try:
                os.makedirs(self.pool / sub, mode=0o700, exist_ok=True)
                fd = os.open(self.pool / sub, _DIR_FLAGS)
            except OSError:
                return None
            self._pool_dirs[sub] = fd
        return fd

    def first_of_shape(self, fd: int, shape: str, size: int) -> tuple[bool, int]:
        """Link the file just written (`fd`) as the first of its `shape` when the pool has none: (True,
        -1), nothing to hash. Else (False, the fd of the pool's first of that shape, to hash and pool
        beside it, once per shape and unpack; -1 when it is not to be: hashed already, or not a
        regular file of that size). A pool that cannot be written: (True, -1), the tree keeps its copy."""
        sfd = self._pool_sub(SHAPES)
        if sfd is None:
            return True, -1
        try:
            os.link(f"/proc/self/fd/{fd}", shape, dst_dir_fd=sfd, follow_symlinks=True)  # the inode written
            return True, -1
        except FileExistsError:
            pass
        except OSError:
            return True, -1  # no /proc, or the pool refuses it: the tree keeps its copy
        if shape in self._firsts_hashed:
            return False, -1
        self._firsts_hashed.add(shape)
        try:
            first = os.open(shape, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=sfd)
        except OSError:
            return False, -1
        st = os.fstat(first)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            os.close(first)
            return False, -1
        return False, first

    def hashed(self, fd: int, dfd: int, name: str, job: Future, size: int, key_tail: str,
               first: tuple[Future | None, int] = (None, -1)) -> None:
        """The file just written (`fd`, still open, at `name` in `dfd`) is pooled once the hasher's `job`
        gives its sha256, after the first of its shape (`first`: its job and fd) when that is to be
        pooled too; the oldest pending files are settled while too much is waiting."""
        self.pending.append((job, fd, os.dup(dfd), name, size, key_tail, *first))
        self.inflight += size
        while self.inflight > _INFLIGHT_BYTES or len(self.pending) > _INFLIGHT_FILES:
            self.settle_one()

    def settle(self) -> None:
        """Every pending file pooled (before a hard link names one, and at the end of a layer)."""
        while self.pending:
            self.settle_one()

    def settle_one(self) -> None:
        fut, fd, dfd, name, size, key_tail, first_fut, first_fd = self.pending.popleft()
        self.inflight -= size
        try:
            if first_fut is not None:
                self._pool_first(f"{first_fut.result()}-{key_tail}", first_fd)
            key = f"{fut.result()}-{key_tail}"
            pfd = self.pool_dir(key)
            if pfd is None:
                return  # a pool that cannot be written (another filesystem, full): the tree keeps its copy
            try:
                # the inode written, by its descriptor: whatever its name became meanwhile, never another file
                os.link(f"/proc/self/fd/{fd}", key, dst_dir_fd=pfd, follow_symlinks=True)
            except FileExistsError:
                self.twin(fd, dfd, name, pfd, key, size)
            except OSError:
                pass  # gone (a later member removed it), or no /proc: the tree keeps its copy
        finally:
            os.close(fd)
            os.close(dfd)
            if first_fd >= 0:
                os.close(first_fd)

    def _pool_first(self, key: str, fd: int) -> None:
        """The first file of a shape, hashed (`fd`: the inode read), linked into the pool by its sha256."""
        pfd = self.pool_dir(key)
        if pfd is None:
            return
        try:
            os.link(f"/proc/self/fd/{fd}", key, dst_dir_fd=pfd, follow_symlinks=True)
        except OSError:
            pass  # there already (the same bytes, from another tree), or gone: nothing to add

    def twin(self, fd: int, dfd: int, name: str, pfd: int, key: str, size: int) -> None:
        """Replace `name` by a hard link to the pool's `key` if it still is the inode `fd` wrote (and the
        pool's is a regular file of that size: a planted entry is never linked)."""
        try:
            mine = os.fstat(fd)
            now = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            st = os.stat(key, dir_fd=pfd, follow_symlinks=False)
        except OSError:
            return
        if (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino) or not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return
        tmp = f".{name}.imgquilt-link"
        try:
            os.link(key, tmp, src_dir_fd=pfd, dst_dir_fd=dfd, follow_symlinks=False)
        except OSError:
            return  # a name too long, or a member of that name: the tree keeps its copy
        try:
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:
            os.unlink(tmp, dir_fd=dfd)


class _Skip(Exception):
    """A member that cannot be placed inside the root (its parent is a file, or a link loop)."""


def extract_layers(dest: Path, layers: Iterable[tuple[str, BinaryIO]], *, pool: Path | None = None,
                   written: list[int] | None = None) -> int:
    """Unpack `layers` (digest, uncompressed tar stream), bottom first, into the empty directory
    `dest`; returns how many members were skipped. `pool`: store identical files once (see the module
    docstring); `written`: gets the bytes of regular files written appended."""
    tree = _Tree(dest, pool)
    skipped = 0
    try:
        for digest, stream in layers:
            walker = TarWalker(_Stream(stream), what=f"layer {digest}")
            skipped += _layer(tree, walker)  # a stream that is not a tar: BadImage from the walker
            tree.settle()
        tree.forget()
        for rel, mode in sorted(tree.dir_modes.items(), key=lambda x: -x[0].count("/")):
            try:
                os.chmod(rel, mode, dir_fd=tree.fd, follow_symlinks=False)
            except (OSError, NotImplementedError, ValueError):
                pass  # gone, or a symlink now (a later layer replaced it): Linux cannot chmod a link, ValueError says so
    finally:
        tree.close()
    if written is not None:
        written.append(tree.bytes)
    return skipped


def _owner(uid: int, gid: int) -> tuple[int, int]:
    return (uid, gid) if _AS_ROOT else (os.geteuid(), os.getegid())


def _write(tree: _Tree, dfd: int, name: str, pieces, mode: int, uid: int, gid: int, keep: bool = False) -> int:
    """Write the file; with `keep`, the fd is returned open (the caller closes it), else closed (-1)."""
    fd = tree.create(dfd, name, mode, _CREATE_RW if keep else _CREATE)
    try:
        for view in pieces:
            while view:
                view = view[os.write(fd, view):]
        # A new file is ours (no directory is setgid before the final chmod), made with `mode` less
        # the umask: a chown or chmod that would change nothing is not made (two syscalls a file).
        if _AS_ROOT and (uid, gid) != tree.ids:
            os.fchown(fd, uid, gid)  # clears setuid/setgid bits: the chmod below puts them back
            os.fchmod(fd, mode)
        elif mode & ~0o777 or mode & tree.umask:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    if keep:
        return fd
    os.close(fd)
    return -1


_HASH_BUF = 1 << 20


def _sha256_of(fd: int, size: int) -> str:
    """On the hasher thread: the sha256 of the file just written, read back through its descriptor (from
    the page cache) into one reused buffer. Holding the decompressed chunks for the hasher instead cost
    a copy and fresh memory for every byte pooled (page faults, a second of system time on vLLM)."""
    digest = hashlib.sha256()
    buf = bytearray(min(_HASH_BUF, max(size, 1)))
    view = memoryview(buf)
    at = 0
    while at < size:
        n = os.preadv(fd, [view[: min(len(buf), size - at)]], at)
        if n <= 0:
            break  # shorter than written (cannot happen to our own new inode): the key will not match a twin
        digest.update(view[:n])
        at += n
    return digest.hexdigest()


def _file(tree: _Tree, walker: TarWalker, dfd: int, name: str, mode: int, uid: int, gid: int, size: int) -> None:
    """One regular member: written, and pooled when it is large enough (see the module docstring)."""
    tree.bytes += size
    if tree.hasher is None or size < POOL_MIN:
        _write(tree, dfd, name, walker.data_pieces(), mode, uid, gid)
        return
    fd = _write(tree, dfd, name, walker.data_pieces(), mode, uid, gid, keep=True)
    ouid, ogid = _owner(uid, gid)
    tail = f"{mode:o}-{ouid}-{ogid}"
    try:
        alone, first_fd = tree.first_of_shape(fd, f"{size}-{tail}", size)
    except BaseException:
        os.close(fd)
        raise
    if alone:
        os.close(fd)
        return
    first_job = tree.hasher.submit(_sha256_of, first_fd, size) if first_fd >= 0 else None
    job = tree.hasher.submit(_sha256_of, fd, size)
    tree.hashed(fd, dfd, name, job, size, tail, (first_job, first_fd))


def _layer(tree: _Tree, walker: TarWalker) -> int:
    skipped = 0
    made: set[str] = set()  # paths this layer put in place (an opaque whiteout keeps them)
    for m in walker:
        rel = _norm(m.name)
        if rel is None:
            continue
        try:
            dfd, name, resolved = tree.parent(rel)
        except _Skip:
            skipped += 1
            continue
        kind = m.type
        if kind in _REGULAR and m.name.endswith("/"):
            kind = DIRECTORY  # the old (v7) way to say a directory
        try:
            if name == OPAQUE:
                parent = resolved.rpartition("/")[0]
                for child in os.listdir(dfd):
                    if (f"{parent}/{child}" if parent else child) not in made:
                        tree.remove(dfd, child)
            elif name.startswith(WHITEOUT):
                tree.remove(dfd, name[len(WHITEOUT):])
            elif kind == DIRECTORY:
                try:
                    os.mkdir(name, 0o755, dir_fd=dfd)
                except FileExistsError:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):
                        tree.remove(dfd, name)
                        os.mkdir(name, 0o755, dir_fd=dfd)
                tree.dir_modes[resolved] = m.mode
                _own(dfd, name, m.uid, m.gid)
                made.add(resolved)
            elif kind in _REGULAR and not m.sparse:
                _file(tree, walker, dfd, name, m.mode, m.uid, m.gid, m.size)
                made.add(resolved)
            elif kind == SYMLINK:
                tree.remove(dfd, name)  # forgets the remembered parents if what it removes is not a file
                os.symlink(m.linkname, name, dir_fd=dfd)
                _own(dfd, name, m.uid, m.gid)
                made.add(resolved)
            elif kind == HARDLINK:
                tree.settle()  # the file it names is in the pool (or not) before it gets a second name
                target = _norm(m.linkname)
                if target is None:
                    skipped += 1
                    continue
                dfd = os.dup(dfd)  # the next parent() may close the lent one
                try:
                    tfd, tname, _ = tree.parent(target)
                    tree.remove(dfd, name)
                    os.link(tname, name, src_dir_fd=tfd, dst_dir_fd=dfd, follow_symlinks=False)
                    made.add(resolved)
                except (_Skip, OSError):
                    skipped += 1
                finally:
                    os.close(dfd)
            else:
                skipped += 1  # a device node, FIFO or sparse file
        except OSError:
            skipped += 1
    walker.finish()
    return skipped


def _own(dfd: int, name: str, uid: int, gid: int) -> None:
    if _AS_ROOT:
        try:
            os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            pass
