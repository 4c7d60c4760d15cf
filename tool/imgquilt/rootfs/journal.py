"""The in-place journal: imgquilt's own record of an apply in progress, and nothing the root can forge.

It lives at the top of the root (`.imgquilt-journal.json`), on the same filesystem as the files it
describes, so it survives a crash or a power loss with them and needs no directory created first.
A root is untrusted input (an image layer or a tarball can ship any file), so a journal is acted on
only when it authenticates as one imgquilt wrote in this very root:

- a strict schema (exact keys and types, in-root paths only; temp and backup names are derived from
  the run id, never read from the file);
- a seal: an HMAC under the user's own key, kept outside every root (util/sealing.py). A root can
  ship any bytes and guess any inode number, but it cannot know the key;
- `root_ino` is the inode of the root directory, and `journal_ino` the inode of the journal file
  itself, written into it after it was created. Extracting, copying or syncing a file into a root
  gives it a new inode, so even a journal imgquilt sealed, copied along with its root, does not
  match; only the file created in place by the apply that crashed does.

Anything else at that name is refused (exit 6) and never acted on. The journal is rewritten once per
phase (prepare, commit, clean), each time whole, with one fsync: O(n) for n files.
"""
from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ForeignJournal, UnsafePath
from ..util.sealing import sealed_here, seal
from .dirfd import split, unlink_quiet

JOURNAL = ".imgquilt-journal.json"
FORMAT = "imgquilt-inplace-journal/3"
_FORMATS = ("imgquilt-inplace-journal/2", FORMAT)  # /2: before `gone` (an older imgquilt's crashed apply)
PHASES = ("prepare", "commit", "clean")
_TMP = re.compile(r"\.imgquilt-journal-[0-9a-f]{32}\.tmp")
_RUN = re.compile(r"[0-9a-f]{32}")
_KEYS = {"format", "run", "root_ino", "journal_ino", "phase", "dirs", "entries", "seal", "gone"}
_ENTRY_KEYS = {"path", "has_old", "delete"}
MAX_JOURNAL = 64 << 20


@dataclass(frozen=True)
class Entry:
    """One file of the apply, at its resolved in-root path."""

    path: str
    has_old: bool  # the target existed, so a backup is hard-linked beside it
    delete: bool


@dataclass(frozen=True)
class Journal:
    """What an in-place apply is doing; `phase` says which way a crash recovers."""

    run: str
    phase: str
    entries: tuple[Entry, ...]
    dirs: tuple[str, ...]  # directories this apply creates, in creation order
    gone: tuple[str, ...] = ()  # directories removed after the commit where empty (`apply --reverse`), in the order made

    def at(self, phase: str) -> "Journal":
        return replace(self, phase=phase)

    def new_name(self, i: int) -> str:
        """The temp file holding entry i's new content, beside its target."""
        return f".imgquilt-{self.run}-{i}.new"

    def old_name(self, i: int) -> str:
        """The hard-linked backup of entry i's old file, beside its target."""
        return f".imgquilt-{self.run}-{i}.old"


def _doc(j: Journal, root_ino: int, journal_ino: int) -> bytes:
    doc = {
        "format": FORMAT, "run": j.run, "root_ino": root_ino, "journal_ino": journal_ino, "phase": j.phase,
        "dirs": list(j.dirs), "entries": [{"path": e.path, "has_old": e.has_old, "delete": e.delete} for e in j.entries],
        "gone": list(j.gone),
    }
    return json.dumps({**doc, "seal": seal(doc)}, sort_keys=True).encode()


def write_journal(root_fd: int, j: Journal) -> None:
    """Replace the journal atomically with `j` (one write, one fsync of the file, one of the root)."""
    tmp = f".imgquilt-journal-{j.run}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=root_fd)
    try:
        try:
            data = memoryview(_doc(j, os.fstat(root_fd).st_ino, os.fstat(fd).st_ino))
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, JOURNAL, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    except BaseException:
        unlink_quiet(root_fd, tmp)
        raise
    os.fsync(root_fd)


def drop_journal(root_fd: int) -> None:
    unlink_quiet(root_fd, JOURNAL)
    os.fsync(root_fd)



