"""A rebase of several pins at once (`rebase --profile all`): one rebase run over a list of (pin, old
pin, new image), with one journal. What is decided here, before the first merge:

    carried     the patches at least one pin selects, in series order (the journal's `next` counts these)
    selecting   which of the rebase's pins select an entry
    disagreements  a patch two pins share whose file the pins' new images hold at different bases: the
                rebased patch could not have one Base-SHA256, so the rebase could never finish
    plan_split  --split: such a patch is kept for the pins that agree, and a guarded copy is made for
                each other group (0005-x.patch gets -rocm, 0005-x-rocm.patch gets +rocm)
    lineage     a profile re-pinned onto the image another profile pins, or onto another repository
                (the image's own reference, else the base its OCI annotations name)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ..errors import LineageBroken, SplitNeeded
from ..image.base_image import BaseImage
from ..queue.lock import LockFile
from ..queue.queue import Queue
from ..queue.series import SeriesEntry, guarded, inserted, parse_series, pushable, selection_text


@dataclass(frozen=True)
class Lane:
    """One pin of the rebase as the start sees it: its selection and where its targets are in its new image."""

    pin: str | None  # a profile's name (None: the default pin)
    select: tuple[str, ...]
    paths: dict[str, str]  # old path -> path in its new image
    new_chain: dict[str, str]  # old path -> sha256 of the file in its new image (where its selection starts)

    @property
    def label(self) -> str:
        return self.pin if self.pin is not None else "(default)"


def carried(whole: Queue, selects: Sequence[Sequence[str]]) -> Queue:
    """The patches at least one of the selections applies, as a queue (one selection: exactly it)."""
    if len(selects) == 1 or not whole.guarded:
        return whole.selection(selects[0] if selects else ())
    keep = [e for e in whole.entries if any(pushable(e.guards, set(s))[0] for s in selects)]
    names = {e.name for e in keep}
    return Queue(whole.root, selection_text(keep), tuple(keep), tuple(p for p in whole.patches if p.name in names))


def selecting(entry: SeriesEntry, lanes: Sequence[tuple[str | None, Sequence[str]]]) -> list[str | None]:
    """The pins (in the given order) whose selection applies `entry`."""
    return [pin for pin, select in lanes if pushable(entry.guards, set(select))[0]]


def left_out(whole: Queue, selects: Sequence[Sequence[str]]) -> list[str]:
    """The patches none of the rebased pins selects: left as they are."""
    names = set(carried(whole, selects).names)
    return [n for n in whole.names if n not in names]


@dataclass(frozen=True)
class Disagreement:
    """A shared patch whose file the pins' new images hold at different bases."""

    patch: str
    path: str
    groups: tuple[tuple[tuple[str, ...], str, str], ...]  # (pins, path in their image, sha256 there), largest first

    def render(self) -> str:
        sides = "; ".join(f"{', '.join(pins)}: {path} at {sha[:12]}…" + (" (absent)" if sha == "absent" else "")
                          for pins, path, sha in self.groups)
        return f"{self.patch}: {self.path}: {sides}"


def _key(q: Queue, lane: Lane, name: str, path: str) -> tuple[str, str, tuple[str, ...]]:
    """What a patch's section of `path` is rebased onto in one lane: the file in its new image, and
    the lane's own patches before it that change the file."""
    sel = q.selection(lane.select)
    earlier = tuple(p.name for p in sel.patches[: sel.names.index(name)] if any(s.path == path for s in p.sections))
    return lane.paths[path], lane.new_chain[path], earlier


def _groups(whole: Queue, lanes: Sequence[Lane], name: str, path: str) -> list[list[Lane]]:
    """The lanes that select `name`, grouped by what its section of `path` rebases onto; largest first,
    a tie to the group holding the earliest lane."""
    here = [ln for ln in lanes if name in whole.selection(ln.select).names]
    by: dict[tuple, list[Lane]] = {}
    for ln in here:
        by.setdefault(_key(whole, ln, name, path), []).append(ln)
    return sorted(by.values(), key=lambda g: (-len(g), lanes.index(g[0])))


