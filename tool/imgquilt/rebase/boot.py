"""After each rebase step: the cross-module Python check on the new image, and where moved code went.

A patch carried or merged cleanly can still break at boot on the new image: a helper it imports
moved, a function it calls gained a required parameter. After each patch the rebase checks that
patch's `.py` results against the new image with the rebased queue so far in front of it (the
engine's crosscheck, new findings only: the file's bytes before this patch, against the image
before this patch, are the base). A finding stops the rebase like a conflict (kind `python`): the
result goes to the work tree, to be fixed and `--continue`d (or `--skip`ped).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..engine.apply import HunkError, apply_section
from ..pycheck.crosscheck import Finding, FileCheck, absolute, cross_check
from ..pycheck.pysearch import Finder, SourceModules, place_of
from ..pycheck.regions import MOVED
from ..errors import ImgquiltError
from ..fs.types import Source, read_targets
from ..queue.hunks import ABSENT
from ..queue.patchfile import Patch
from ..store import ObjectStore
from .report import CONFLICT, UPSTREAM
from .sections import original_section
from .state import CarriedSection, RebaseState


class NewImage:
    """The new image, opened once per run of the rebase loop and only when a check needs it."""

    def __init__(self, opener, st: RebaseState, links: set[str] | frozenset[str] = frozenset()) -> None:
        self._opener = opener
        self._ref, self._platform = st.new_ref, st.platform  # this pin's image: a rebase of several moves its focus
        self._links = {st.paths.get(p, p) for p in links}  # symlink sections: read as the link, never followed
        self._source: Source | None = None
        self._modules: SourceModules | None = None
        self._resolved: dict[str, str] = {}

    @property
    def source(self) -> Source:
        if self._source is None:
            self._source = self._opener(self._ref, self._platform)
        return self._source

    @property
    def modules(self) -> SourceModules:
        if self._modules is None:
            self._modules = SourceModules(self.source)
        return self._modules

    def resolved(self, paths: list[str]) -> dict[str, str]:
        """Each new-image path of the queue, resolved in the new image."""
        todo = [p for p in paths if p not in self._resolved]
        if todo:
            for p, t in read_targets(self.source, todo, self._links).items():
                self._resolved[p] = t.resolved
        return {p: self._resolved[p] for p in paths}


@dataclass(frozen=True)
class StepFindings:
    """One section's new findings (problems, then "cannot tell"s), rendered and as JSON."""

    problems: tuple[Finding, ...]
    notes: tuple[Finding, ...]
    path: str

    def located(self) -> list[str]:
        return [x for f in self.problems for x in f.located(self.path)]

    def json(self) -> tuple[dict, ...]:
        return tuple(x for f in self.problems + self.notes for x in f.to_json(self.path))


def result_bytes(store: ObjectStore, patch: Patch, cs: CarriedSection) -> bytes | None:
    """The bytes a carried section leaves on the new image."""
    oc = cs.outcome
    if oc.new_patched is None or oc.new_patched == ABSENT:
        return None
    found, data = store.get_or_absent(oc.new_patched)
    if not found:  # carried unchanged and never stored: from its base, when the store has that
        found, base = store.get_or_absent(oc.new_base)
        if not found:
            raise _Unknown(oc.path)
        try:
            data = apply_section(base, original_section(patch, cs.old_path))
        except HunkError:
            raise _Unknown(oc.path) from None
    return data


class _Unknown(Exception):
    """Bytes the store does not hold: that file is left out of the check (never taken as deleted)."""


def step_findings(st: RebaseState, store: ObjectStore, patch: Patch, sections: list[CarriedSection],
                  image: NewImage) -> dict[int, StepFindings]:
    """The new cross-module findings of each of the patch's sections (by index) on the new image."""
    todo = [i for i, cs in enumerate(sections)
            if cs.outcome.state not in (CONFLICT, UPSTREAM) and cs.outcome.path.endswith(".py")]
    if not todo or not st.python_check:
        return {}
    before, after, files, index, named = step_trees(st, store, patch, sections, image, todo)
    if not files:
        return {}
    changed = [(rp, before.get(rp), data) for rp, data in after.items() if data != before.get(rp)]
    out: dict[int, StepFindings] = {}
    for ff in cross_check(files, changed, image.modules.view(after, named), image.modules.view(before, named)):
        out[index[ff.check.resolved]] = StepFindings(ff.findings, ff.notes, ff.check.path)
    return out


