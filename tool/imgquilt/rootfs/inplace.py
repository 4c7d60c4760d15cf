"""Apply a verified result to an extracted rootfs in place, all or nothing, even across kill -9.

`hold_root` locks the root (flock on the directory itself) and recovers a crashed apply before
anything else, so the plan is read under the lock from a root that is exactly old or exactly new.
`write_in_place` then checks every path (nothing written on a refusal) and runs three phases, each
opened by rewriting the journal (see journal.py) once:

  prepare  create missing parent directories, hard-link a backup of every existing target, write
           every new content to a temp beside its target (fsync'd, owner, mode and xattrs set);
  commit   rename each temp over its target, or unlink it, for a deletion;
  clean    the commit point: from here on the new tree wins; drop the backups (and remove the
           directories an `apply --reverse` takes away, when they are empty), then the journal.

Recovery of a `prepare` or `commit` journal rolls back (backups renamed back, created files, temps
and directories removed); of a `clean` journal rolls forward (backups removed). Every step is
idempotent, so a crash during recovery is recovered by the next run.
"""
from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

from ..queue.hunks import sha256_hex
from ..engine.record import names_series, with_created_dirs
from ..engine.result import RECORD_PATH, ApplyResult, FileResult
from ..errors import BaseDrift, RootWriteFailed, UnsafePath
from ..fs.content import Data, write_all
from ..fs.types import TargetFile
from .dirfd import lstat_at, open_dir, open_root, parent_dir, split, unlink_quiet
from .journal import Entry, Journal, clear_journal_temps, drop_journal, read_journal, write_journal
from .source import RootfsSource

_HINTS = {
    errno.EROFS: "The root is on a read-only filesystem: remount it read-write, or apply onto a writable copy.",
    errno.ENOSPC: "The filesystem is full: imgquilt needs room for one new copy of every changed file; free space and re-run.",
    errno.EDQUOT: "The disk quota is exhausted: imgquilt needs room for one new copy of every changed file.",
    errno.EACCES: "Permission denied: run as the owner of the root (or root), and check for immutable files (lsattr, chattr -i).",
    errno.EPERM: "Operation not permitted: a file or directory may be immutable or append-only (lsattr, chattr -i), "
                 "or keeping its security xattrs needs root.",
    errno.ENAMETOOLONG: "A name is longer than the filesystem allows; such a path cannot be patched in place.",
}
_RACE = "The root changed while imgquilt was working on it: make sure nothing else writes to it, then re-run."


@dataclass(frozen=True)
class HeldRoot:
    """A root directory open and flock'ed for one apply; recovered when taken."""

    path: Path
    fd: int


def _failed(root: Path, where: str, exc: OSError) -> RootWriteFailed:
    name = errno.errorcode.get(exc.errno or 0, "error")
    return RootWriteFailed(
        f"Writing in place to {root} failed at {where!r}: {exc.strerror or exc} ({name}). "
        f"The root was rolled back and holds exactly what it held before.",
        hint=_HINTS.get(exc.errno or 0, _RACE),
    )