def disagreements(whole: Queue, lanes: Sequence[Lane]) -> list[Disagreement]:
    """Every (shared patch, file) where the lanes that select the patch rebase it onto different bases."""
    out: list[Disagreement] = []
    if len(lanes) < 2:
        return out
    for p in whole.patches:
        for s in p.sections:
            groups = _groups(whole, lanes, p.name, s.path)
            if len(groups) > 1:
                out.append(Disagreement(p.name, s.path, tuple(
                    (tuple(ln.label for ln in g), g[0].paths[s.path], g[0].new_chain[s.path]) for g in groups)))
    return out


def refuse_disagreements(found: list[Disagreement], command: str) -> SplitNeeded:
    return SplitNeeded(
        "Refused before any merge: a patch the profiles share changes a file their new images hold at different "
        "bases, so one rebased patch could not fit them all; nothing was changed:\n"
        + "\n".join(f"  - {d.render()}" for d in found),
        hint=f"Split each such patch: `{command} --split` keeps it for the profiles that agree and carries a guarded copy "
             "(NAME-PROFILE.patch, +PROFILE) onto the others' base by a 3-way merge.")


def _guard_for(lane: Lane, kept: Sequence[Lane]) -> str:
    """The guard that tells `lane` from the pins that keep the patch: its own name when it selects it."""
    taken = {g for ln in kept for g in ln.select}
    for g in ([lane.pin] if lane.pin in lane.select else []) + list(lane.select):
        if g is not None and g not in taken:
            return g
    raise SplitNeeded(f"Cannot split for {lane.label}: it selects no guard ({', '.join(lane.select) or 'none'}) that the "
                      f"profiles keeping the patch ({', '.join(ln.label for ln in kept)}) do not select too.",
                      hint="Give the profile a guard of its own (`imgquilt lock --profile NAME --select NAME,...`), then rebase again.")


def copy_name(name: str, guards: Sequence[str]) -> str:
    """0005-x.patch -> 0005-x-rocm.patch (a name without .patch/.diff gets the suffix at its end)."""
    m = re.fullmatch(r"(.*?)(\.patch|\.diff)?", name)
    assert m is not None
    return f"{m.group(1)}-{'-'.join(guards)}{m.group(2) or ''}"


def plan_split(whole: Queue, lanes: Sequence[Lane], found: list[Disagreement]) -> tuple[bytes, dict[str, str], list[str]]:
    """The series with each disagreeing patch kept for the largest group of lanes that agree on every
    file it changes, and a copy, guarded +G, for each other group (the kept one gets -G). Returns
    (series bytes, copies: copy -> original, notes)."""
    series = whole.series_bytes
    copies: dict[str, str] = {}
    notes: list[str] = []
    for name in dict.fromkeys(d.patch for d in found):
        patch = whole.patch(name)
        here = [ln for ln in lanes if name in whole.selection(ln.select).names]
        by: dict[tuple, list[Lane]] = {}
        for ln in here:
            by.setdefault(tuple(_key(whole, ln, name, s.path) for s in patch.sections), []).append(ln)
        groups = sorted(by.values(), key=lambda g: (-len(g), lanes.index(g[0])))
        kept, rest = groups[0], groups[1:]
        entry = next(e for e in parse_series(series) if e.name == name)
        negs = []
        after = name
        for g in rest:
            gs = [_guard_for(ln, kept) for ln in g]
            copy = copy_name(name, list(dict.fromkeys(gs)))
            if copy in whole.names or (whole.patches_dir / copy).exists() or copy in copies:
                raise SplitNeeded(f"Cannot split {name}: its copy's name {copy} is taken.",
                                  hint=f"Rename that patch (`imgquilt rename {copy} NEW`), then rebase again.")
            guards = tuple(dict.fromkeys([f"+{g}" for g in gs] + [x for x in entry.guards if x.startswith("-")]))
            series = inserted(series, [SeriesEntry(copy, entry.strip, 0, guards)], after)
            after = copy
            copies[copy] = name
            negs += [f"-{g}" for g in gs]
            notes.append(f"{name} split (--split): kept for {', '.join(ln.label for ln in kept)}; {copy} ({' '.join(guards)}) "
                         f"carries it for {', '.join(ln.label for ln in g)} onto their base.")
        series = guarded(series, name, list(dict.fromkeys([*entry.guards, *negs])))
    return series, copies, notes