def _foreign(root: Path, why: str) -> ForeignJournal:
    return ForeignJournal(
        f"Refused: {root / JOURNAL} is not a journal imgquilt wrote in this root ({why}); imgquilt did not act on it "
        f"and changed nothing.",
        hint=f"A root or image must not ship it. If no imgquilt apply crashed on this very directory, remove it "
             f"(rm {root / JOURNAL}) and re-run; if one did and the root was copied since, restore the original.",
    )


def _entry(x: object) -> Entry:
    if not isinstance(x, dict) or set(x) != _ENTRY_KEYS:
        raise ValueError("an entry has the wrong keys")
    if not isinstance(x["path"], str) or type(x["has_old"]) is not bool or type(x["delete"]) is not bool:
        raise ValueError("an entry has a value of the wrong type")
    split(x["path"])
    if x["delete"] and not x["has_old"]:
        raise ValueError("an entry deletes a file that did not exist")
    return Entry(x["path"], x["has_old"], x["delete"])


def _parse(data: bytes, root_ino: int, own_ino: int) -> Journal:
    doc = json.loads(data)
    if not isinstance(doc, dict) or set(doc) | {"gone"} != _KEYS or ("gone" not in doc) != (doc.get("format") == _FORMATS[0]):
        raise ValueError("it has the wrong keys")
    if doc["format"] not in _FORMATS or not isinstance(doc["run"], str) or not _RUN.fullmatch(doc["run"]):
        raise ValueError("wrong format or run id")
    if doc["phase"] not in PHASES or not isinstance(doc["entries"], list) or not isinstance(doc["dirs"], list):
        raise ValueError("wrong phase, entries or dirs")
    if type(doc["root_ino"]) is not int or type(doc["journal_ino"]) is not int:
        raise ValueError("wrong inode fields")
    if (doc["root_ino"], doc["journal_ino"]) != (root_ino, own_ino):
        raise ValueError("it was not created in this root: its inodes do not match")
    if not sealed_here(doc):
        raise ValueError("it is not sealed with your imgquilt journal key")
    dirs, gone = tuple(doc["dirs"]), tuple(doc.get("gone", ()))
    if not isinstance(doc.get("gone", []), list):
        raise ValueError("wrong gone")
    for d in dirs + gone:
        if not isinstance(d, str):
            raise ValueError("a directory is not a string")
        split(d)
    return Journal(doc["run"], doc["phase"], tuple(_entry(x) for x in doc["entries"]), dirs, gone)


def _read_own(dfd: int, name: str, root_ino: int) -> Journal:
    """The journal at `name`, authenticated; ValueError/OSError when it is not imgquilt's own."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("it is not a regular file")
        if st.st_size > MAX_JOURNAL:
            raise ValueError("it is too large")
        return _parse(f.read(MAX_JOURNAL + 1), root_ino, st.st_ino)


def read_journal(root_fd: int, root: Path) -> Journal | None:
    """The journal a crashed apply left, or None. Refuses (exit 6) one imgquilt did not write here."""
    try:
        st = os.stat(JOURNAL, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise _foreign(root, "it is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise _foreign(root, "it is not a regular file")
    try:
        return _read_own(root_fd, JOURNAL, os.fstat(root_fd).st_ino)
    except FileNotFoundError:
        return None
    except (ValueError, UnsafePath, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise _foreign(root, str(exc) if not isinstance(exc, UnsafePath) else exc.message) from None
    except OSError as exc:
        raise _foreign(root, exc.strerror or str(exc)) from None


def clear_journal_temps(root_fd: int) -> None:
    """Remove journal temps a crash left: empty ones, or ones that authenticate as imgquilt's own."""
    root_ino = os.fstat(root_fd).st_ino
    with os.scandir(root_fd) as it:
        names = [d.name for d in it if _TMP.fullmatch(d.name)]
    for name in names:
        try:
            st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_size:
                _read_own(root_fd, name, root_ino)
        except (OSError, ValueError, UnsafePath, RecursionError):
            continue  # not ours: left alone, and never read as a journal
        unlink_quiet(root_fd, name)
