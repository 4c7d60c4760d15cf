"""`imgquilt diff --upstream PATCH`: upstream's change of the regions a patch touches, between the
old and the new image, at any time (no rebase needed).

Where the bytes come from (docs/boot-checks.md):
- the patch's regions are found in its own base (the bytes its Base-SHA256 names: the object store,
  else the old image's file with the series' earlier patches applied);
- old: the file as the series starts from it, in the image `--from` names, else the one targets.lock
  pins (its bytes from the object store by the lock's hash, else read from that image);
- new: the file in the image `--image` names, else, while a rebase is under way, in the image it
  rebases onto (at the path the rebase maps it to).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from pathlib import Path

from ..fs.types import read_targets
from ..engine.apply import apply_section
from ..pycheck.regions import LINES, Region, RegionChange, regions_of, upstream_changes
from ..errors import BadInput, BaseDrift, UsageError
from ..queue.hunks import ABSENT, sha256_hex, split_lines
from ..queue.lock import Lock
from ..queue.queue import Queue, load_queue
from ..store import ObjectStore
from .options import Opener


@dataclass(frozen=True)
class UpstreamDiff:
    patch: str
    old: dict  # {"ref", "digest"}
    new: dict
    changes: tuple[RegionChange, ...]
    paths: tuple[str, ...]  # the patch's files looked at

    def to_json(self) -> dict:
        return {"patch": self.patch, "old": self.old, "new": self.new, "files": list(self.paths),
                "upstream": [c.to_json() for c in self.changes]}


def upstream_of(root: Path, name: str, opener: Opener, *, image: str | None, from_ref: str | None,
                platform: str | None = None, selection: tuple[Queue, Lock | None] | None = None) -> UpstreamDiff:
    """What upstream changed, between the old and the new image, in the regions patch `name` edits
    (`opener` opens references as the queue keeps them: relative paths are the queue directory's).
    `selection`: a profile's queue and pin (the profile resolved at the edge); default the queue's own."""
    from .state import load_state, rebase_in_progress
    from .backup import backup_queue

    paths_map: dict[str, str] = {}
    if rebase_in_progress(root):
        st = load_state(root)
        q = backup_queue(root)  # the queue as it was before the rebase: its patches fit the old image
        image = image or st.new_ref
        paths_map = dict(st.paths)
    elif selection is not None:
        q = selection[0]
    else:
        q = load_queue(root)
    if not image:
        raise UsageError("diff --upstream needs the new image: pass --image NEWREF.",
                         hint="Example: imgquilt diff --upstream 0001-fix.patch --image oci:vllm:0.11.0")
    if name not in q.names:
        raise UsageError(f"No patch {name!r} in the series.", hint="`imgquilt series` lists them.")
    patch = q.patches[q.names.index(name)]
    lock = selection[1] if selection is not None else q.lock()
    store = ObjectStore(root)
    old_ref = from_ref or (lock.image.ref if lock is not None else None)
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
    old_digest = lock.image.digest if lock is not None and not from_ref else None
    if missing:
        if old_ref is None:
            raise UsageError("Which image is the old one? Pass --from OLDREF (there is no targets.lock to take it from).")
        src = opener(old_ref, platform or (lock.image.platform if lock is not None and not from_ref else None))
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