def with_copies(whole: Queue, series: bytes, copies: dict[str, str]) -> Queue:
    """The queue as --split rewrote it: its series, and each copy a patch of its own (same bytes)."""
    from ..queue.patchfile import parse_patch

    entries = tuple(parse_series(series))
    by = {p.name: p for p in whole.patches}
    patches = tuple(by[e.name] if e.name in by else parse_patch(by[copies[e.name]].raw, e.name) for e in entries)
    return Queue(whole.root, series, entries, patches)


def repository(ref: str | None) -> str | None:
    """The repository a registry or store reference names (tag and digest cut off); None for a
    layout, an archive or a root on disk, whose name says nothing of who made the image."""
    if not ref:
        return None
    for prefix in ("docker://", "containers-storage:", "docker-daemon:"):
        if ref.startswith(prefix):
            name = re.sub(r"^\[[^\]]*\]", "", ref[len(prefix):])
            name = name.split("@", 1)[0]
            head, _, last = name.rpartition("/")
            last = last.split(":", 1)[0]
            return f"{prefix}{head + '/' if head else ''}{last}"
    return None


def base_repository(name: str | None) -> str | None:
    """The repository an image's base.name annotation names: a registry name (the spec's form, no
    transport: reg.example.com/app:1.0) as `docker://`, a store reference as repository() reads it;
    None for a layout, an archive or no name."""
    if not name:
        return None
    if re.match(r"^(oci|oci-archive|docker-archive|dir|tar|rootfs|ostree|sif|tarball):", name):
        return None
    return repository(name if re.match(r"^(docker://|containers-storage:|docker-daemon:)", name) else f"docker://{name}")


def _names_pin(base: BaseImage, ref: str, digest: str | None) -> bool:
    """Whether an image's base annotations name the pin (ref, digest): its digest, or its reference
    (a local one as targets.lock keeps it, a registry one by its repository)."""
    if base.digest is not None and base.digest == digest:
        return True
    if base.name is None:
        return False
    repo = base_repository(base.name)
    return base.name == ref or (repo is not None and repo == repository(ref))