def step_trees(st: RebaseState, store: ObjectStore, patch: Patch, sections: list[CarriedSection], image: NewImage,
               todo: list[int]):
    """The queue's files on the new image (resolved path -> bytes, None: absent) before this patch (the
    rebased queue so far) and after it; the `todo` sections whose result differs (as FileChecks, and
    their index by resolved path); the queue's paths resolved."""
    new_paths = {old: st.paths[old] for old in st.new_chain}
    resolved = image.resolved(sorted(set(new_paths.values())))
    before: dict[str, bytes | None] = {}
    for old, sha in st.new_chain.items():
        found, data = store.get_or_absent(sha)
        if found:  # bytes the store lacks stay the image's, never taken as a deletion
            before[resolved[new_paths[old]]] = data
    after = dict(before)
    files: list[FileCheck] = []
    index: dict[str, int] = {}
    for i, cs in enumerate(sections):
        if cs.outcome.state == CONFLICT:
            continue
        rp = resolved[new_paths[cs.old_path]]
        try:
            data = result_bytes(store, patch, cs)
        except _Unknown:
            continue
        after[rp] = data
        if i in todo and data is not None and rp in before and data != before[rp]:
            files.append(FileCheck(cs.outcome.path, rp, before[rp], data))
            index[rp] = i
    named = {new_paths[old]: resolved[new_paths[old]] for old in new_paths}
    return before, after, files, index, named


def with_findings(root, st: RebaseState, store: ObjectStore, patch: Patch, sections: list[CarriedSection],
                  found: dict[int, StepFindings]) -> list[CarriedSection]:
    """Sections with their findings recorded; one with problems becomes a conflict of kind `python`,
    its result in the work tree."""
    from .work_files import put_work

    out = list(sections)
    for i, f in found.items():
        cs = out[i]
        oc = replace(cs.outcome, findings=f.json())
        if f.problems:
            data = result_bytes(store, patch, cs)  # known: the check had it
            work = put_work(root, st, oc.path, data)
            detail = ("applies cleanly, but on the new image: " if oc.state in ("unchanged", "moved") else
                      "merged without conflict markers, but on the new image: ") + "; ".join(f.located())
            oc = replace(oc, state=CONFLICT, conflict="python", work=work, detail=detail, new_patched=None)
            cs = replace(cs, ours_sha=store.put(data or b""), theirs_sha=oc.new_base if oc.new_base != ABSENT else None)
        out[i] = replace(cs, outcome=oc)
    return out


def locate_moves(sections: list[CarriedSection], image: NewImage) -> list[CarriedSection]:
    """Name the file each function or class that upstream moved to another module went to."""
    out = []
    for cs in sections:
        ups = cs.outcome.upstream
        if any(u.change == MOVED and u.moved_to and not u.moved_path for u in ups):
            ups = tuple(_with_path(u, cs.outcome.path, image) if u.change == MOVED else u for u in ups)
            cs = replace(cs, outcome=replace(cs.outcome, upstream=ups))
        out.append(cs)
    return out


def _with_path(u, path: str, image: NewImage):
    try:
        rp = image.resolved([path])[path]
        view = image.modules.view()
        place = place_of(rp, view, settle=True)
        if place is None or not u.moved_to:
            return u
        level = len(u.moved_to) - len(u.moved_to.lstrip("."))
        target = absolute(place, level, u.moved_to.lstrip("."))
        spec = Finder(view, place, settle=True).find(target) if target else None
        if spec is not None and spec.file:
            return replace(u, moved_to=target, moved_path=spec.file)
        return replace(u, moved_to=target or u.moved_to)
    except ImgquiltError:  # naming the file is a courtesy: the report keeps the module name
        return u
