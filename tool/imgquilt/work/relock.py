"""A lock that keeps itself fresh: the commands that change what targets.lock derives from (refresh,
new, delete, rename, header, import, move, refresh --rehash) write the new lock in their own queue
transaction (queue.interrupted.QueueJournal), as npm, cargo and uv update theirs.

The new lock is verbs.lock.relock: what `imgquilt lock` would write, verified the same way, on the
bases the old lock pins. Those come from the work tree, never from a new image read: the object
store holds the bytes of every base the lock pins (`lock`, `push`, `add` and `apply` keep them), and a
file the lock does not pin yet was read from that same image when it was added (work.bases records
it). When one is not at hand (a fresh clone with an empty store, a file read from another image, a
lock on a rootfs whose contents may have moved), or when the changed series no longer verifies, the
command still does its job, leaves targets.lock as it was, and says why; a sealed note in
`.imgquilt/state/lock-note.json` lets `check` and `apply --locked` name that cause later.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Collection, Mapping, Sequence

from ..errors import ImgquiltError
from ..fs.types import ImageInfo, Located, TargetFile, located_or_read
from ..queue.hunks import ABSENT, sha256_hex
from ..queue.interrupted import Change, QueueJournal
from ..queue.lock import NOTE_FILE, Lock, LockNote, LockUpdate, read_note, render_note
from ..queue.queue import Queue
from ..queue.series import parse_series
from ..util.regular import read_regular_file
from ..util.statedir import STATE_NAME

if TYPE_CHECKING:
    from ..fs.types import Source
    from ..queue.patchfile import Patch  # noqa: F811
    from .tree import WorkTree

NOTE_PATH = f"{STATE_NAME}/state/{NOTE_FILE}"


class _NeedsImage(Exception):
    """A base the work tree does not hold: only `imgquilt lock` can read it."""


class StoredBases:
    """The image a lock pins, as a Source, read only from what the work tree holds: the lock's pins and
    the bases recorded from that image, their bytes from the object store (or this run's reads)."""

    def __init__(self, wt: WorkTree, lock: Lock, targets: Collection[str] = ()) -> None:
        self._wt = wt
        self._lock = lock
        self._targets = set(targets)  # the queue's target paths: a base new to the lock is `imgquilt lock`'s to read
        self._src: Source | None = None
        self.opened = False  # the image was opened (for the modules the cross-module Python check looks up)

    def _image(self) -> Source:
        """The image the lock pins, for the modules the cross-module check reads beside the targets
        (what `refresh` does too); never for a base."""
        if self._src is None:
            from ..sources import open_source, ref_in_queue

            image = self._lock.image
            try:
                src = open_source(ref_in_queue(image.ref, self._wt.root), platform=image.platform)
                digest = src.info().digest
            except ImgquiltError as exc:
                raise _NeedsImage(f"the cross-module Python check reads modules from {image.ref}, which cannot be opened "
                                  f"({exc.message.rstrip('.')})") from None
            if image.kind != "rootfs" and digest != image.digest:
                raise _NeedsImage(f"{image.ref} is no longer the image the lock pins ({image.digest})")
            self._src, self.opened = src, True
        return self._src

    def info(self) -> ImageInfo:
        image = self._lock.image
        # a rootfs's digest is over its targets: relock recomputes it, as `lock` would
        return image if image.kind != "rootfs" else ImageInfo(image.ref, None, image.platform, image.kind)

    def locate(self, paths: Sequence[str], *, first: bool, read: Collection[str] = ()) -> dict[str, TargetFile | Located]:
        """fs.types.LocatesFiles: every path decided (`first` or not); a module the lock neither pins nor
        recorded (an extension module the Python check looks for) only located in the image."""
        recorded = self._wt.bases.recorded(self._lock.image.digest if self._lock.image.kind != "rootfs" else None)
        reading = set(read)
        loose = [p for p in paths if p not in reading and p not in self._targets and self._lock.target(p) is None
                 and p not in recorded]
        return located_or_read(paths, loose, self._image, self.read_targets)

    def read_targets(self, paths: Sequence[str], *, links: Collection[str] = ()) -> dict[str, TargetFile]:
        recorded = self._wt.bases.recorded(self._lock.image.digest if self._lock.image.kind != "rootfs" else None)
        as_link = set(links)
        out: dict[str, TargetFile] = {}
        others = [p for p in paths if p not in self._targets and self._lock.target(p) is None and p not in recorded]
        if others:  # modules the cross-module check looks up: from the image itself
            from ..fs.types import read_targets

            out.update(read_targets(self._image(), others, [p for p in others if p in as_link]))
        for p in paths:
            if p in out:
                continue
            t = self._lock.target(p)
            r = recorded.get(p)
            # a base read the other way (followed, or as the link itself) is not this one's; as Bases.targets
            if t is not None and t.link != (p in as_link) and not (p in as_link and t.resolved == p):
                t = None
            if r is not None and r.link != (p in as_link) and not (p in as_link and r.resolved == p):
                r = None
            if t is not None:
                sha, meta, link = t.base_sha256, (t.resolved, t.mode, t.uid, t.gid, t.layer), t.link and p in as_link
            elif r is not None:
                sha, meta, link = r.sha256, (r.resolved, r.mode, r.uid, r.gid, r.layer), r.link and p in as_link
            else:
                raise _NeedsImage(f"{p} is new to the lock and was never read from the image it pins")
            seen = self._wt.bases.seen.get(p)
            if sha == ABSENT:
                data = None
            elif seen is not None and seen.data is not None and seen.link == link and sha256_hex(seen.data) == sha:
                data = seen.data
            else:
                data = self._wt.store.get(sha)
                if data is None:
                    raise _NeedsImage(f"the image's bytes of {p} (sha256 {sha}) are not in .imgquilt/objects")
            resolved, mode, uid, gid, layer = meta
            out[p] = TargetFile(p, resolved, data, mode, uid, gid, layer, link=link)
        return out


def queue_with(wt: WorkTree, *, series: bytes | None = None, patches: Mapping[str, Patch | None] = {}) -> Queue:
    """The queue as a change will leave it: `series` (default: as it is) and the patch files in
    `patches` replaced (None: removed); every other patch as on disk. A patch `new` made, before its
    first refresh, is a patch without sections here (as the work tree reads it)."""
    import re

    from ..errors import MalformedPatch
    from ..queue.patchfile import Header, Patch, parse_patch

    series_bytes = wt.queue.series_bytes() if series is None else series
    entries = parse_series(series_bytes, source=str(wt.series_path))
    parsed = []
    for e in entries:
        raw = patches[e.name].raw if patches.get(e.name) is not None else (  # type: ignore[union-attr]
            None if e.name in patches else read_regular_file(wt.patches_dir / e.name))
        if raw is None:
            raise MalformedPatch(f"series lists {e.name!r}, but patches/{e.name} does not exist.")
        header_only = not re.search(rb"^(Index: |diff |--- |\+\+\+ |@@ )", raw, re.M)
        parsed.append(Patch(e.name, Header(raw), (), raw) if header_only else parse_patch(raw, e.name, strip=e.strip))
    return Queue(wt.root, series_bytes, tuple(entries), tuple(parsed))


def lock_changes(wt: WorkTree, queue: Queue, command: str, *, python_check: bool = True) -> tuple[list[Change], LockUpdate]:
    """The Changes that keep targets.lock fresh after a change leaving `queue` (its last: targets.lock,
    which then commits the transaction), and what to say. Every pin follows: the default one (the
    patches no guard selects, queue.selection()) and each profile's (the patches its guards select),
    each on the bases of the image it pins. Nothing is written here."""
    from dataclasses import replace

    from ..queue.lock import read_lock_file, render_lock_file
    from ..verbs.lock import relock

    try:
        lf = read_lock_file(wt.root / "targets.lock")
    except ImgquiltError:
        return [], LockUpdate(False)  # a lock that cannot be read: `check` says so, not every edit
    if lf.default is None and not lf.profiles:
        return [], LockUpdate(False)
    try:
        before: Queue | None = queue_with(wt)  # the queue on disk, which the lock may have been made for
    except ImgquiltError:
        before = None
    pins = ([(None, (), lf.default)] if lf.default is not None else []) + [(p.name, p.select, p.lock) for p in lf.profiles]
    new_lf, whys, todos, followed, opened = lf, [], [], 0, False
    reads: list[str] = []  # the lock commands that must read an image: one sentence names them all
    for name, select, lock in pins:
        assert lock is not None
        relock_cmd = "`imgquilt lock`" if name is None else f"`imgquilt lock --profile {name}`"
        try:
            stored = StoredBases(wt, lock, queue.target_paths())
            new = relock(queue.selection(select), lock, stored,
                         before=before.selection(select) if before is not None else None, python_check=python_check)
        except _NeedsImage as exc:
            why, todo = f"{exc}", ""
            reads.append(relock_cmd)
        except ImgquiltError as exc:
            found = getattr(exc, "problems", None)
            what = "; ".join(p.render() for p in found) if found else exc.message
            why = f"the series no longer verifies on the pinned image ({what.rstrip('.')})"
            todo = (exc.hint or "").replace("\n", " ").replace("`imgquilt lock`", relock_cmd) or f"fix the queue, then run {relock_cmd}."
        else:
            followed += 1
            opened = opened or stored.opened
            profile = lf.profile(name) if name is not None else None
            new_lf = replace(new_lf, default=new) if profile is None else new_lf.with_profile(replace(profile, lock=new))
            continue
        whys.append(why if name is None else f"[profile.{name}] {why}")
        if todo:
            todos.append(todo)
    if reads:
        todos.append(f"run {reads[0]} (it reads it from the image)." if len(reads) == 1 else
                     f"run {', '.join(reads[:-1])} and {reads[-1]} (each reads its profile's image).")
    todos = [t if i == 0 else t[:1].upper() + t[1:] for i, t in enumerate(dict.fromkeys(todos))]  # sentences
    changes: list[Change] = []
    if whys:
        note = LockNote(queue.series_sha256, f"imgquilt {command}", "; ".join(whys), " ".join(todos))
        changes.append(Change(NOTE_PATH, render_note(note)))
    elif read_note(wt.root) is not None:
        changes.append(Change(NOTE_PATH, None))
    if followed:
        changes.append(Change("targets.lock", render_lock_file(new_lf)))  # last: it commits the transaction
    return changes, LockUpdate(True, bool(followed), wt.root / "targets.lock" if followed else None,
                               "; ".join(whys) or None, " ".join(todos) or None, modules_read=opened)


def _unreadable(wt: WorkTree, command: str, exc: ImgquiltError) -> tuple[list[Change], LockUpdate]:
    from ..queue.lock import read_lock_file

    try:
        lf = read_lock_file(wt.root / "targets.lock")
        pinned = lf.default is not None or bool(lf.profiles)
    except ImgquiltError:
        pinned = False
    if not pinned:
        return [], LockUpdate(False)
    why = f"the queue cannot be read as a whole ({exc.message.rstrip('.')})"
    return [], LockUpdate(True, False, None, why, "fix that, then run `imgquilt lock`.")


def commit(wt: WorkTree, command: str, changes: list[Change], *, series: bytes | None = None,
           patches: Mapping[str, Patch | None] = {}, python_check: bool = True) -> LockUpdate:
    """Write `changes` and the targets.lock that follows them as one transaction of `command`
    (queue.interrupted.COMMANDS). `series` and `patches`: what the changes make of series and the patch
    files (as queue_with takes them). Nothing about the lock when no queue file changes; a queue that
    cannot be read as a whole (a patch file another command must fix) leaves the lock as it is."""
    if not any(_differs(wt.root, c) for c in changes if not c.path.startswith(STATE_NAME + "/")):
        QueueJournal(wt.root, command).run(changes)
        wt.lock_update = LockUpdate(False)
        return wt.lock_update
    try:
        queue = queue_with(wt, series=series, patches=patches)
    except ImgquiltError as exc:
        more, update = _unreadable(wt, command, exc)
    else:
        more, update = lock_changes(wt, queue, command, python_check=python_check)
    QueueJournal(wt.root, command).run(changes + more)
    wt.lock_update = update  # for the command's report
    return update




def _differs(root: Path, c: Change) -> bool:
    return read_regular_file(root / c.path) != c.data