def _open_locked(root: Path) -> int:
    """The root directory, open and flock'ed (the directory itself: a lock file would be a write)."""
    try:
        fd = open_root(root)
    except OSError as exc:
        raise RootWriteFailed(f"Cannot open the root {root}: {exc.strerror or exc}.", hint=_HINTS.get(exc.errno or 0, _RACE)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        os.close(fd)
        raise RootWriteFailed(f"Cannot lock the root {root}: {exc.strerror or exc}.",
                              hint="imgquilt locks the root directory (flock) so applies do not overlap; use a filesystem that supports it.") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def hold_root(root: Path | None) -> Iterator[HeldRoot | None]:
    """Lock `root` for a whole apply and recover a crashed one first; None passes through."""
    if root is None:
        yield None
        return
    fd = _open_locked(Path(root))
    try:
        held = HeldRoot(Path(root), fd)
        _recover(held)
        yield held
    finally:
        os.close(fd)


def recover(root: Path) -> bool:
    """Finish what a crashed apply left, under the lock. True when there was a journal."""
    fd = _open_locked(Path(root))
    try:
        return _recover(HeldRoot(Path(root), fd))
    finally:
        os.close(fd)


def _recover(held: HeldRoot) -> bool:
    try:
        j = read_journal(held.fd, held.path)
        if j is not None:
            if j.phase == "clean":
                _roll_forward(held.fd, j)
            else:
                _roll_back(held.fd, j)
            drop_journal(held.fd)
        clear_journal_temps(held.fd)
    except OSError as exc:
        raise RootWriteFailed(
            f"Recovering the apply that crashed in {held.path} failed: {exc.strerror or exc}; the journal is kept.",
            hint=_HINTS.get(exc.errno or 0, _RACE) + " The next `imgquilt apply --root` retries the recovery.",
        ) from None
    return j is not None



def _same(a: os.stat_result | None, b: os.stat_result | None) -> bool:
    return a is not None and b is not None and (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev)


def _lstat(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _roll_back(root_fd: int, j: Journal) -> None:
    """Undo a prepare or commit phase; each step may already be done by an earlier, interrupted run."""
    for i in reversed(range(len(j.entries))):
        e = j.entries[i]
        try:
            _undo_entry(root_fd, j, i, e)
        except (FileNotFoundError, UnsafePath):
            continue  # its directory was never created, so nothing of it exists
    _remove_dirs(root_fd, j.dirs)


def _undo_entry(root_fd: int, j: Journal, i: int, e: Entry) -> None:
    with parent_dir(root_fd, e.path) as (dfd, name):
        unlink_quiet(dfd, j.new_name(i))
        if e.has_old:
            old = _lstat(dfd, j.old_name(i))
            if old is not None:
                if _same(old, _lstat(dfd, name)):
                    os.unlink(j.old_name(i), dir_fd=dfd)  # never replaced: rename() between links is a no-op
                else:
                    os.replace(j.old_name(i), name, src_dir_fd=dfd, dst_dir_fd=dfd)
        elif j.phase == "commit":
            try:
                unlink_quiet(dfd, name)  # absent before, under the lock: what is there is ours
            except IsADirectoryError:
                # a directory this apply made for a file below the path (an older imgquilt let a series put
                # a file below a link it creates): _remove_dirs takes it away, once emptied
                if e.path not in j.dirs:
                    raise
        os.fsync(dfd)


def _remove_dirs(root_fd: int, dirs: tuple[str, ...]) -> None:
    for d in reversed(dirs):
        parents, name = split(d)
        try:
            pfd = open_dir(root_fd, parents)
        except (FileNotFoundError, UnsafePath):
            continue
        try:
            os.rmdir(name, dir_fd=pfd)
            os.fsync(pfd)
        except (FileNotFoundError, OSError) as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise
        finally:
            os.close(pfd)


def _roll_forward(root_fd: int, j: Journal) -> None:
    """Finish a clean phase: the renames are all done, only backups (and no temps) may be left."""
    for i, e in enumerate(j.entries):
        try:
            with parent_dir(root_fd, e.path) as (dfd, name):
                unlink_quiet(dfd, j.old_name(i))
                unlink_quiet(dfd, j.new_name(i))
                os.fsync(dfd)
        except (FileNotFoundError, UnsafePath):
            continue
    _remove_dirs(root_fd, j.gone)


def _read_current(root: Path, changed: list[FileResult]) -> dict[str, TargetFile]:
    """Under the lock, the root must still hold the verified bases (or already the results).

    Returns the targets as the root resolves them: that decides where to write, since a root given
    with --image may resolve a path differently from the image.
    """
    links = [f.target.path for f in changed if f.link or f.target.link]
    cur = RootfsSource(root).read_targets([f.target.path for f in changed], links=links)
    for f in changed:
        now = cur[f.target.path]
        if (now.data, now.link) in ((f.target.data, f.target.link), (f.final, f.link)) or f.target.path == RECORD_PATH:
            continue  # the record is imgquilt's own, never a target the series verifies
        raise BaseDrift(
            f"Refused: {f.target.path} (resolved: {now.resolved}) in {root} has sha256 {sha256_hex(now.data)}, "
            f"but the verified base is {sha256_hex(f.target.data)}; nothing was written.",
            hint="The root is not the filesystem that was verified (or it changed meanwhile): apply onto a copy of that "
                 f"image. A file edited by hand goes back with `imgquilt restore PATH... --root {root}`; a queue imgquilt "
                 f"applied there comes off with `imgquilt apply --reverse --root {root}`.",
        )
    return cur


def _bytecode_removals(root_fd: int, result: ApplyResult, changing: set[str]) -> list[tuple[FileResult, Entry]]:
    """A deletion of each stale bytecode file of a source this write changes, while it is still a
    regular file: removed in the same transaction as the sources, so a crash leaves both old or both new."""
    out = []
    for b in result.bytecode:
        if b.source not in changing or b.path in changing:
            continue
        try:
            st = lstat_at(root_fd, b.path)
        except UnsafePath:
            continue
        if st is not None and (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):  # a link: itself, never its target
            out.append((FileResult(TargetFile(b.path, b.path, None), None, 0o644, 0, 0, ()), Entry(b.path, True, True)))
    return out


def _record_only_noop(changes: list[tuple[FileResult, Entry]], here: dict[str, TargetFile], result: ApplyResult) -> bool:
    """Re-running a series on a root already at its result: keep the record it has (a no-op is a no-op)."""
    if len(changes) != 1 or changes[0][0].target.path != RECORD_PATH:
        return False
    return names_series(here[RECORD_PATH].data, result.series_sha256)


def _check_paths(root: Path, root_fd: int, entries: list[Entry], old_links: set[str] = frozenset(),  # type: ignore[assignment]
                 links: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Every refusal before the first write; returns the directories to create, in order.
    `old_links`: paths whose old entry is a symlink (replaced or removed as itself, never followed).
    `links`: the paths whose removal may find a symlink (bytecode in __pycache__: the link itself goes)."""
    dirs: list[str] = []
    for e in entries:
        parents, name = split(e.path)  # UnsafePath for `..`: e.g. a dangling link climbing out of the root
        if len(os.fsencode(name)) > 255:
            raise RootWriteFailed(f"Cannot write {e.path!r} in {root}: its name is longer than 255 bytes; nothing was written.",
                                  hint=_HINTS[errno.ENAMETOOLONG])
        fd = os.dup(root_fd)
        try:
            for k, part in enumerate(parents):
                st = _lstat(fd, part)
                if st is None:
                    dirs.extend(d for d in ("/".join(parents[: m + 1]) for m in range(k, len(parents))) if d not in dirs)
                    break
                if not stat.S_ISDIR(st.st_mode):
                    raise UnsafePath(
                        f"Cannot write {e.path!r} in {root}: {'/'.join(parents[: k + 1])!r} is a "
                        f"{'symlink' if stat.S_ISLNK(st.st_mode) else 'non-directory'}; imgquilt does not follow it, and nothing was written.",
                        hint=_RACE,
                    )
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nfd
            else:
                st = _lstat(fd, name)
                kind_ok = stat.S_ISLNK if e.path in old_links else stat.S_ISREG
                linked = e.delete and e.path in links and st is not None and stat.S_ISLNK(st.st_mode)
                if e.has_old and (st is None or not kind_ok(st.st_mode)) and not linked:
                    what = "a symlink" if e.path in old_links else "a regular file"
                    raise UnsafePath(f"Cannot write {e.path!r} in {root}: it is no longer {what}; nothing was written.", hint=_RACE)
                if not e.has_old and st is not None:
                    raise UnsafePath(f"Cannot write {e.path!r} in {root}: something appeared there; nothing was written.", hint=_RACE)
        finally:
            os.close(fd)
    made = set(dirs)
    clash = next((e.path for e in entries if e.path in made), None)
    if clash is not None:  # the plan refuses it first (engine.plan.check_resolved_link_parents); never a wedged root
        raise UnsafePath(f"Cannot write {clash!r} in {root}: another file of this write lies below it, where it would be "
                         "a directory; nothing was written.", hint="Name each file by the path its links lead to.")
    return tuple(dirs)


def _copy_xattrs(dfd: int, name: str, to_fd: int) -> None:
    """Keep the old file's extended attributes (file capabilities, ACLs, labels) on its replacement."""
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    try:
        try:
            names = os.listxattr(src)
        except OSError as exc:
            if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                return
            raise
        for attr in names:
            os.setxattr(to_fd, attr, os.getxattr(src, attr))
    finally:
        os.close(src)


def _write_link(dfd: int, tmp: str, target: bytes, f: FileResult) -> None:
    """A symlink at `tmp` pointing at `target` (verbatim bytes), owned as the result says."""
    os.symlink(target, tmp, dir_fd=dfd)
    if os.geteuid() == 0:
        os.chown(tmp, f.uid, f.gid, dir_fd=dfd, follow_symlinks=False)


def _write_file(dfd: int, name: str, tmp: str, data: Data, f: FileResult, has_old: bool) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        write_all(fd, data)  # a large result (Spooled) by copy_file_range: never held in memory
        if os.geteuid() == 0:
            os.fchown(fd, f.uid, f.gid)
        os.fchmod(fd, f.mode)  # after chown: chown clears setuid bits
        if has_old:
            _copy_xattrs(dfd, name, fd)  # after chown: chown drops security.capability
        os.fsync(fd)
    finally:
        os.close(fd)


class _Writer:
    """One apply's phases over an open, locked root; `where` names the path an OSError concerns."""

    def __init__(self, held: HeldRoot, j: Journal, finals: list[FileResult], old_links: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.held, self.j, self.finals, self.where = held, j, finals, ".imgquilt-journal.json"
        self.old_links = old_links

    def phase(self, name: str) -> None:
        self.where = ".imgquilt-journal.json"
        self.j = self.j.at(name)
        write_journal(self.held.fd, self.j)

    def each(self) -> Iterator[tuple[int, Entry, int, str]]:
        for i, e in enumerate(self.j.entries):
            self.where = e.path
            with parent_dir(self.held.fd, e.path) as (dfd, name):
                yield i, e, dfd, name

    def prepare(self) -> None:
        root_fd = self.held.fd
        for d in self.j.dirs:
            self.where = d
            parents, name = split(d)
            pfd = open_dir(root_fd, parents)
            try:
                os.mkdir(name, 0o755, dir_fd=pfd)
            finally:
                os.close(pfd)
        for i, e, dfd, name in self.each():
            if e.has_old:
                os.link(name, self.j.old_name(i), src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            f = self.finals[i]
            if f.final is not None and f.link:
                _write_link(dfd, self.j.new_name(i), f.final, f)
            elif f.final is not None:  # xattrs come from a regular file it replaces, never from a link
                _write_file(dfd, name, self.j.new_name(i), f.final, f, e.has_old and e.path not in self.old_links)
        self.sync_dirs()

    def commit(self) -> None:
        for i, e, dfd, name in self.each():
            if e.delete:
                os.unlink(name, dir_fd=dfd)
            else:
                os.replace(self.j.new_name(i), name, src_dir_fd=dfd, dst_dir_fd=dfd)
        self.sync_dirs()

    def clean(self) -> None:
        for i, e, dfd, _ in self.each():
            if e.has_old:
                unlink_quiet(dfd, self.j.old_name(i))
        self.sync_dirs()
        self.where = ", ".join(self.j.gone) or "."
        _remove_dirs(self.held.fd, self.j.gone)

    def sync_dirs(self) -> None:
        """One fsync per directory touched, so a phase is durable before the next journal says so."""
        seen: set[str] = set()
        for e in self.j.entries:
            parents, _ = split(e.path)
            d = "/".join(parents)
            if d not in seen:
                seen.add(d)
                self.where = d or "."
                fd = open_dir(self.held.fd, parents)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


def write_in_place(root: Path, result: ApplyResult, *, held: HeldRoot | None = None,
                   gate: Callable[[], None] | None = None, remove_dirs: tuple[str, ...] = ()) -> list[str]:
    """Write every changed file of `result` into `root` atomically as a whole; return resolved paths.

    `held`: the lock hold_root took before the plan was read; without it, one is taken here.
    `gate`: called after the files are staged and before the commit; when it raises, the staged
    files are rolled back (the root stays exactly old) and its error goes on.
    `remove_dirs`: directories to remove with the change where they are left empty, in the order they
    were made (`apply --reverse`: those its apply created; removed deepest first, past the commit, so a
    crash finishes them).
    The directories this write creates are listed in the record it writes (`created_dirs`).
    """
    if held is None:
        with hold_root(root) as mine:
            assert mine is not None
            return write_in_place(root, result, held=mine, gate=gate, remove_dirs=remove_dirs)
    changed = [f for f in result.files if f.changed]
    try:
        here = _read_current(root, changed)
    except OSError as exc:
        raise _failed(root, exc.filename or ".", exc) from None
    changes = [(f, Entry(here[f.target.path].resolved, here[f.target.path].data is not None, f.final is None))
               for f in changed if _differs(here[f.target.path], f)]
    old_links = {here[f.target.path].resolved for f, _ in changes if here[f.target.path].link}
    if not changes or _record_only_noop(changes, here, result):
        return []
    try:
        removals = _bytecode_removals(held.fd, result, {e.path for _, e in changes})
    except OSError as exc:
        raise _failed(root, exc.filename or ".", exc) from None
    changes += removals
    entries = [e for _, e in changes]
    try:
        dirs = _check_paths(root, held.fd, entries, old_links, frozenset(e.path for _, e in removals))
    except OSError as exc:
        raise _failed(root, exc.filename or ".", exc) from None
    finals = [_with_dirs(f, dirs) for f, _ in changes]
    for d in remove_dirs:
        split(d)
    w = _Writer(held, Journal(secrets.token_hex(16), "prepare", tuple(entries), dirs, tuple(remove_dirs)), finals, old_links)
    try:
        w.phase("prepare")
        w.prepare()
        if gate is not None:
            gate()
        w.phase("commit")
        w.commit()
        w.phase("clean")  # the commit point
    except BaseException as exc:
        where = w.where
        if _undo(held) and isinstance(exc, OSError):
            return [e.path for e in entries]
        if isinstance(exc, OSError):
            raise _failed(root, where, exc) from None
        raise
    try:
        w.clean()
        drop_journal(held.fd)
    except OSError as exc:
        if _undo(held):
            return [e.path for e in entries]
        raise RootWriteFailed(
            f"The patched files are in place in {root}, but removing the backups failed at {w.where!r}: "
            f"{exc.strerror or exc}.",
            hint="The next `imgquilt apply --root` on it finishes the cleanup.",
        ) from None
    return [e.path for e in entries]


def _differs(now: TargetFile, f: FileResult) -> bool:
    """Does the root still need this result written: other bytes, another kind, or (a file whose mode the
    series changes) other permission bits?"""
    if now.data != f.final or (f.final is not None and now.link != f.link):
        return True
    mode_change = f.target.data is not None and (f.mode & 0o7777) != (f.target.mode & 0o7777)
    return f.final is not None and not f.link and mode_change and (now.mode & 0o7777) != (f.mode & 0o7777)


def _with_dirs(f: FileResult, dirs: tuple[str, ...]) -> FileResult:
    """The record names the directories this apply creates, so that `apply --reverse` removes exactly those."""
    if f.target.path != RECORD_PATH or f.final is None or not dirs:
        return f
    return replace(f, final=with_created_dirs(f.final, dirs))


def _undo(held: HeldRoot) -> bool:
    """After a failure in this process, recover as a crash would: from the journal on disk, which
    says how far the apply got. True when it had passed the commit point (the new tree stands)."""
    try:
        j = read_journal(held.fd, held.path)
        if j is not None and j.phase == "clean":
            _roll_forward(held.fd, j)
        elif j is not None:
            _roll_back(held.fd, j)
        if j is not None:
            drop_journal(held.fd)
        clear_journal_temps(held.fd)
    except OSError as exc:
        raise RootWriteFailed(
            f"Writing in place to {held.path} failed, and so did rolling it back ({exc.strerror or exc}); "
            f"the journal is kept.",
            hint="Fix the cause (space, permissions, a read-only mount); the next `imgquilt apply --root` on it rolls it back.",
        ) from None
    return j is not None and j.phase == "clean"
