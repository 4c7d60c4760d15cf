"""What a command killed mid-way leaves in a queue, and how the next command cleans it up.

Two kinds of leftovers:

- temp files beside `series`, `targets.lock` and the patch files (`.NAME.imgquilt-XXXXXXXX.tmp`,
  from util.atomic; `.NAME.XXXXXXXX.tmp` from imgquilt before 0.2, for NAME a queue file). Their
  writer holds an flock on them until they are renamed (and, where the filesystem has O_TMPFILE,
  names them only once locked), so one that nobody holds belongs to a dead command: `check` reports
  it whatever its age, and sweep() removes it once it is older than GRACE seconds (on a filesystem
  without O_TMPFILE a writer names its temp an instant before it locks it).
- the journal of a command that writes several files as one transaction (QueueJournal):
  `import` (`.imgquilt/import/journal.json`: its patch files, then `series`, then `targets.lock`),
  `refresh --rehash` (`.imgquilt/rehash/journal.json`: the work copies and snapshots of the patches it
  pops and pushes again, its patch files, then `targets.lock`), `move` (`.imgquilt/move/journal.json`:
  the work copies and snapshots it pops and pushes, the patch files it re-chains, `series`, then
  `targets.lock`), and `refresh`, `new`, `delete`, `rename`, `header`, `remove`, `guard`
  (`.imgquilt/<command>/journal.json`: the files each changes, then the `targets.lock` that follows
  them, work.relock). The journal lists every file the command will write,
  in the order it writes them, each with the sha256 of its new bytes (or "absent" for a removal) and
  its mode before (a backup of each file it replaces is kept beside the journal). It is written,
  flock'ed and put in place (one link) before the first of those files changes, and removed after the
  last. The commit rule: the file written last commits the transaction. Only files whose bytes
  change are listed (a file that already holds its new bytes is not written), so that file holding
  its new bytes means every write before it was done. Found unheld, the command died: if the last
  file holds its new bytes, the transaction committed and only the journal (with its backups and the
  temp files of its writes) goes; otherwise every file it lists is put back as it was (removed, or
  restored from its backup with its mode), but only where the file still holds exactly the bytes the
  command wrote (one never written, or changed since, is left alone). So these commands are all or
  nothing under kill -9, and a write that fails (a full disk, a planted link) is undone at once.

A journal is trusted only if imgquilt wrote it there: it is sealed with the user's own key, kept
outside every queue (util/sealing.py: a cloned queue can guess inode numbers, never the key), it
records the inode of the queue directory and its own inode (a journal copied in with a queue has
others), names only files imgquilt writes (series, targets.lock, patches/, .imgquilt/work/,
.imgquilt/state/) and has a strict schema; anything else is ForeignJournal (exit 6) and never acted on.

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
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import ForeignJournal, ImgquiltError, QueueWriteFailed, UsageError
from ..util.atomic import TEMP_MARK, temp_prefix, write_atomic_at, write_new_at
from ..util.regular import read_regular_at
from ..util.sealing import seal, sealed_here
from ..util.statedir import STATE_NAME, StateDir, open_dir_below, refuse_non_regular_at

GRACE = 10.0  # seconds: a temp younger than this may be one whose writer has not locked it yet
_TEMP = re.compile(r"^\..+" + re.escape(TEMP_MARK) + r"(?:[a-z0-9_]{8}\.tmp|tmp)$")  # atomic_write's, write_atomic_at's
_LEGACY = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")
JOURNAL = "journal.json"
_STAGED = ".journal.json.new"  # the journal while it is written, before its link puts it in place
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
ABSENT = "absent"
FILE_CAP = 1 << 30  # a work copy is an image file; backups and reads are capped as WorkFiles caps them
# the commands that write the queue as one transaction (their journal's directory), as the user types them
COMMANDS = {"import": "imgquilt import", "rehash": "imgquilt refresh --rehash", "move": "imgquilt move",
            "refresh": "imgquilt refresh", "new": "imgquilt new", "delete": "imgquilt delete", "rename": "imgquilt rename",
            "header": "imgquilt header", "remove": "imgquilt remove", "guard": "imgquilt guard",
            "port": "imgquilt port"}


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
    out: list[Path] = []
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


def _dead(path: Path, *, grace: float = GRACE) -> bool:
    """A regular temp file that no writer holds and that is older than `grace` seconds. (imgquilt's
    writers make their temp nameless, lock it, then name it, where the filesystem allows: a temp
    found unlocked is dead whatever its age; `grace` is for the other filesystems, NFS say, where a
    writer names its temp just before it locks it.)"""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or time.time() - st.st_mtime < grace:
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
    out = [f"{p.relative_to(root)} is a temp file an interrupted imgquilt command left (no live process holds it); "
           f"remove it (any command that can write the queue removes it once it is {GRACE:g} s old)."
           for p in _temps(root) if _dead(p, grace=0)]
    for command, shown in COMMANDS.items():
        journal = StateDir(root, command)
        if journal.is_file(JOURNAL):
            out.append(f"{journal.shown}/{JOURNAL}: an `{shown}` was interrupted and could not be undone here; "
                       "run any imgquilt command where the queue can be written.")
    return out


def recover(root: Path) -> None:
    """Clean up after interrupted commands (see the module docstring); best effort for temps."""
    sweep(root)
    for command in COMMANDS:
        QueueJournal(root, command).recover()


@dataclass(frozen=True)
class Change:
    """One file a transaction writes: its path in the queue (`patches/NAME`, `series`, `targets.lock`,
    `.imgquilt/work/PATH`, `.imgquilt/state/...`), its new bytes (None: removed) and their mode."""

    path: str
    data: bytes | None
    mode: int = 0o644


class QueueJournal:
    """The journal of one command's transaction (see the module docstring): run(changes) writes them all, or none."""

    def __init__(self, root: Path, command: str) -> None:
        assert command in COMMANDS, command
        self.root = Path(root)
        self.command = command
        self.state = StateDir(self.root, command)
        self._fd: int | None = None

    def run(self, changes: list[Change]) -> list[Change]:
        """Write `changes` in their order as one transaction, the last one committing it; returns those
        written (a file that already holds its new bytes is left out: it would mark no commit)."""
        assert len({c.path for c in changes}) == len(changes), "one change per file"
        for c in changes:
            _check_rel(c.path)
        todo = [c for c in changes if _sha(_bytes(_read(self.root, c.path))) != _sha(c.data)]
        if not todo:
            return []
        doc = self._begin(todo)
        try:
            for c in todo:
                _put(self.root, c.path, c.data, c.mode)
        except BaseException as exc:
            self._undo(doc)  # a write refused (a full disk, a planted link), ^C: nothing stays half-written
            self._end()  # (an undo that fails too leaves the journal: the next command finishes it)
            if isinstance(exc, (FileExistsError, NotADirectoryError)):  # `patches` is a file, say
                raise QueueWriteFailed(
                    f"`{COMMANDS[self.command]}` could not write {self.root}/{c.path}: a name on its way is not a "
                    "directory; nothing was changed (what it had written was put back).",
                    hint=f"Move away what holds the name of the directory {str(Path(c.path).parent)!r} in the queue, "
                         "then run the command again.") from None
            if isinstance(exc, OSError):
                raise QueueWriteFailed(
                    f"`{COMMANDS[self.command]}` could not write {self.root}/{c.path}: {exc.strerror or exc}; "
                    "nothing was changed (what it had written was put back).",
                    hint="Make the queue directory writable (or free some space), then run the command again.") from None
            raise
        self._end()
        return todo

    def _begin(self, changes: list[Change]) -> dict:
        """Back up what will be replaced, then write, hold and link the journal; nothing listed changed yet."""
        if self.state.is_file(JOURNAL):
            raise UsageError(f"Another imgquilt command is changing this queue ({self.root}/{self.state.shown}/{JOURNAL} is there).",
                             hint="Wait for it to finish, then retry.")
        self._clear()  # backups of a command killed before its journal was in place
        olds: list[int | None] = []
        try:
            with self.state.opened("old", create=True) as bfd:
                assert bfd is not None
                for k, c in enumerate(changes):
                    cur = _read(self.root, c.path)
                    if cur is not None:
                        write_new_at(bfd, str(k), cur[0])  # whole and on disk before the journal names it
                    olds.append(None if cur is None else cur[1])
                os.fsync(bfd)
            root_st = os.stat(self.root)
            with self.state.opened(create=True) as dfd:
                assert dfd is not None
                fd = os.open(_STAGED, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
                self._fd = fd
                fcntl.flock(fd, fcntl.LOCK_EX)
                doc = {"version": 3, "command": self.command, "root": [root_st.st_dev, root_st.st_ino], "inode": os.fstat(fd).st_ino,
                       "files": [{"path": c.path, "sha256": _sha(c.data), "mode": None if c.data is None else c.mode, "old": old}
                                 for c, old in zip(changes, olds)]}
                doc["seal"] = seal(doc)
                with os.fdopen(os.dup(fd), "wb") as f:
                    f.write(json.dumps(doc).encode())
                    f.flush()
                    os.fsync(f.fileno())
                os.link(_STAGED, JOURNAL, src_dir_fd=dfd, dst_dir_fd=dfd)  # in place whole and held: never seen half-written
                os.unlink(_STAGED, dir_fd=dfd)
                os.fsync(dfd)
        except BaseException:
            self._end()
            raise
        return doc

    def _end(self) -> None:
        """The transaction committed (or was undone): the journal and backups go."""
        self._clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def recover(self) -> None:
        """Undo (or finish) a transaction whose command died; a live one is left alone."""
        with self.state.opened() as dfd:
            if dfd is None:
                return
            try:
                fd = os.open(JOURNAL, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                self._clear()  # backups made before a journal was in place: the command changed nothing
                return
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise self._foreign("a symlink") from None
                raise
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return  # the command is running
                doc = self._read(dfd, fd)
                last = doc["files"][-1]
                if _now(self.root, last["path"]) != last["sha256"]:
                    self._undo(doc)  # died before its last write: put back what it wrote
                for f in doc["files"]:
                    _drop_temp(self.root, f["path"])
                self._clear()
            finally:
                os.close(fd)

    def _read(self, dfd: int, fd: int) -> dict:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise self._foreign("not a regular file")
        raw = read_regular_at(dfd, JOURNAL, shown=f"{self.state.shown}/{JOURNAL}", cap=1 << 20)
        try:
            doc = json.loads(raw or b"")
        except ValueError:
            doc = None  # imgquilt puts its journal in place only once written whole: not one of ours
        if not _valid(doc, self.command):
            raise self._foreign(f"not {_an(self.command)} journal imgquilt writes")
        root_st = os.stat(self.root)
        if doc["root"] != [root_st.st_dev, root_st.st_ino] or doc["inode"] != st.st_ino:
            raise self._foreign("written for another queue directory (copied, or planted)")
        if not sealed_here(doc):
            raise self._foreign("not sealed with your imgquilt journal key (planted, or written by another user)")
        return doc

    def _undo(self, doc: dict) -> None:
        """Put back, last first, every listed file that holds exactly what the command wrote."""
        for k, f in reversed(list(enumerate(doc["files"]))):
            if _now(self.root, f["path"]) != f["sha256"]:
                continue  # not what the command wrote (never written, or changed since): left alone
            if f["old"] is None:
                _put(self.root, f["path"], None, 0)
                continue
            old = self.state.read(f"old/{k}", cap=FILE_CAP)
            if old is not None:
                _put(self.root, f["path"], old, f["old"])

    def _clear(self) -> None:
        with self.state.opened() as dfd:
            if dfd is None:
                return
            with self.state.opened("old") as old:
                if old is not None:
                    for name in os.listdir(old):
                        _remove(old, name)
            _remove(dfd, "old", directory=True)
            _remove(dfd, _STAGED)
            _remove(dfd, JOURNAL)  # last: while it is there, no other command starts a transaction
        with StateDir(self.root).opened() as top:
            if top is not None:
                _remove(top, self.command, directory=True)

    def _foreign(self, what: str) -> ForeignJournal:
        return ForeignJournal(f"{self.root}/{self.state.shown}/{JOURNAL} is {what}; imgquilt never acts on "
                              f"{_an(self.command)} journal it did not write in this queue.",
                              hint=f"Remove {self.root}/{self.state.shown} (imgquilt keeps nothing else there).")


def _an(command: str) -> str:
    return ("an " if command[0] in "aeiou" else "a ") + command


def _valid(doc: object, command: str) -> bool:
    """The schema of the journals imgquilt writes, exactly."""
    if not (isinstance(doc, dict) and set(doc) == {"version", "command", "root", "inode", "files", "seal"} and doc["version"] == 3
            and doc["command"] == command and isinstance(doc["files"], list) and doc["files"]):
        return False
    paths = set()
    for f in doc["files"]:
        if not (isinstance(f, dict) and set(f) == {"path", "sha256", "mode", "old"} and isinstance(f["path"], str)
                and isinstance(f["sha256"], str) and (f["sha256"] == ABSENT or _HEX64.match(f["sha256"]))
                and _is_mode(f["old"]) and _is_mode(f["mode"]) and (f["mode"] is None) == (f["sha256"] == ABSENT)):
            return False
        try:
            _check_rel(f["path"])
        except ValueError:
            return False
        paths.add(f["path"])
    return len(paths) == len(doc["files"])


def _is_mode(v: object) -> bool:
    return v is None or (type(v) is int and 0 <= v <= 0o7777)


def _check_rel(rel: str) -> list[str]:
    """The parts of a path a transaction may write: series, targets.lock, patches/..., .imgquilt/work/..., .imgquilt/state/..."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise ValueError(rel)
    ok = (rel in ("series", "targets.lock") or (parts[0] == "patches" and len(parts) > 1)
          or (parts[0] == STATE_NAME and len(parts) > 2 and parts[1] in ("work", "state")))
    if not ok:
        raise ValueError(rel)
    return parts


@contextmanager
def _parent(root: Path, rel: str, *, create: bool) -> Iterator[tuple[int | None, str]]:
    """(fd of the directory `rel` is in or None, its name). Below .imgquilt/ no link is followed (as
    util.statedir walks); series and patches/ are reached as every queue command reaches them (a
    queue may keep patches/ as a link of its own), but below patches/ no link is followed either:
    a write or removal of patches/NAME stays in patches/."""
    parts = _check_rel(rel)
    if parts[0] == STATE_NAME:
        qfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fd = open_dir_below(qfd, parts[:-1], create=create, shown=str(root))
        finally:
            os.close(qfd)
    elif len(parts) == 1:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        top = root / parts[0]
        if create:
            top.mkdir(exist_ok=True)
        try:
            pfd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            pfd = None
        fd = None
        if pfd is not None:
            try:
                fd = open_dir_below(pfd, parts[1:-1], create=create, shown=str(top))
            finally:
                os.close(pfd)
    try:
        yield fd, parts[-1]
    finally:
        if fd is not None:
            os.close(fd)


def _read(root: Path, rel: str) -> tuple[bytes, int] | None:
    """The bytes and mode of the regular file `rel` (None: not there); a link or other file is an error."""
    with _parent(root, rel, create=False) as (fd, name):
        if fd is None:
            return None
        data = read_regular_at(fd, name, shown=f"{root}/{rel}", cap=FILE_CAP)
        if data is None:
            return None
        return data, stat.S_IMODE(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)


def _bytes(held: tuple[bytes, int] | None) -> bytes | None:
    return None if held is None else held[0]


def _now(root: Path, rel: str) -> str | None:
    """For recovery: the sha256 of what `rel` holds ("absent": nothing); None when it is not a regular
    file (a link, a directory: never what imgquilt wrote)."""
    try:
        return _sha(_bytes(_read(root, rel)))
    except (ImgquiltError, OSError):
        return None


def _sha(data: bytes | None) -> str:
    return ABSENT if data is None else hashlib.sha256(data).hexdigest()


def _put(root: Path, rel: str, data: bytes | None, mode: int) -> None:
    """Replace `rel` whole (temp beside it, fsync, rename), or remove it (None); below .imgquilt/work/
    a removal drops the directories it leaves empty, as the work tree does."""
    with _parent(root, rel, create=data is not None) as (fd, name):
        if data is not None:
            assert fd is not None
            refuse_non_regular_at(fd, name, shown=f"{root}/{rel}")
            write_atomic_at(fd, name, data, mode)
            return
        if fd is None:
            return
        with suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)
    parts = rel.split("/")
    if parts[:2] == [STATE_NAME, "work"]:
        for k in range(len(parts) - 1, 2, -1):  # the directories below .imgquilt/work/ left empty
            try:
                with _parent(root, "/".join(parts[:k]), create=False) as (up, d):
                    if up is None:
                        break
                    os.rmdir(d, dir_fd=up)
            except OSError:
                break


def _drop_temp(root: Path, rel: str) -> None:
    """The temp file a write of `rel` (util.atomic.write_atomic_at) leaves when it is killed."""
    try:
        with _parent(root, rel, create=False) as (fd, name):
            if fd is not None:
                _remove(fd, temp_prefix(name) + "tmp")
    except (ImgquiltError, OSError):
        pass


def _remove(dfd: int, name: str, *, directory: bool = False) -> None:
    try:
        if directory:
            os.rmdir(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)
    except OSError:
        pass
