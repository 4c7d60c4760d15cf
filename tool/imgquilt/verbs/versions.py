"""Is a series a version of this queue? The one question `apply --reverse` asks a root's apply record.

A record is a file of the root, and a root can ship any file: its `series_sha256` is obeyed only
when the queue itself knows it: the queue's own series (or a profile's selection of it), the series
a pin of targets.lock was made from, one this queue applied in place itself (kept in
`.imgquilt/state/applied-series.json`, sealed with the user's key, so a cloned queue cannot plant
one), or the series at a commit of the queue's git history (a root that runs an older version of
the queue, committed). History is read only when the others miss, with one `git log` and one
`git cat-file --batch`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from ..queue.lock import LockFile
from ..queue.queue import Queue, series_sha256
from .history import series_names

MAX_COMMITS = 2000  # a queue's history is its series' edits: far fewer in practice
LEDGER = "applied-series.json"
MAX_LEDGER = 256  # the newest series applied in place; an older one is matched by its history, if committed


def current_versions(queue: Queue, lockfile: LockFile) -> frozenset[str]:
    """The series this queue knows without its history: its own, each profile's selection, each pin's."""
    known = {queue.series_sha256}
    for p in lockfile.profiles:
        known |= {queue.selection(p.select).series_sha256, p.lock.series_sha256}
    if lockfile.default is not None:
        known.add(lockfile.default.series_sha256)
    return frozenset(known)


def sealed_versions(queue_root: Path) -> list[str]:
    """The series this queue applied in place (newest last), as its sealed ledger says; [] without one
    (or with one that is not sealed with the user's key, or damaged)."""
    from ..errors import ImgquiltError
    from ..util.sealing import sealed_here
    from ..util.statedir import StateDir

    try:
        raw = StateDir(queue_root, "state").read(LEDGER)
        doc = json.loads(raw) if raw is not None else None
        if not isinstance(doc, dict) or doc.get("version") != 1 or not sealed_here(doc):
            return []
        return [str(x) for x in doc["series"]]
    except (ImgquiltError, OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return []


def remember_applied(queue_root: Path, series: str) -> None:
    """Add `series` to the queue's sealed ledger of series applied in place (before the root is written,
    so a root a crash left patched can be taken off too)."""
    from ..util.sealing import seal
    from ..util.statedir import StateDir

    known = sealed_versions(queue_root)
    if known and known[-1] == series:
        return
    doc: dict = {"version": 1, "series": ([x for x in known if x != series] + [series])[-MAX_LEDGER:]}
    doc["seal"] = seal(doc)
    StateDir(queue_root, "state").write(LEDGER, (json.dumps(doc, sort_keys=True) + "\n").encode())


def version_problem(queue: Queue, lockfile: LockFile, series: str) -> str | None:
    """None when `series` is a version of `queue`; else why not, in words."""
    known = current_versions(queue, lockfile)
    if series in known or series in sealed_versions(queue.root):
        return None
    history = history_versions(queue.root)
    if history is not None and series in history:
        return None
    where = ("the queue is not in a git repository, so no older version of it can be matched"
             if history is None else f"nor the series at any of the {len(history)} version(s) in the queue's git history")
    return (f"its series_sha256 {series} is not a version of this queue: not this queue's series ({queue.series_sha256}), "
            f"nor a profile's or targets.lock's, nor one this queue applied in place, {where}")


def _git(args: list[str], cwd: Path, data: bytes | None = None) -> bytes | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        p = subprocess.run([git, *args], cwd=cwd, input=data, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def _batch(cwd: Path, specs: list[str]) -> dict[str, bytes]:
    """The blobs `specs` name (COMMIT:PATH), those that exist, through one `git cat-file --batch`."""
    if not specs:
        return {}
    out = _git(["cat-file", "--batch"], cwd, "".join(s + "\n" for s in specs).encode())
    found: dict[str, bytes] = {}
    if out is None:
        return found
    pos = 0
    for spec in specs:
        end = out.index(b"\n", pos)
        head = out[pos:end].split()
        pos = end + 1
        if len(head) != 3:
            continue  # `SPEC missing` (or ambiguous)
        size = int(head[2])
        if head[1] == b"blob":
            found[spec] = out[pos:pos + size]
        pos += size + 1
    return found


def history_versions(queue_root: Path) -> frozenset[str] | None:
    """The series_sha256 of the queue at every commit that changed its series or patches/ (the whole
    series, unselected); None when the queue is not in a git repository."""
    top = _git(["rev-parse", "--show-toplevel"], queue_root)
    if top is None:
        return None
    top_dir = Path(os.fsdecode(top.strip()))
    try:
        rel = Path(queue_root).resolve().relative_to(top_dir.resolve()).as_posix()
    except ValueError:
        return None
    prefix = "" if rel == "." else rel + "/"
    log = _git(["log", f"-n{MAX_COMMITS}", "--full-history", "--format=%H", "--", prefix + "series", prefix + "patches"], top_dir)
    if log is None:
        return frozenset()  # no commit yet
    commits = log.decode().split()
    series = _batch(top_dir, [f"{c}:{prefix}series" for c in commits])
    names = {c: series_names(series[f"{c}:{prefix}series"]) for c in commits if f"{c}:{prefix}series" in series}
    blobs = _batch(top_dir, list(dict.fromkeys(f"{c}:{prefix}patches/{n}" for c, ns in names.items() for n in ns)))
    out = set()
    for c, ns in names.items():
        raws = [blobs.get(f"{c}:{prefix}patches/{n}") for n in ns]
        if all(r is not None for r in raws):
            out.add(series_sha256(series[f"{c}:{prefix}series"], raws))  # type: ignore[arg-type]
    return frozenset(out)