def lineage(lf: LockFile, pin: str | None, new_ref: str, new_digest: str | None, *, force: bool,
            base: BaseImage | None = None) -> str | None:
    """A profile keeps its lineage: refused (LineageBroken) when its new image is the one another
    profile pins (and not its own already), or comes from another repository than its old pin, unless
    `force`. `base`, the new image's base annotations (base_image.base_of), are its lineage too: an
    image built on another profile's pin (its digest, its reference or its repository) is that
    profile's line, one built on this profile's own pin is this one's, and a layout or an archive
    takes the repository its base names. Returns the other profile whose image it is (forced), else None."""
    if pin is None:
        return None
    own = lf.profile(pin)
    if own is None:
        return None
    old = own.lock.image
    old_repo, new_repo = repository(old.ref), repository(new_ref)
    # another profile's image: unless it is this profile's own already, or comes from this profile's own
    # repository (two deployments of one image line; a layout's path names no repository)
    others = [p.name for p in lf.profiles if p.name != pin and new_digest is not None and p.lock.image.digest == new_digest
              and (old_repo is None or repository(p.lock.image.ref) != old_repo)]
    if old.digest == new_digest:
        others = []
    built_on: list[str] = []
    if base is not None and old.digest != new_digest and not _names_pin(base, old.ref, old.digest):
        built_on = [p.name for p in lf.profiles if p.name != pin and p.name not in others
                    and _names_pin(base, p.lock.image.ref, p.lock.image.digest)
                    and (old_repo is None or repository(p.lock.image.ref) != old_repo)]
        if new_repo is None and not built_on:
            new_repo = base_repository(base.name)  # a layout or an archive: the repository its base came from
    moved = old_repo is not None and new_repo is not None and old_repo != new_repo and not built_on
    if force or not (others or built_on or moved):
        return (others + built_on)[0] if others or built_on else None
    why = []
    if others:
        why.append(f"{new_ref} is the image profile {', '.join(others)} pins ({new_digest})")
    if built_on:
        named = " ".join(x for x in (base.name if base else None, f"({base.digest})" if base and base.digest else None) if x)
        why.append(f"{new_ref} was built on the image profile {', '.join(built_on)} pins: its base annotations name {named}, "
                   f"profile {pin}'s pin is {old.ref} ({old.digest})")
    if moved:
        why.append(f"{new_ref} is from repository {new_repo}"
                   + (" (its base annotations' name)" if repository(new_ref) is None else "")
                   + f", profile {pin}'s pin {old.ref} from {old_repo}")
    raise LineageBroken(
        f"Refused: re-pinning profile {pin} would leave its lineage: {'; and '.join(why)}. Nothing was changed.",
        hint=f"Give profile {pin} its own new image (`--image {pin}=REF`). If this is meant, add --force: the report then "
             "calls the differences that image's, not upstream's.")


def outside_breaks(whole: Queue, lanes: Sequence[Lane], outside: Sequence[tuple[str | None, Sequence[str], object]]) -> tuple[list[str], list[str]]:
    """Before any merge: the pins this rebase does not re-pin (`outside`: (profile or None, select,
    Lock or None)) that select a patch the rebase rewrites for sure (the first patch of a file whose
    bytes the new image changed), where that patch is their first of the file too and their image
    holds other bytes: they would no longer chain. The finish checks the rest (a rewrite that only a
    merge decides). Returns (problems, the pins to rebase as well)."""
    problems: list[str] = []
    pins: list[str] = []
    for pin, select, lock in outside:
        label = f"profile {pin}" if pin is not None else "the default pin"
        theirs = whole.selection(select)
        first_of: dict[str, str] = {}
        for p in theirs.patches:
            for s in p.sections:
                first_of.setdefault(s.path, p.name)
        pinned = {t.path: t.base_sha256 for t in getattr(lock, "targets", ())}
        for ln in lanes:
            seen: set[str] = set()
            for p in whole.selection(ln.select).patches:
                for s in p.sections:
                    if s.path in seen:
                        continue
                    seen.add(s.path)
                    new = ln.new_chain[s.path]
                    if first_of.get(s.path) != p.name or (new == s.base_sha256 and ln.paths[s.path] == s.path):
                        continue
                    held = pinned.get(s.path, s.base_sha256)
                    if held != new:
                        line = (f"{label}: {p.name}: {s.path}: the rebase gives it the base {new[:12]}… ({ln.label}'s new image), "
                                f"{label}'s image holds {held[:12]}…")
                        if line not in problems:
                            problems.append(line)
                        if (pin or "(default)") not in pins:
                            pins.append(pin or "(default)")
    return problems, pins


def together(rebased: Sequence[tuple[str | None, str]], others: Sequence[str]) -> str:
    """The command that rebases the other pins in the same rebase, each onto its own new image."""
    names = [str(p) for p, _ in rebased] + list(others)
    return ("imgquilt rebase --profile " + ",".join(names) + "".join(f" --image {p}={ref}" for p, ref in rebased)
            + "".join(f" --image {o}=NEWREF" for o in others))
