"""The `lock` verb: verify the series on an image, pin it, keep its bytes for a later rebase."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..engine.plan import plan_lock
from ..fs.types import Source
from ..errors import UsageError
from ..pycheck import checks
from ..queue.lock import Lock
from ..queue.queue import Queue
from ..store import remember
from .rebase_guard import refuse_during_rebase
from .refs import Progress


@dataclass(frozen=True)
class Locked:
    """The targets.lock written: where, the image it pins and how many targets."""

    path: Path
    ref: str
    digest: str
    platform: str | None
    series_sha256: str
    targets: int
    patches: int
    profile: str | None = None  # the profile pinned (None: the default pin)
    select: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LockRequest:
    """`imgquilt lock` as asked (api.lock's keywords): `profile` None, NAME or "all"."""

    queue: str | os.PathLike[str] | None = None
    image: str | None = None
    platform: str | None = None
    python_check: bool = True
    progress: Progress | None = None
    profile: str | None = None
    select: Sequence[str] | None = None
    env: Sequence[str] = ()
    unset_env: Sequence[str] = ()
    new: bool = False


def refuse_lock(req: LockRequest) -> None:
    """The combinations `lock` refuses before reading anything."""
    from .fanout import select

    if select(req.profile).every_profile and (req.image or req.select or req.env or req.unset_env):
        raise UsageError("`lock --profile all` re-pins every profile on its own image; give it no --image, --select or --env.",
                         hint="Change one profile with --profile NAME.")


def run_lock(req: LockRequest) -> Locked | tuple[Locked, ...]:
    """The CLI's `lock`: one pin (Locked), or with `--profile all` every profile (a tuple)."""
    refuse_lock(req)
    from .fanout import select

    return lock_profiles(req) if select(req.profile).every_profile else lock(req)


def lock(req: LockRequest) -> Locked:
    """Verify the series on the image (`image`, else the one targets.lock pins) and write targets.lock
    (api.lock says the rest)."""
    from ..queue.lock import Profile, lock_with, render_lock_file
    from ..sources import ref_for_lock
    from ..util.atomic import atomic_write
    from ..util.regular import read_regular_file
    from .profiles import ALL, check_profile_name, lock_file, parse_env, parse_select
    from .refs import load_queue, naming, open_ref, pick_ref

    image, platform, python_check, progress, profile = req.image, req.platform, req.python_check, req.progress, req.profile
    select, env, unset_env = req.select, req.env, req.unset_env
    q = load_queue(req.queue)
    refuse_during_rebase(q.root)
    if profile is None:
        if select is not None or env or unset_env:
            raise UsageError("--select, --env and --unset-env set a profile's selection and defaults; give --profile NAME.")
        lf = lock_file(q.root)
        if image is None and lf.default is None and lf.profiles:
            raise UsageError(f"targets.lock pins only profiles ({', '.join(lf.names)}), no default image to re-pin.",
                             hint="Re-pin one with --profile NAME (or all), or pin a default with --image REF.")
        ref = pick_ref(image, lf.default, q.root)
        stored = ref_for_lock(ref, q.root)
        new = lock_queue(q.selection(()), open_ref(ref, platform, root=q.root, progress=progress), stored, python_check=python_check)
        atomic_write(q.lock_path, lock_with(read_regular_file(q.lock_path), new))
        return Locked(q.lock_path, stored, new.image.digest, new.image.platform, new.series_sha256, len(new.targets),
                      len(q.selection(()).patches))
    if profile == ALL:
        raise UsageError("`lock --profile all` re-pins every profile: use lock_profiles().")
    check_profile_name(profile)
    lf = lock_file(q.root)
    old = lf.profile(profile)
    if old is None and not req.new:
        from ..util.names import nearest

        near = nearest(profile, lf.names)
        if near is not None:
            raise UsageError(f"Profile {profile!r} is not declared; targets.lock declares {', '.join(lf.names)}. Did you mean {near!r}?",
                             hint=f"Re-pin it with --profile {near}, or declare {profile!r} as a new profile with "
                                  "`imgquilt lock --new --profile ...`. Nothing was read or written.")
    if old is None and not image:
        raise UsageError(f"Profile {profile!r} is new: give the image it is pinned to with --image REF.",
                         hint=f"Example: imgquilt lock --profile {profile} --image oci:images/{profile}:latest")
    guards = parse_select(select) if select is not None else (old.select if old is not None else (profile,))
    defaults = dict(old.env) if old is not None else {}
    for key in unset_env:
        if key not in defaults:
            raise UsageError(f"--unset-env {key}: profile {profile} sets no {key}.")
        defaults.pop(key)
    defaults.update(parse_env(env))
    ref = pick_ref(image, old.lock if old is not None else None, q.root)
    stored = ref_for_lock(ref, q.root)
    chosen = q.selection(guards)
    with naming(profile):
        new = lock_queue(chosen, open_ref(ref, platform, root=q.root, progress=progress), stored, python_check=python_check)
    prof = Profile(profile, guards, tuple(sorted(defaults.items())), new)
    atomic_write(q.lock_path, render_lock_file(lf.with_profile(prof)))
    return Locked(q.lock_path, stored, new.image.digest, new.image.platform, new.series_sha256, len(new.targets),
                  len(chosen.patches), profile, prof.select, prof.env)


def lock_profiles(req: LockRequest) -> tuple[Locked, ...]:
    """`lock --profile all`: re-pin every profile on the image it is pinned to; targets.lock is written
    once, when every profile verified (nothing is written otherwise)."""
    from dataclasses import replace

    from ..errors import ImgquiltError
    from ..queue.lock import render_lock_file
    from ..sources import ref_for_lock
    from ..util.atomic import atomic_write
    from .fanout import Selection, fan_out
    from .profiles import ALL, lock_file
    from .refs import load_queue, open_ref, pick_ref

    q = load_queue(req.queue)
    refuse_during_rebase(q.root)
    lf = lock_file(q.root)
    done = []
    for cell in fan_out(Selection(ALL), q, lf):  # one platform: --platform as given
        r = cell.profile
        assert r is not None
        ref = pick_ref(None, r.lock, q.root)
        stored = ref_for_lock(ref, q.root)
        try:
            new = lock_queue(r.queue, open_ref(ref, req.platform, root=q.root, progress=req.progress), stored,
                             python_check=req.python_check)
        except ImgquiltError as exc:
            exc.message = f"Profile {r.name}: {exc.message}"
            exc.hint = "\n".join(x for x in (exc.hint, "targets.lock was not written (no profile was re-pinned).") if x)
            raise
        prof = lf.profile(r.name)  # type: ignore[arg-type]
        lf = lf.with_profile(replace(prof, lock=new))  # type: ignore[arg-type]
        done.append(Locked(q.lock_path, stored, new.image.digest, new.image.platform, new.series_sha256, len(new.targets),
                           len(r.queue.patches), r.name, r.select, r.env))
    atomic_write(q.lock_path, render_lock_file(lf))
    return tuple(done)


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
        names = queue.patches_naming[path]
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
