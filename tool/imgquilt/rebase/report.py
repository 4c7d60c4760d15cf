"""The outcome of a rebase per file, per patch and overall, and its JSON form."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..pycheck.regions import RegionChange

# file and patch states of the report
UNCHANGED, MERGED, CONFLICT, MOVED, UPSTREAM = "unchanged", "merged", "conflict", "moved", "merged-upstream"
STATES = (UNCHANGED, MERGED, CONFLICT, MOVED, UPSTREAM)


@dataclass(frozen=True)
class FileOutcome:
    """What happened to one file section."""

    path: str  # in the rebased queue
    state: str
    old_base: str
    old_patched: str
    new_base: str
    new_patched: str | None = None  # None while a conflict waits for its resolution
    moved_from: str | None = None
    merged: bool = False  # the diff was rewritten by a 3-way merge (also for moved files)
    by_hand: bool = False  # a conflict resolved in the work tree
    conflict: str | None = None  # markers | binary | delete | python | boot
    work: str | None = None  # the work-tree file to resolve, relative to the queue
    detail: str = ""
    upstream: tuple[RegionChange, ...] = ()  # what upstream changed in the regions the section edits
    findings: tuple[dict, ...] = ()  # the cross-module check's new findings on the new image (crosscheck.Finding.to_json)
    reused: bool = False  # resolved by a kept resolution of the same three sides (rebase.rerere)
    boot: tuple[dict, ...] = ()  # rebase --boot: the probes of its module on the new image (verbs.boot.Probe.json)

    def to_json(self) -> dict:
        return {
            "path": self.path, "from": self.moved_from, "state": self.state, "merged": self.merged,
            "by_hand": self.by_hand, "old_base": self.old_base, "old_patched": self.old_patched,
            "new_base": self.new_base, "new_patched": self.new_patched, "conflict": self.conflict,
            "work": self.work, "detail": self.detail, "upstream": [u.to_json() for u in self.upstream],
            "findings": [dict(f) for f in self.findings], "reused": self.reused, "boot": [dict(b) for b in self.boot],
        }

    @classmethod
    def from_json(cls, doc: dict) -> FileOutcome:
        return cls(
            path=doc["path"], state=doc["state"], old_base=doc["old_base"], old_patched=doc["old_patched"],
            new_base=doc["new_base"], new_patched=doc["new_patched"], moved_from=doc["from"], merged=doc["merged"],
            by_hand=doc["by_hand"], conflict=doc["conflict"], work=doc["work"], detail=doc["detail"],
            upstream=tuple(RegionChange.from_json(u) for u in doc.get("upstream", [])),
            findings=tuple(dict(f) for f in doc.get("findings", [])), reused=bool(doc.get("reused", False)),
            boot=tuple(dict(b) for b in doc.get("boot", [])),
        )


@dataclass(frozen=True)
class PatchOutcome:
    name: str
    state: str
    files: tuple[FileOutcome, ...]
    dropped: bool = False
    notes: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()  # a rebase of several profiles: the ones this patch was carried (or stopped) for

    @property
    def upstream(self) -> list[RegionChange]:
        return [u for f in self.files for u in f.upstream]

    @property
    def findings(self) -> list[dict]:
        return [x for f in self.files for x in f.findings]

    def headline(self, who: str = "upstream") -> str:
        """The patch's state in words, with what upstream (`who`: the image's maker) changed under it:
        "merged, upstream changed 2 functions it edits"."""
        words = self.state
        changed = self.upstream
        if changed:
            kinds = {u.region.kind for u in changed}
            noun = "functions" if kinds == {"function"} else "classes" if kinds == {"class"} else "regions"
            if len(changed) == 1:
                noun = {"functions": "function", "classes": "class", "regions": "region"}[noun]
            words += f", {who} changed {len(changed)} {noun} it edits"
        problems = [f for f in self.findings if f.get("kind") != "cannot-tell"]
        if problems:
            words += f", {len(problems)} new Python finding(s) on the new image"
        fails = [b for f in self.files for b in f.boot if b.get("verdict") == "fails"]
        if fails:
            words += f", {len(fails)} module(s) fail to boot on the new image"
        return words

    def to_json(self) -> dict:
        doc = {"name": self.name, "state": self.state, "dropped": self.dropped, "notes": list(self.notes),
               "files": [f.to_json() for f in self.files], "upstream": [u.to_json() for u in self.upstream],
               "findings": self.findings}
        if self.profiles:
            doc["profiles"] = list(self.profiles)
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> PatchOutcome:
        return cls(doc["name"], doc["state"], tuple(FileOutcome.from_json(f) for f in doc["files"]), doc["dropped"], tuple(doc["notes"]),
                   tuple(doc.get("profiles", ())))


@dataclass(frozen=True)
class RebaseReport:
    """The outcome of a rebase step: done, stopped on a conflict, or aborted."""

    status: str  # done | stopped | aborted
    old_image: dict
    new_image: dict
    patches: tuple[PatchOutcome, ...]
    notes: tuple[str, ...] = ()
    conflict_patch: str | None = None
    profile: str | None = None  # the profile rebased (None: the default pin, or several profiles: `pins`)
    pins: tuple[dict, ...] = ()  # a rebase of several profiles: {"profile", "old", "new", "vendor"} each, by name
    vendor: str | None = None  # re-pinned (--force) onto the image this other profile pins: its differences are not upstream's

    @property
    def who(self) -> str:
        """Who made the differences between the old and the new image, as the report names them."""
        if self.vendor:
            return f"profile {self.vendor}'s image (not upstream)"
        vendors = sorted({d["vendor"] for d in self.pins if d.get("vendor")})
        return f"upstream or {' / '.join(f'profile {v}' for v in vendors)}'s image" if vendors else "upstream"

    @property
    def conflict_profiles(self) -> tuple[str, ...]:
        return next((p.profiles for p in self.patches if p.name == self.conflict_patch and p.state == CONFLICT), ())

    @property
    def conflicts(self) -> list[FileOutcome]:
        return [f for p in self.patches if p.state == CONFLICT for f in p.files if f.state == CONFLICT]

    def summary(self) -> dict[str, int]:
        counts = {s: 0 for s in STATES}
        for p in self.patches:
            counts[p.state] += 1
        counts["dropped"] = sum(1 for p in self.patches if p.dropped)
        return counts


def patch_state(files: Sequence[FileOutcome]) -> str:
    """A patch takes the most telling state of its files."""
    states = {f.state for f in files}
    if CONFLICT in states:
        return CONFLICT
    if states == {UPSTREAM}:
        return UPSTREAM
    if MOVED in states:
        return MOVED
    if states & {MERGED, UPSTREAM}:
        return MERGED
    return UNCHANGED
