"""What a command killed mid-way leaves in a queue, and how the next command cleans it up.

Two kinds of leftovers:

- temp files beside `series`, `targets.lock` and the patch files (`.NAME.imgquilt-XXXXXXXX.tmp`,
  from util.atomic; `.NAME.XXXXXXXX.tmp` from imgquilt before 0.2, for NAME a queue file). Their
  writer holds an flock on them until they are renamed, so one that nobody holds, and that is
  older than GRACE seconds, belongs to a dead command: sweep() removes it.
- an import's journal, `.imgquilt/import/journal.json` (ImportJournal): `import` writes it (and a
  backup of every patch file it replaces) before it writes any patch file, holds an flock on it, and
  removes it after the one rename of `series` that commits the import. Found unheld, the import
  died: if `series` already is the import's (its sha256 is in the journal), only the journal goes;
  otherwise every patch file it wrote is put back as it was (removed, or restored from its backup),
  but only where the file still holds exactly the bytes the import wrote. So an import is all or
  nothing under kill -9.

The journal is trusted only if imgquilt wrote it there: it records the inode of the queue directory
and its own inode (a journal copied in with a queue, or planted, has others) and has a strict schema;
anything else is ForeignJournal (exit 6) and never acted on.

recover() runs both; every command that reads the queue calls it (load_queue, check, and the work
tree's lock), and `check` reports what could not be cleaned (a read-only queue).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput, ForeignJournal
from ..util.atomic import TEMP_MARK
from ..util.regular import read_regular_at
from ..util.statedir import StateDir

GRACE = 10.0  # seconds: a temp younger than this may be one whose writer has not locked it yet
_TEMP = re.compile(r"^\..+" + re.escape(TEMP_MARK) + r"[a-z0-9_]{8}\.tmp$")
_LEGACY = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")
JOURNAL = "journal.json"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _temps(root: Path) -> list[Path]:
    """Temp files of imgquilt's atomic writes in the queue directory and below patches/ (no link followed):
    ours by their marker, or (older imgquilt) `.NAME.XXXXXXXX.tmp` beside a NAME that is there or is
    series / targets.lock."""
    found = []
    for dirpath in [root, *_dirs_below(root / "patches")]:
        try:
            names = os.listdir(dirpath)
        except OSError:
            continue
        here = set(names) | ({"series", "targets.lock"} if dirpath == root else set())
        for name in names:
            legacy = _LEGACY.match(name)
            if _TEMP.match(name) or (legacy is not None and legacy.group("name") in here):
                found.append(dirpath / name)
    return found


def _dirs_below(top: Path) -> list[Path]:
    out = []
    try:
        st = os.lstat(top)
    except OSError:
        return out
    if not stat.S_ISDIR(st.st_mode):
        return out
    for dirpath, dirnames, _files in os.walk(top):  # os.walk never descends into a linked directory
        out.append(Path(dirpath))
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
    return out


def _dead(path: Path) -> bool:
    """A regular temp file that no writer holds and that is older than GRACE."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or time.time() - st.st_mtime < GRACE:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its writer is alive
        return True
    finally:
        os.close(fd)


def sweep(root: Path) -> list[Path]:
    """Remove the temp files dead commands left; returns those still there (a read-only queue, a live writer)."""
    left = []
    for path in _temps(root):
        if _dead(path):
            try:
                os.unlink(path)
                continue
            except OSError:
                pass
        left.append(path)
    return left


def leftovers(root: Path) -> list[str]:
    """For `check`: what an interrupted command left that could not be cleaned, one sentence each."""
    out = [f"{p.relative_to(root)} is a temp file an interrupted imgquilt command left; remove it "
           "(a command that can write the queue removes it)." for p in _temps(root) if _dead(p)]
    journal = StateDir(root, "import")
    if journal.is_file(JOURNAL):
        out.append(f"{journal.shown}/{JOURNAL}: an `imgquilt import` was interrupted and could not be undone here; "
                   "run any imgquilt command where the queue can be written.")
    return out


def recover(root: Path) -> None:
    """Clean up after interrupted commands (see the module docstring); best effort for temps."""
    sweep(root)
    ImportJournal(root).recover()


@dataclass(frozen=True)
class Written:
    """One patch file an import writes: its name, the sha256 of the new bytes, and whether it replaced a file."""

    name: str
    sha256: str
    replaced: bool


