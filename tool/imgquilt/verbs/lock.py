"""The `lock` verb: verify the series on an image, pin it, keep its bytes for a later rebase."""
from __future__ import annotations

from ..engine.plan import plan_lock
from ..fs.types import Source
from ..pycheck import checks
from ..queue.lock import Lock
from ..queue.queue import Queue
from ..store import remember


def lock_queue(queue: Queue, source: Source, ref: str, *, python_check: bool = True) -> Lock:
    """The lock pinning `queue` to `source`; every base and result goes to the store (rebase merges from them)."""
    plan = plan_lock(queue, source, ref, python=checks(python_check))
    remember(queue.root, plan.contents)
    return plan.lock


def relock(queue: Queue, lock: Lock, bases: Source, *, before: Queue | None = None, python_check: bool = True) -> Lock:
    """targets.lock after a change to the queue: what `imgquilt lock` would write for `queue` on the image
    `lock` pins, verified as `lock` verifies (bases, results, the Python check), on the bases `bases`
    gives (the work tree's: the object store and what was read from that image, never a new read).

    `before`: the queue `lock` was made for. When the lock was fresh for it, only the files whose chain
    of sections the change touched are read and verified again (a header edit or a rename reads none);
    every other file keeps its pins, with its patches' names as they are now. Otherwise the whole series
    is verified. The one place where a queue change becomes a lock: every command that edits the queue
    (refresh, new, delete, rename, header, import, move, refresh --rehash) writes what this returns in
    its own transaction. Raises what `lock` would (a refusal naming every problem)."""
    from dataclasses import replace

    from ..queue.lock import LockTarget, patch_hashes, rootfs_digest

    if before is None or before.series_sha256 != lock.series_sha256:
        return lock_queue(queue, bases, lock.image.ref, python_check=python_check)
    old, new = _chains(before), _chains(queue)
    touched = {p for p in set(old) | set(new) if old.get(p) != new.get(p)} & set(new)
    pinned = {t.path: t for t in lock.targets}
    if touched:  # every name of a touched file comes along (lib/x and usr/lib/x are one file)
        read = bases.read_targets(sorted(touched))
        files = {t.resolved for t in read.values()} | {pinned[p].resolved for p in touched if p in pinned}
        touched |= {t.path for t in lock.targets if t.resolved in files and t.path in new}
    sub = Queue(queue.root, queue.series_bytes, queue.entries,
                tuple(replace(p, sections=tuple(s for s in p.sections if s.path in touched)) for p in queue.patches))
    fresh: dict[str, LockTarget] = {}
    if touched:
        plan = plan_lock(sub, bases, lock.image.ref, python=checks(python_check))
        remember(queue.root, plan.contents)
        fresh = {t.path: t for t in plan.lock.targets}
    targets = []
    for path in queue.target_paths():
        names = tuple(p.name for p in queue.patches if path in p.paths)
        targets.append(fresh[path] if path in fresh else replace(pinned[path], patches=names))
    image = lock.image
    if image.kind == "rootfs":  # its digest is over every target's base
        image = replace(image, digest=rootfs_digest([(t.resolved, t.base_sha256) for t in targets]))
    return Lock(queue.series_sha256, image, tuple(targets), patch_sha256=patch_hashes(queue.names, [p.raw for p in queue.patches]))


def _chains(queue: Queue) -> dict[str, tuple[bytes, ...]]:
    """Per named path, the sections that change it, in series order, as bytes."""
    out: dict[str, tuple[bytes, ...]] = {}
    for p in queue.patches:
        for s in p.sections:
            out[s.path] = out.get(s.path, ()) + (s.raw,)
    return out
