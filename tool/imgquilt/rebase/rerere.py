"""Kept resolutions (as `git rerere`): a conflict resolved once is never asked again.

A resolution is kept in `.imgquilt/resolutions/` keyed by the sha256 of the three sides of its
merge: the old base, the old result (the patch applied on it: "ours") and the new base ("theirs").
It is kept as soon as `rebase --continue` (or `port --continue`) takes it, and when a stopped rebase
or port is abandoned (`--abort`) with a file already resolved in the work tree, so an abort, a
refusal after the resolution or a killed run loses none. The next rebase or port that meets the
same three sides takes it, says so, and goes on through the same checks a hand resolution passes.

    <key>.json  {"version", "base", "ours", "theirs", "path", "result", "seal"}: sealed with the
                user's journal key (util.sealing): an entry imgquilt did not write (cloned,
                planted, edited) is never used
    <key>.data  the resolved bytes (absent when the resolution deletes the file); used only when
                their sha256 is the sealed "result"

Entries go with `rebase --forget`. Keeping is best effort: a queue whose `.imgquilt/` cannot be
written still rebases, it just remembers nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from ..errors import ImgquiltError
from ..queue.hunks import ABSENT, sha256_hex
from ..util.sealing import seal, sealed_here
from ..util.statedir import StateDir

DIR = "resolutions"
VERSION = 1
_HEX64 = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Kept:
    """A resolution found for three sides: `result` None means the file is deleted."""

    key: str
    path: str  # the file it was made for (shown; the key decides)
    result: bytes | None


def key_of(base: str, ours: str, theirs: str) -> str:
    """The key of three sides (each a sha256 or "absent")."""
    return hashlib.sha256(f"imgquilt-resolution\0{base}\0{ours}\0{theirs}".encode()).hexdigest()


def _dir(root: Path) -> StateDir:
    return StateDir(root, DIR)


def _is_key(name: str) -> bool:
    return len(name) == 64 and set(name) <= _HEX64


def find(root: Path, base: str, ours: str, theirs: str) -> Kept | None:
    """The kept resolution of these three sides, or None (also for an unsealed, forged or damaged entry)."""
    key = key_of(base, ours, theirs)
    try:
        raw = _dir(root).read(f"{key}.json")
        if raw is None:
            return None
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != VERSION or not sealed_here(doc):
            return None
        if (doc.get("base"), doc.get("ours"), doc.get("theirs")) != (base, ours, theirs):
            return None
        result, path = doc.get("result"), doc.get("path")
        if not isinstance(result, str) or not isinstance(path, str):
            return None
        if result == ABSENT:
            return Kept(key, path, None)
        data = _dir(root).read(f"{key}.data")
        if data is None or sha256_hex(data) != result:
            return None
        return Kept(key, path, bytes(data))
    except (ImgquiltError, OSError, ValueError, RecursionError):
        return None  # a damaged entry is not a resolution


def keep(root: Path, base: str, ours: str, theirs: str, path: str, result: bytes | None) -> bool:
    """Keep `result` as the resolution of these three sides (best effort: False when it could not be written)."""
    key = key_of(base, ours, theirs)
    doc = {
        "version": VERSION,
        "base": base,
        "ours": ours,
        "theirs": theirs,
        "path": path,
        "result": ABSENT if result is None else sha256_hex(result),
    }
    doc["seal"] = seal(doc)
    try:
        if result is not None:
            _dir(root).write(
                f"{key}.data", result, 0o600
            )  # first: an entry is only ever written over bytes that are there
        _dir(root).write(f"{key}.json", (json.dumps(doc, sort_keys=True) + "\n").encode(), 0o600)
        return True
    except (ImgquiltError, OSError):
        return False


def count(root: Path) -> int:
    """How many entries `.imgquilt/resolutions/` holds (sealed or not)."""
    try:
        with _dir(root).opened() as fd:
            return 0 if fd is None else sum(1 for n in os.listdir(fd) if n.endswith(".json") and _is_key(n[:-5]))
    except ImgquiltError:
        return 0


def forget(root: Path) -> int:
    """Drop every kept resolution; the number dropped."""
    gone = 0
    with _dir(root).opened() as fd:
        if fd is None:
            return 0
        for name in os.listdir(fd):
            stem, _, ext = name.partition(".")
            if not _is_key(stem) or ext not in ("json", "data"):
                continue
            with suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                os.unlink(name, dir_fd=fd)
                gone += ext == "json"
    return gone
