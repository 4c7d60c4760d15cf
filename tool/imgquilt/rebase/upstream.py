"""`imgquilt diff --upstream PATCH`: upstream's change of the regions a patch touches, between the
old and the new image, at any time (no rebase needed).

Where the bytes come from (docs/boot-checks.md):
- the patch's regions are found in its own base (the bytes its Base-SHA256 names: the object store,
  else the old image's file with the series' earlier patches applied);
- old: the file as the series starts from it, in the image `--from` names, else the one targets.lock
  pins (its bytes from the object store by the lock's hash, else read from that image);
- new: the file in the image `--image` names, else, while a rebase is under way, in the image it
  rebases onto (at the path the rebase maps it to).

A rebase of several profiles has one old pin, new image and path map per profile: the patch is
shown once per profile that carries it (a --split copy: the profiles it is made for), or for
`--profile NAME` alone.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..fs.types import read_targets
from ..engine.apply import apply_section
from ..pycheck.regions import LINES, Region, RegionChange, regions_of, upstream_changes
from ..errors import BadInput, BaseDrift, UsageError
from ..queue.hunks import ABSENT, sha256_hex, split_lines
from ..queue.lock import Lock
from ..queue.queue import Queue, load_queue
from ..store import ObjectStore
from .options import Opener

if TYPE_CHECKING:
    from .state import RebaseState


@dataclass(frozen=True)
class UpstreamDiff:
    patch: str
    old: dict  # {"ref", "digest"}
    new: dict
    changes: tuple[RegionChange, ...]
    paths: tuple[str, ...]  # the patch's files looked at
    profile: str | None = None  # the profile whose images these are (a rebase of several profiles, or --profile)
    lanes: tuple[UpstreamDiff, ...] = ()  # a stopped rebase of several profiles: one per profile carrying the patch


@dataclass(frozen=True)
class _Old:
    """Where the old image of a diff comes from: a reference, its pinned digest and platform (None: unknown)."""

    ref: str | None
    digest: str | None
    platform: str | None


def upstream_of(root: Path, name: str, opener: Opener, *, image: str | None, from_ref: str | None,
                platform: str | None = None, selection: tuple[Queue, Lock | None] | None = None,
                profile: str | None = None) -> UpstreamDiff:
    """What upstream changed, between the old and the new image, in the regions patch `name` edits
    (`opener` opens references as the queue keeps them: relative paths are the queue directory's).
    `selection`: a profile's queue and pin (the profile resolved at the edge); default the queue's own.
    While a rebase of several profiles is stopped, each profile (a lane) has its own old pin, new
    image and paths: every lane that carries the patch is shown (`lanes`), or `profile`'s alone."""
    from .state import load_state, rebase_in_progress
    from .backup import backup_queue

    if rebase_in_progress(root):
        st = load_state(root)
        whole = backup_queue(root)  # the queue as it was before the rebase: its patches fit the old image
        if not st.others:
            lane = st.lane(st.profile)
            q = whole.selection(lane["select"]) if lane["profile"] is not None else whole
            old = _Old(lane["old_image"]["ref"], lane["old_image"]["digest"], _pinned_platform(root, lane["profile"]))
            got = _one(root, q, st.copies.get(name, name), opener, image or lane["new_ref"], from_ref, platform, old,
                       dict(lane["paths"]))
            return replace(got, patch=name, profile=lane["profile"])
        return _lanes(root, st, whole, name, opener, image, from_ref, platform, profile)
    if selection is not None:
        q = selection[0]
    else:
        q = load_queue(root)
    lock = selection[1] if selection is not None else q.lock()
    old = _Old(lock.image.ref, lock.image.digest, lock.image.platform) if lock is not None else _Old(None, None, None)
    return replace(_one(root, q, name, opener, image, from_ref, platform, old, {}), profile=profile)


def _lanes(root: Path, st: RebaseState, whole: Queue, name: str, opener: Opener, image: str | None, from_ref: str | None,
           platform: str | None, profile: str | None) -> UpstreamDiff:
    """A stopped rebase of several profiles: the patch (a --split copy is its original's bytes) in
    each lane that carries it, from that lane's old pin to its new image."""
    from ..queue.series import parse_series, pushable

    entries = parse_series(st.series.encode("utf-8", "surrogateescape")) if st.series is not None else whole.entries
    entry = next((e for e in entries if e.name == name), None)
    if entry is None:
        raise UsageError(f"No patch {name!r} in the series the rebase carries.", hint="`imgquilt rebase --status` shows it.")
    lanes = sorted((st.lane(p) for p in st.pins), key=lambda d: d["profile"] or "")
    carrying = [ln for ln in lanes if pushable(entry.guards, set(ln["select"]))[0]]
    if profile is not None:
        if profile not in [ln["profile"] for ln in lanes]:
            raise UsageError(f"Profile {profile} is not part of the rebase under way (it rebases "
                             f"{', '.join(str(ln['profile']) for ln in lanes)}).",
                             hint="Name one of those with --profile, or none to see every profile's.")
        carrying = [ln for ln in carrying if ln["profile"] == profile]
        if not carrying:
            raise UsageError(f"Profile {profile} does not carry {name} in this rebase.",
                             hint=f"`imgquilt diff --upstream {name}` shows the profiles that do.")
    if image is not None and len(carrying) > 1:
        raise UsageError("--image names one new image, and this rebase carries the patch onto several.",
                         hint=f"Name the profile: `imgquilt diff --upstream {name} --profile NAME --image NEWREF`.")
    original = st.copies.get(name, name)
    got = tuple(replace(_one(root, whole.selection(ln["select"]), original, opener, image or ln["new_ref"], from_ref,
                             platform or ln["platform"],
                             _Old(ln["old_image"]["ref"], ln["old_image"]["digest"], _pinned_platform(root, ln["profile"])),
                             dict(ln["paths"])),
                        patch=name, profile=ln["profile"])
                for ln in carrying)
    return got[0] if len(got) == 1 else replace(got[0], lanes=got)


def _pinned_platform(root: Path, pin: str | None) -> str | None:
    """The platform of the pin a rebase started from (targets.lock is re-pinned only at its end)."""
    from ..queue.lock import read_lock_file

    lf = read_lock_file(root / "targets.lock")
    found = lf.default if pin is None else (p.lock if (p := lf.profile(pin)) is not None else None)
    return found.image.platform if found is not None else None


def _one(root: Path, q: Queue, name: str, opener: Opener, image: str | None, from_ref: str | None,
         platform: str | None, pinned: _Old, paths_map: dict[str, str]) -> UpstreamDiff:
    """One old image -> one new image, for the patch as `q` (a selection) chains it."""
    if not image:
        raise UsageError("diff --upstream needs the new image: pass --image NEWREF.",
                         hint="Example: imgquilt diff --upstream 0001-fix.patch --image oci:vllm:0.11.0")
    if name not in q.names:
        raise UsageError(f"No patch {name!r} in the series.", hint="`imgquilt series` lists them.")
    patch = q.patches[q.names.index(name)]
    store = ObjectStore(root)
    old_ref = from_ref or pinned.ref
    firsts = q.first_bases()
    want = {s.path: firsts[s.path] for s in patch.sections}
    old_bytes: dict[str, bytes | None] = {}
    missing = []
    for p, sha in want.items():
        if sha == ABSENT:
            old_bytes[p] = None
            continue
        found, data = store.get_or_absent(sha)
        if found and from_ref is None:
            old_bytes[p] = data
        else:
            missing.append(p)
    old_digest = pinned.digest if not from_ref else None
    if missing:
        if old_ref is None:
            raise UsageError("Which image is the old one? Pass --from OLDREF (there is no targets.lock to take it from).")
        src = opener(old_ref, platform or (pinned.platform if not from_ref else None))
        old_digest = src.info().digest
        for p, t in read_targets(src, missing, q.link_paths()).items():
            if sha256_hex(t.data) != want[p]:
                raise BaseDrift(f"{old_ref}: {p} is not the base the series starts from (expected sha256 {want[p]}, "
                                f"found {sha256_hex(t.data)}).", hint="Pass --from the image the queue was made for.")
            old_bytes[p] = t.data
    new_src = opener(image, platform)
    new_paths = {p: paths_map.get(p, p) for p in want}
    new_targets = read_targets(new_src, sorted(set(new_paths.values())), {new_paths[p] for p in q.link_paths() if p in new_paths})
    changes: list[RegionChange] = []
    for s in patch.sections:
        base = _patch_base(q, store, name, s.path, old_bytes[s.path])
        regions = regions_of(s, base)
        old = old_bytes[s.path]
        if base != old and old is not None and base is not None:
            regions = _mapped(regions, base, old)
        new = new_targets[new_paths[s.path]].data
        if new is None and old is not None:
            raise BadInput(f"{new_paths[s.path]} is not in {image}.", hint="If it moved, say where with a rebase's --map.")
        changes += upstream_changes(s.path, regions, old, new, new_path=new_paths[s.path])
    return UpstreamDiff(name, {"ref": old_ref, "digest": old_digest}, {"ref": image, "digest": new_src.info().digest},
                        tuple(changes), tuple(s.path for s in patch.sections))


def _patch_base(q: Queue, store: ObjectStore, name: str, path: str, first: bytes | None) -> bytes | None:
    """The bytes the patch's section of `path` applies to: the store's, else the series replayed."""
    patch = q.patches[q.names.index(name)]
    sec = next(s for s in patch.sections if s.path == path)
    found, data = store.get_or_absent(sec.base_sha256)
    if found:
        return data
    data = first
    for p in q.patches[: q.names.index(name)]:
        for s in p.sections:
            if s.path == path:
                data = None if s.is_delete else apply_section(data, s)
    if sha256_hex(data) != sec.base_sha256:
        raise BaseDrift(f"{name}: {path}: the series does not lead to its Base-SHA256 {sec.base_sha256}.",
                        hint="Run `imgquilt check`.")
    return data


def _mapped(regions: list[Region], base: bytes, old: bytes) -> list[Region]:
    """Regions of lines found in a later patch's base, at the same lines of the old image's file."""
    m = difflib.SequenceMatcher(None, split_lines(base), split_lines(old), autojunk=False)

    def to_old(line: int) -> int:
        for tag, i1, i2, j1, j2 in m.get_opcodes():
            if i1 <= line - 1 < i2:
                return j1 + (line - 1 - i1 if tag == "equal" else 0) + 1
        return len(m.b)

    return [replace(r, start=to_old(r.start), end=max(to_old(r.start), to_old(r.end))) if r.kind == LINES else r for r in regions]
