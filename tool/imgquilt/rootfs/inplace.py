"""Apply a verified result to an extracted rootfs in place, all or nothing.

Three phases, under an exclusive lock on the root:
  prepare  every new content goes to a temp file beside its target (fsync'd, mode/owner set) and
           every existing target gets a hard-linked backup; a journal lists them all;
  commit   rename each temp over its target (or unlink, for a deletion);
  clean    drop the backups and the journal.
A failure during commit renames the backups back, so the root returns to its first state; a crash
leaves the journal, and the next in-place apply rolls it back before doing anything else.
"""
from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..queue.hunks import sha256_hex
from ..engine.result import ApplyResult, FileResult
from ..errors import BaseDrift
from ..fs.types import TargetFile
from .dirfd import open_dir, open_root, parent_dir, split
from .source import RootfsSource

STATE_DIR = "var/lib/imgquilt"
JOURNAL = STATE_DIR + "/journal.json"
NEW_SUFFIX = ".imgquilt-new"
OLD_SUFFIX = ".imgquilt-old"


@dataclass(frozen=True)
class _Entry:
    resolved: str
    has_old: bool  # the target existed (a backup was linked)
    delete: bool


def _tmp_name(name: str, suffix: str) -> str:
    return f".{name}{suffix}"


def _write_file(dfd: int, name: str, data: bytes, f: FileResult) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if os.geteuid() == 0:
            os.fchown(fd, f.uid, f.gid)
        os.fchmod(fd, f.mode)  # after chown: chown clears setuid bits
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quiet(dfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass


def _write_journal(root_fd: int, entries: list[_Entry], created: list[str]) -> None:
    data = json.dumps([e.__dict__ for e in entries], sort_keys=True).encode()
    with parent_dir(root_fd, JOURNAL, create=True, created=created) as (dfd, name):
        tmp = name + ".tmp"
        _unlink_quiet(dfd, tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)


def _remove_journal(root_fd: int) -> None:
    with parent_dir(root_fd, JOURNAL) as (dfd, name):
        _unlink_quiet(dfd, name)
        os.fsync(dfd)


def _restore(root_fd: int, e: _Entry) -> None:
    """Undo one entry: put the backup back (or remove a created file), drop the temp."""
    with parent_dir(root_fd, e.resolved) as (dfd, name):
        _unlink_quiet(dfd, _tmp_name(name, NEW_SUFFIX))
        if e.has_old:
            old = _tmp_name(name, OLD_SUFFIX)
            try:
                st_old = os.stat(old, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                return  # never linked, so the target was never touched
            try:
                st_cur = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                same = (st_cur.st_ino, st_cur.st_dev) == (st_old.st_ino, st_old.st_dev)
            except FileNotFoundError:
                same = False
            if same:
                # not committed yet; rename() between two links of one inode would do nothing
                os.unlink(old, dir_fd=dfd)
            else:
                os.replace(old, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        elif not e.delete:
            _unlink_quiet(dfd, name)


def recover(root: Path) -> bool:
    """Roll back an apply that crashed mid-way (a journal is left). True when there was one."""
    root_fd = open_root(root)
    try:
        try:
            with parent_dir(root_fd, JOURNAL) as (dfd, name):
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
                with os.fdopen(fd, "rb") as fh:
                    entries = [_Entry(**e) for e in json.loads(fh.read())]
        except FileNotFoundError:
            return False
        for e in reversed(entries):
            _restore(root_fd, e)
        _remove_journal(root_fd)
        return True
    finally:
        os.close(root_fd)


def _commit_one(dfd: int, name: str, e: _Entry) -> None:
    if e.delete:
        os.unlink(name, dir_fd=dfd)
    else:
        os.replace(_tmp_name(name, NEW_SUFFIX), name, src_dir_fd=dfd, dst_dir_fd=dfd)
    os.fsync(dfd)


def _read_current(root: Path, changed: list[FileResult]) -> dict[str, TargetFile]:
    """Under the lock, the root must still hold the verified bases (or already the results).

    Returns the targets as the root resolves them: that decides where to write, since a root given
    with --image may resolve a path differently from the image.
    """
    cur = RootfsSource(root).read_targets([f.target.path for f in changed])
    for f in changed:
        now = cur[f.target.path]
        if now.data == f.target.data or now.data == f.final:
            continue
        raise BaseDrift(
            f"Refused: {f.target.path} (resolved: {now.resolved}) in {root} has sha256 {sha256_hex(now.data)}, "
            f"but the verified base is {sha256_hex(f.target.data)}; nothing was written.",
            hint="The root is not the filesystem that was verified (or it changed meanwhile); apply onto a copy of that image.",
        )
    return cur


def _prepare(root_fd: int, f: FileResult, e: _Entry, created: list[str]) -> None:
    with parent_dir(root_fd, e.resolved, create=True, created=created) as (dfd, name):
        if e.has_old:
            _unlink_quiet(dfd, _tmp_name(name, OLD_SUFFIX))
            os.link(name, _tmp_name(name, OLD_SUFFIX), src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        if f.final is not None:
            _unlink_quiet(dfd, _tmp_name(name, NEW_SUFFIX))
            _write_file(dfd, _tmp_name(name, NEW_SUFFIX), f.final, f)


def _rollback(root_fd: int, entries: list[_Entry], created: list[str]) -> None:
    for e in reversed(entries):
        _restore(root_fd, e)
    _remove_journal(root_fd)
    for d in reversed(created):
        parents, name = split(d)
        pfd = open_dir(root_fd, parents)
        try:
            os.rmdir(name, dir_fd=pfd)
        except OSError:
            pass
        finally:
            os.close(pfd)


def write_in_place(root: Path, result: ApplyResult) -> list[str]:
    """Write every changed file of `result` into `root` atomically as a whole; return resolved paths."""
    root_fd = open_root(root)
    try:
        # lock the root directory itself: a lock file would be a write before verification
        fcntl.flock(root_fd, fcntl.LOCK_EX)
        recover(root)
        changed = [f for f in result.files if f.final != f.target.data]
        here = _read_current(root, changed)
        entries: list[_Entry] = []
        created: list[str] = []
        try:
            for f in changed:
                cur = here[f.target.path]
                if cur.data == f.final:
                    continue
                e = _Entry(cur.resolved, cur.data is not None, f.final is None)
                entries.append(e)
                _write_journal(root_fd, entries, created)
                _prepare(root_fd, f, e, created)
            for e in entries:
                with parent_dir(root_fd, e.resolved) as (dfd, name):
                    _commit_one(dfd, name, e)
        except BaseException:
            _rollback(root_fd, entries, created)
            raise
        for e in entries:
            if e.has_old:
                with parent_dir(root_fd, e.resolved) as (dfd, name):
                    _unlink_quiet(dfd, _tmp_name(name, OLD_SUFFIX))
        _remove_journal(root_fd)
        return [e.resolved for e in entries]
    finally:
        os.close(root_fd)
