"""The content-addressed object store in a queue's `.imgquilt/objects/`: every base and result seen.

Rebase needs the exact bytes of the old bases to run a true 3-way merge; the patches only carry
their hashes. Objects are named by the sha256 of their bytes (`objects/ab/ab12…`), written once,
atomically, read-only; a read checks the hash again, so a damaged object reads as missing.

Objects are written without fsync: an object is checked on every read, so a crash can lose one (it
reads as missing, and `rebase --from OLDREF` reads it from the image again) but never make a wrong one
pass; the transaction's own file (targets.lock, a patch) is what is made durable. A large content (a
Spooled: a file too large to hold) is kept by reference: hard-linked from imgquilt's own temp file
(the queue's .imgquilt/tmp, on this filesystem) or reflinked; where neither works, remember() keeps
no copy of it (it can be derived again from the image and the patches), and put() copies it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

from .errors import LinkedState, StateWriteFailed, UnsafePath
from .fs.content import Data, is_spooled, sha256_of
from .queue.hunks import ABSENT
from .util.statedir import StateDir

if TYPE_CHECKING:
    from .queue.queue import Queue

OBJECTS_DIR = Path(".imgquilt") / "objects"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
OBJECT_CAP = 4 << 30  # objects are image files; the cap only keeps a hostile sparse file from filling memory


class ObjectStore:
    """sha256-named blobs below `<queue>/.imgquilt/objects/`."""

    def __init__(self, queue_root: Path) -> None:
        self.dir = Path(queue_root) / OBJECTS_DIR
        self._state = StateDir(queue_root, "objects")  # untrusted: walked without following links

    def path(self, sha: str) -> Path:
        return self.dir / self._rel(sha)

    @staticmethod
    def _rel(sha: str) -> str:
        if not _HEX64.match(sha):
            raise ValueError(f"not a sha256: {sha!r}")
        return f"{sha[:2]}/{sha}"

    def has(self, sha: str) -> bool:
        return sha == ABSENT or (_HEX64.match(sha) is not None and self._state.is_file(self._rel(sha)))

    def present(self, shas: Iterable[str]) -> set[str]:
        """Which of `shas` are stored (has() for many: the store's directories walked once, not per object)."""
        named = [s for s in shas if _HEX64.match(s)]
        found = self._state.regular_files(self._rel(s) for s in named)
        return {s for s in named if self._rel(s) in found}

    def put(self, data: Data, *, copy: bool = True) -> str | None:
        """Store `data` (once) and return its sha256. A Spooled is linked in where it can be; else it is
        copied (`copy`), or not stored at all (None: remember() for what can be derived again)."""
        sha = sha256_of(data)
        if self.get(sha, spool=True) is not None:  # checked: a damaged object is replaced
            return sha
        if is_spooled(data) and not copy:
            if not self._state.link_in(self._rel(sha), data, mode=0o444):
                return None
            return sha
        self._state.write(self._rel(sha), data, mode=0o444, durable=False)
        return sha

    def put_many(self, held: Mapping[str, Data]) -> None:
        """Store contents held in memory, keyed by their sha256, that present() found missing: the
        store's directories walked once for all of them (put() walks from the queue root for each)."""
        self._state.write_many(((self._rel(sha), data) for sha, data in held.items()), mode=0o444, durable=False)

    def get(self, sha: str, *, spool: bool = False) -> Data | None:
        """The bytes named `sha`, or None when they are not stored (or were damaged). `spool`: a large
        object comes back as a Spooled over it (for a caller that streams: check's offline test of each
        section), never held."""
        if not _HEX64.match(sha or ""):
            return None
        rel = self._rel(sha)
        data = self._state.read_content(rel, cap=OBJECT_CAP) if spool else self._state.read(rel, cap=OBJECT_CAP)
        if data is None:
            return None
        return data if sha256_of(data) == sha else None

    def get_or_absent(self, sha: str, *, spool: bool = False) -> tuple[bool, Data | None]:
        """(found, bytes): "absent" is always found, as None."""
        if sha == ABSENT:
            return True, None
        data = self.get(sha, spool=spool)
        return data is not None, data


def remember(queue_root: Path, datas: Iterable[Data | None]) -> int:
    """Store every file content in `datas` (None: absent, skipped); returns how many were new.

    Best effort by design: a read-only queue (e.g. COPY'd into a Dockerfile build) must not make
    `apply` or `audit` fail, so storage errors are swallowed here. A large content is only linked in
    (never copied a second time: it can be derived again).
    """
    store = ObjectStore(queue_root)
    new = 0
    todo: dict[str, Data] = {}
    for data in datas:
        if data is not None:
            todo.setdefault(sha256_of(data), data)
    try:
        stored = store.present(todo)  # one walk of the store for all (a warm apply: every one is there)
        held = {sha: data for sha, data in todo.items() if sha not in stored and not is_spooled(data)}
        store.put_many(held)
        new += len(held)
        for sha, data in todo.items():  # a large content: linked in, one by one
            if sha not in stored and sha not in held and store.put(data, copy=False) is not None:
                new += 1
    except LinkedState:
        raise  # a planted link is an attack, not a read-only queue
    except (OSError, UnsafePath, StateWriteFailed):
        pass
    return new


def remember_named(queue: "Queue", datas: Iterable[bytes | None]) -> int:
    """Like remember(), for the contents some section of `queue` names (as base or result) only.

    For audit, which reads whatever a filesystem holds: drifted files are of no use to a rebase.
    """
    known = {h for p in queue.patches for s in p.sections for h in (s.base_sha256, s.patched_sha256)}
    return remember(queue.root, [d for d in datas if d is not None and sha256_of(d) in known])