class ImportJournal:
    """The journal of one import (see the module docstring): begin(), write the patches and series, end()."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.state = StateDir(self.root, "import")
        self._fd: int | None = None

    def begin(self, series: bytes, writes: list[Written]) -> None:
        """Back up what will be replaced, then write and hold the journal; nothing in patches/ changed yet."""
        self._clear()
        patches = self.root / "patches"
        for k, w in enumerate(writes):
            if w.replaced:
                with open(os.open(patches / w.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
                    self.state.write(f"old/{k}", f.read())
        root_st = os.stat(self.root)
        with self.state.opened(create=True) as dfd:
            assert dfd is not None
            fd = os.open(JOURNAL, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            fcntl.flock(fd, fcntl.LOCK_EX)
            doc = {"version": 1, "root": [root_st.st_dev, root_st.st_ino], "inode": os.fstat(fd).st_ino,
                   "series": hashlib.sha256(series).hexdigest(),
                   "patches": [{"name": w.name, "sha256": w.sha256, "replaced": w.replaced} for w in writes]}
            os.write(fd, json.dumps(doc).encode())
            os.fsync(fd)
            os.fsync(dfd)
        self._fd = fd

    def end(self) -> None:
        """The import committed (series renamed): the journal and backups go."""
        self._clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def recover(self) -> None:
        """Undo (or finish) an import whose command died; a live one is left alone."""
        with self.state.opened() as dfd:
            if dfd is None:
                return
            try:
                fd = os.open(JOURNAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                self._clear()  # backups made before a journal was written: the import changed nothing
                return
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._foreign("a symlink") from None
                raise
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return  # the import is running
                doc = self._read(dfd, fd)
                if doc is None:
                    self._clear()  # cut off while it was written: nothing in patches/ changed yet
                    return
                if hashlib.sha256(_read_series(self.root)).hexdigest() != doc["series"]:
                    self._undo(doc)
                self._clear()
            finally:
                os.close(fd)

    def _read(self, dfd: int, fd: int) -> dict | None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise self._foreign("not a regular file")
        raw = read_regular_at(dfd, JOURNAL, shown=f"{self.state.shown}/{JOURNAL}", cap=1 << 20)
        try:
            doc = json.loads(raw or b"")
        except ValueError:
            return None
        root_st = os.stat(self.root)
        ok = (isinstance(doc, dict) and set(doc) == {"version", "root", "inode", "series", "patches"}
              and doc["version"] == 1 and isinstance(doc["series"], str) and _HEX64.match(doc["series"])
              and isinstance(doc["patches"], list)
              and all(isinstance(p, dict) and set(p) == {"name", "sha256", "replaced"} and isinstance(p["name"], str)
                      and isinstance(p["sha256"], str) and _HEX64.match(p["sha256"]) and isinstance(p["replaced"], bool)
                      for p in doc["patches"]))
        if not ok:
            raise self._foreign("not an import journal imgquilt writes")
        if doc["root"] != [root_st.st_dev, root_st.st_ino] or doc["inode"] != st.st_ino:
            raise self._foreign("written for another queue directory (copied, or planted)")
        return doc

    def _undo(self, doc: dict) -> None:
        from ..util.atomic import atomic_write
        from ..util.regular import read_regular_file

        patches = self.root / "patches"
        for k, p in enumerate(doc["patches"]):
            name = p["name"]
            if name.startswith("/") or ".." in name.split("/") or "\0" in name:
                continue
            path = patches / name
            try:
                now = read_regular_file(path, follow=False)
            except BadInput:
                continue
            if now is None or hashlib.sha256(now).hexdigest() != p["sha256"]:
                continue  # not what the import wrote (never written, or changed since): left alone
            if p["replaced"]:
                old = self.state.read(f"old/{k}", cap=64 << 20)
                if old is not None:
                    atomic_write(path, old)
            else:
                path.unlink()

    def _clear(self) -> None:
        with self.state.opened() as dfd:
            if dfd is None:
                return
            with self.state.opened("old") as old:
                if old is not None:
                    for name in os.listdir(old):
                        _remove(old, name)
            _remove(dfd, "old", directory=True)
            _remove(dfd, JOURNAL)
        with StateDir(self.root).opened() as top:
            if top is not None:
                _remove(top, "import", directory=True)

    def _foreign(self, what: str) -> ForeignJournal:
        return ForeignJournal(f"{self.root}/{self.state.shown}/{JOURNAL} is {what}; imgquilt never acts on an import "
                              "journal it did not write in this queue.",
                              hint=f"Remove {self.root}/{self.state.shown} (imgquilt keeps nothing else there).")


def _remove(dfd: int, name: str, *, directory: bool = False) -> None:
    try:
        if directory:
            os.rmdir(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


def _read_series(root: Path) -> bytes:
    from ..util.regular import read_regular_file

    return read_regular_file(root / "series") or b""
