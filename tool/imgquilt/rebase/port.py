"""`imgquilt port PATCH --profile NAME`: a guarded copy of PATCH for another deployment, carried onto
that profile's pinned image by a 3-way merge (base: PATCH's base, ours: PATCH's result, theirs: the
file as the profile's own patches before PATCH leave it on its image).

The copy is `PATCH-NAME.patch` (PATCH's name less `.patch`, then `-NAME.patch`), guarded `+NAME` and
placed right after PATCH in series; PATCH gets `-NAME` when the profile selects it. Its sections are
pinned on the profile's bases, and targets.lock follows in the same queue transaction (work.relock).

A conflict stops the port (exit 4) with the merged file, markers included, in the work tree
(`.imgquilt/work/PATH`, as a rebase puts it); nothing in series, patches/ or targets.lock is written
until `port --continue` takes the resolutions; `port --abort` drops the port. The journal of a
stopped port is `.imgquilt/port/state.json`, sealed like every journal imgquilt acts on
(util.sealing). Resolutions are kept and reused as a rebase's are (rebase.rerere).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..engine.apply import HunkError, apply_section
from ..engine.merge import leftover_markers, merge3
from ..errors import (
    BadInput,
    ForeignState,
    ImgquiltError,
    MalformedPatch,
    ProfileChainBroken,
    RebaseConflict,
    UsageError,
)
from ..fs.content import held_or_none
from ..fs.paths import check_member_path
from ..fs.types import Source
from ..pycheck.names import located, new_python_errors
from ..queue.binarypatch import is_binary
from ..queue.hunks import ABSENT, sha256_hex
from ..queue.lock import Lock, LockFile, LockUpdate, read_lock_file
from ..queue.patchfile import FileSection, Patch, parse_patch
from ..queue.queue import Queue, load_queue
from ..queue.series import SeriesEntry, guarded, inserted, pushable
from . import rerere
from .sections import rewritten
from ..store import ObjectStore
from ..util.names import did_you_mean
from ..util.sealing import seal, sealed_here
from ..util.atomic import rename_at
from ..util.statedir import StateDir
from ..verbs.profiles import unknown

PinOpener = Callable[[Lock], Source]
STATE_DIR = "port"
VERSION = 1
# file states of a port
CARRIED, MERGED, UPSTREAM, CONFLICT, REUSED, RESOLVED = (
    "carried",
    "merged",
    "upstream",
    "conflict",
    "reused",
    "resolved",
)


@dataclass(frozen=True)
class PortedFile:
    path: str
    state: str  # carried | merged | upstream | conflict | reused | resolved
    detail: str = ""
    work: str | None = None  # the work-tree file to resolve (a conflict)
    kind: str | None = None  # markers | binary | delete | python (a conflict)

    def to_json(self) -> dict:
        return {"path": self.path, "state": self.state, "detail": self.detail, "work": self.work, "kind": self.kind}


@dataclass(frozen=True)
class Ported:
    """What `port` did: done (the copy written), stopped on a conflict, or aborted."""

    status: str
    patch: str
    profile: str
    copy: str
    guards: tuple[str, ...]  # PATCH's guards after the port
    copy_guards: tuple[str, ...]
    files: tuple[PortedFile, ...]
    image: dict = field(default_factory=dict)  # the profile's pin: {"ref", "digest"}
    lock: LockUpdate | None = None
    kept: tuple[str, ...] = ()  # --abort: the resolutions kept for the next port or rebase
    notes: tuple[str, ...] = ()

    @property
    def conflicts(self) -> list[PortedFile]:
        return [f for f in self.files if f.state == CONFLICT]


def copy_name(patch: str, profile: str) -> str:
    stem = patch[: -len(".patch")] if patch.endswith(".patch") else patch
    return f"{stem}-{profile}.patch"


def port_in_progress(root: Path) -> bool:
    return StateDir(root, STATE_DIR).is_file("state.json")


def _state_bytes(root: Path) -> bytes | None:
    return StateDir(root, STATE_DIR).read("state.json")


# --- the start ---------------------------------------------------------------------------------
def port(root: Path, name: str, profile: str, open_pin: PinOpener) -> Ported:
    """Make the guarded copy of `name` for `profile` (see the module docstring); every refusal comes
    before anything is read from an image or written."""
    _refuse_busy(root)
    _clear_leftovers(root)
    q = load_queue(root)
    lf = read_lock_file(root / "targets.lock")
    prof = lf.profile(profile)
    if prof is None:
        raise unknown(profile, lf)
    if name not in q.names:
        raise UsageError(
            f"Patch {name} is not in series." + did_you_mean(name, q.names), hint="`imgquilt series` lists the patches."
        )
    if profile not in prof.select:
        raise UsageError(
            f"Profile {profile} does not select guard {profile!r} (it selects {', '.join(prof.select) or 'no guard'}), "
            f"so a copy guarded +{profile} would be in none of its images.",
            hint=f"Make it select its own name: `imgquilt lock --profile {profile} --select {','.join((*prof.select, profile))}`.",
        )
    copy = copy_name(name, profile)
    if copy in q.names or (root / "patches" / copy).exists():
        raise UsageError(
            f"The copy's name {copy} is taken (in series or patches/); nothing was done.",
            hint="Rename or delete that patch first (`imgquilt rename`), or port from another patch.",
        )
    idx = q.names.index(name)
    entry, patch = q.entries[idx], q.patches[idx]
    selected = pushable(entry.guards, prof.select)[0]
    paths = [s.path for s in patch.sections]
    later = [
        e.name
        for e, p in zip(q.entries[idx + 1 :], q.patches[idx + 1 :])
        if pushable(e.guards, prof.select)[0] and any(s.path in paths for s in p.sections)
    ]
    if later:
        raise ProfileChainBroken(
            f"Refused: {', '.join(later)} (selected by profile {profile}) change(s) a file {name} changes, after it; a copy "
            f"inserted after {name} would change their base. Nothing was written.",
            hint=f"Port into a queue where {name} is the last of {profile}'s patches on its files, or rebase those too.",
        )
    if not patch.sections:
        raise UsageError(f"{name} changes no file: there is nothing to port.")
    store = ObjectStore(root)
    theirs = _chain_at(root, store, q, profile, prof.select, prof.lock, idx, patch, open_pin)
    if selected and all(sha256_hex(theirs[s.path]) == s.base_sha256 for s in patch.sections):
        raise UsageError(
            f"Profile {profile} already selects {name}, and it applies on {profile}'s image as it is: "
            "there is nothing to port.",
            hint="`imgquilt select " + profile + "` lists what it selects.",
        )
    old = _old_bases(root, store, q, lf, idx, patch, open_pin)
    guards = _original_guards(entry.guards, profile, selected)
    files, raws, work = _merge(root, store, patch, entry.strip, copy, old, theirs)
    image = {"ref": prof.lock.image.ref, "digest": prof.lock.image.digest}
    doc = {
        "version": VERSION,
        "patch": name,
        "profile": profile,
        "copy": copy,
        "strip": entry.strip,
        "series_sha": sha256_hex(q.series_bytes),
        "patch_sha": sha256_hex(patch.raw),
        "guards": list(guards),
        "image": image,
        "files": [f.to_json() for f in files],
        "raws": raws,
        "sides": {s.path: [s.base_sha256, s.patched_sha256, sha256_hex(theirs[s.path])] for s in patch.sections},
    }
    if any(f.state == CONFLICT for f in files):
        from ..work.files import WorkFiles

        wf = WorkFiles(root)
        for f in files:
            if f.state == CONFLICT and wf.read(check_member_path(f.path)).data is not None:
                raise UsageError(
                    f".imgquilt/work/{f.path} exists: the work tree holds a file where the port would put its "
                    "conflict; nothing was written.",
                    hint="Remove it (the quilt work tree has nothing applied), then port again.",
                )
        _save(root, doc)  # journal first: an abort after a crash removes the work files it lists
        for f in files:
            if f.state == CONFLICT:
                wf.write(check_member_path(f.path), work[f.path], None)
        return _ported(doc, "stopped", files)
    return _finish(root, doc, files, patch)


def _refuse_busy(root: Path) -> None:
    from .state import rebase_in_progress
    from ..work.tree import WorkTree

    if rebase_in_progress(root):
        raise UsageError(
            "A rebase is in progress in this queue.",
            hint="Finish it (`imgquilt rebase --continue`) or `imgquilt rebase --abort`, then port.",
        )
    if port_in_progress(root):
        raise UsageError(
            "A port is already in progress.", hint="Resolve and `imgquilt port --continue`, or `imgquilt port --abort`."
        )
    applied = WorkTree(root).applied()
    if applied:
        raise UsageError(
            f"{len(applied)} patch(es) are applied in the work tree ({', '.join(applied)}); a port writes series and patches/.",
            hint="`imgquilt refresh` what you want to keep, then `imgquilt pop -a`, and port again.",
        )


def _original_guards(guards: tuple[str, ...], profile: str, selected: bool) -> tuple[str, ...]:
    """PATCH's guards after the port: `-NAME` added when the profile selects it (its `+NAME` dropped)."""
    if not selected:
        return guards
    return tuple(g for g in guards if g != f"+{profile}") + (f"-{profile}",)


def _pin_source(lock: Lock, open_pin: PinOpener, who: str) -> Callable[[], Source]:
    def opened() -> Source:
        src = open_pin(lock)
        digest = src.info().digest
        if lock.image.kind != "rootfs" and digest != lock.image.digest:
            from ..errors import BaseDrift

            raise BaseDrift(
                f"{lock.image.ref} is no longer the image {who} pins ({lock.image.digest}); nothing was written.",
                hint=f"Re-pin it (`imgquilt lock{' --profile ' + who if who != 'the default pin' else ''}`) or rebase, then port.",
            )
        return src

    return opened


def _chain_at(
    root: Path,
    store: ObjectStore,
    q: Queue,
    pin: str | None,
    select: tuple[str, ...],
    lock: Lock,
    idx: int,
    patch: Patch,
    open_pin: PinOpener,
) -> dict[str, bytes | None]:
    """Each of `patch`'s files as the pin's own patches before position `idx` leave it on its image."""
    from ..work.bases import Bases

    who = f"profile {pin}" if pin else "the default pin"
    bases = Bases(
        root, store, _pin_source(lock, open_pin, pin or "the default pin"), image_explicit=False, pin=lambda: pin
    )
    paths = [s.path for s in patch.sections]
    links = [s.path for s in patch.sections if s.link]
    out: dict[str, bytes | None] = {p: held_or_none(t.data, p) for p, t in bases.targets(paths, links=links).items()}
    for e, p in zip(q.entries[:idx], q.patches[:idx]):
        if q.guarded and not pushable(e.guards, select)[0]:
            continue
        for s in p.sections:
            if s.path not in out:
                continue
            if sha256_hex(out[s.path]) != s.base_sha256:
                raise ProfileChainBroken(
                    f"{who}: {p.name}: {s.path} does not chain on its image (the file is at "
                    f"{sha256_hex(out[s.path])[:12]}…, the patch wants {s.base_sha256[:12]}…); nothing was written.",
                    hint="`imgquilt check` names every break; fix that first.",
                )
            try:
                out[s.path] = held_or_none(apply_section(out[s.path], s), s.path)
            except HunkError as exc:
                raise MalformedPatch(f"{p.name}: {s.path}: {exc}") from None
    return out


def _old_bases(
    root: Path, store: ObjectStore, q: Queue, lf: LockFile, idx: int, patch: Patch, open_pin: PinOpener
) -> dict[str, bytes | None]:
    """PATCH's own bases: from the object store, else from a pin that selects it."""
    out: dict[str, bytes | None] = {}
    for s in patch.sections:
        found, data = store.get_or_absent(s.base_sha256)
        if found:
            out[s.path] = held_or_none(data, s.path)
    if len(out) == len(patch.sections):
        return out
    entry = q.entries[idx]
    pins = ([(None, (), lf.default)] if lf.default is not None else []) + [
        (p.name, p.select, p.lock) for p in lf.profiles
    ]
    for pname, select, lock in pins:
        if lock is None or (q.guarded and not pushable(entry.guards, select)[0]):
            continue
        try:
            chain = _chain_at(root, store, q, pname, select, lock, idx, patch, open_pin)
        except ImgquiltError:
            continue
        for s in patch.sections:
            if s.path not in out and sha256_hex(chain[s.path]) == s.base_sha256:
                out[s.path] = chain[s.path]
        if len(out) == len(patch.sections):
            return out
    missing = [s.path for s in patch.sections if s.path not in out]
    raise BadInput(
        f"{patch.name}: the bytes of its base of {', '.join(missing)} are neither in .imgquilt/objects nor in the "
        "image of a pin that selects it; a 3-way merge needs them. Nothing was written.",
        hint="Pin the image the patch was made for (`imgquilt lock [--profile NAME] --image REF`), then port again.",
    )


def _merge(root: Path, store: ObjectStore, patch: Patch, strip: int, copy: str, old: dict, theirs: dict):
    """Each section carried or merged onto the profile's file: (files, {path: raw section sha}, {path: work bytes})."""
    files: list[PortedFile] = []
    raws: dict[str, str] = {}
    work: dict[str, bytes | None] = {}
    for s in patch.sections:
        ob, tb = old[s.path], theirs[s.path]
        t_sha = sha256_hex(tb)
        if t_sha == s.base_sha256:
            raws[s.path] = store.put(s.raw) or ""
            files.append(PortedFile(s.path, CARRIED, "the profile's file is the patch's base: the section as it is"))
            continue
        if t_sha == s.patched_sha256:
            files.append(PortedFile(s.path, UPSTREAM, "the profile's file already has the change: no section"))
            continue
        try:
            ours = None if s.is_delete else apply_section(ob, s)
        except HunkError as exc:
            raise MalformedPatch(f"{patch.name}: {s.path}: {exc}") from None
        for data in (ob, ours, tb):
            if data is not None:
                store.put(data)
        kept = rerere.find(root, s.base_sha256, s.patched_sha256, t_sha)
        if kept is not None:
            raws[s.path] = store.put(_section(s, tb, kept.result, strip, copy).raw) or ""
            files.append(
                PortedFile(s.path, REUSED, "resolved by a kept resolution (the same three sides were resolved before)")
            )
            continue
        whole = (
            ours is None
            or tb is None
            or s.binary is not None
            or s.link
            or any(is_binary(x) for x in (ob, ours, tb) if x is not None)
        )
        if whole:
            work[s.path] = tb
            what = (
                "the patch deletes the file, the profile's image changed it: delete the work-tree file to keep the deletion"
                if ours is None
                else "a whole-file change (binary, link or new file): the work-tree file is the profile's version, "
                "make it the patched one"
            )
            files.append(
                PortedFile(s.path, CONFLICT, what, f".imgquilt/work/{s.path}", "delete" if ours is None else "binary")
            )
            continue
        m = merge3(
            ob or b"",
            ours,
            tb,
            ours_label=f"{patch.name} (patch)",
            base_label="its base",
            theirs_label=f"{copy} (the profile's file)",
        )
        if not m.clean:
            work[s.path] = m.data
            files.append(
                PortedFile(
                    s.path,
                    CONFLICT,
                    f"{m.conflicts} conflict(s) marked in the file",
                    f".imgquilt/work/{s.path}",
                    "binary" if m.binary else "markers",
                )
            )
            continue
        errs = new_python_errors(tb, m.data, s.path) if s.path.endswith(".py") else []
        if errs:
            work[s.path] = m.data
            files.append(
                PortedFile(
                    s.path,
                    CONFLICT,
                    "merged without markers, but with new Python errors: " + "; ".join(located(m.data, s.path, errs)),
                    f".imgquilt/work/{s.path}",
                    "python",
                )
            )
            continue
        raws[s.path] = store.put(_section(s, tb, m.data, strip, copy).raw) or ""
        files.append(PortedFile(s.path, MERGED, "3-way merged onto the profile's file"))
    return files, raws, work


def _section(s: FileSection, base: bytes | None, result: bytes | None, strip: int, copy: str) -> FileSection:
    return rewritten(s.path, base, result, s, strip, copy)


# --- the end -----------------------------------------------------------------------------------
def _finish(root: Path, doc: dict, files: list[PortedFile], patch: Patch) -> Ported:
    """Write the copy, series (PATCH's guards, the copy after it) and the targets.lock that follows, as one transaction."""
    from ..queue.interrupted import Change
    from ..work.relock import commit
    from ..work.tree import WorkTree

    store = ObjectStore(root)
    raws = []
    for s in patch.sections:
        sha = doc["raws"].get(s.path)
        if sha is None:
            continue
        data = store.get(sha)
        if data is None:
            raise BadInput(
                f"The object store lost the ported section of {s.path}.", hint="`imgquilt port --abort` and port again."
            )
        raws.append(bytes(data))
    if not raws:
        raise UsageError(
            f"Profile {doc['profile']}'s image already has every change {doc['patch']} makes: there is nothing to port.",
            hint="Nothing was written."
            + (" `imgquilt port --abort` ends the stopped port." if port_in_progress(root) else ""),
        )
    copy = doc["copy"]
    header = patch.header.with_field("Ported-From", doc["patch"])
    raw = header.raw + b"".join(raws)
    made = parse_patch(raw, copy, strip=doc["strip"])
    wt = WorkTree(root)
    if port_in_progress(root):
        _save(
            root, {**doc, "finishing": True}
        )  # from here a --continue after a crash ends the port, once the copy is in series
    with wt.locked():
        series = wt.queue.series_bytes()
        if sha256_hex(series) != doc["series_sha"] or sha256_hex(wt.read_patch(doc["patch"]).raw) != doc["patch_sha"]:
            raise UsageError(
                f"series or {doc['patch']} changed since the port started; nothing was written.",
                hint="`imgquilt port --abort`, then port again.",
            )
        entry = next(e for e in wt.queue.entries() if e.name == doc["patch"])
        if tuple(doc["guards"]) != entry.guards:
            series = guarded(series, doc["patch"], doc["guards"])
        series = inserted(series, [SeriesEntry(copy, doc["strip"], 0, (f"+{doc['profile']}",))], doc["patch"])
        update = commit(
            wt, "port", [Change(f"patches/{copy}", raw), Change("series", series)], series=series, patches={copy: made}
        )
    _end(root, doc)
    return _ported(doc, "done", files, lock=update)


def _ported(
    doc: dict,
    status: str,
    files: list[PortedFile],
    *,
    lock: LockUpdate | None = None,
    kept: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
) -> Ported:
    reused = [f.path for f in files if f.state == REUSED]
    if reused:
        notes = (
            *notes,
            f"Reused the kept resolution of {', '.join(reused)} (the same three sides were resolved before, as git "
            "rerere); `imgquilt rebase --forget` drops kept resolutions.",
        )
    return Ported(
        status,
        doc["patch"],
        doc["profile"],
        doc["copy"],
        tuple(doc["guards"]),
        (f"+{doc['profile']}",),
        tuple(files),
        doc["image"],
        lock,
        kept,
        notes,
    )


# --- a stopped port ----------------------------------------------------------------------------
def _save(root: Path, doc: dict) -> None:
    doc = json.loads(json.dumps(doc))
    doc["seal"] = seal(doc)
    StateDir(root, STATE_DIR).write("state.json", (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


def _load(root: Path) -> dict:
    from ..work.patchtext import check_patch_name

    raw = _state_bytes(root)
    shown = f"{root}/.imgquilt/{STATE_DIR}/state.json"
    if raw is None:
        raise UsageError("No port in progress.", hint="Start one with `imgquilt port PATCH --profile NAME`.")
    try:
        doc = json.loads(raw)
        ok = isinstance(doc, dict) and doc.get("version") == VERSION and sealed_here(doc)
        if ok:
            for n in (doc["patch"], doc["copy"]):
                check_patch_name(n)
            for f in doc["files"]:
                check_member_path(f["path"], what="path in the port journal")
    except (ValueError, KeyError, TypeError, RecursionError, ImgquiltError):
        ok = False
    if not ok:
        raise ForeignState(
            f"{shown} is not a port journal sealed with your imgquilt journal key; imgquilt never acts on it.",
            hint="Remove .imgquilt/port (and the files it put in .imgquilt/work/); series and patches/ were not changed by a port.",
        )
    return doc


def _end(root: Path, doc: dict) -> None:
    """Take the conflict files out of the work tree, then the journal: renamed away first, so the port
    ends at one instant (as a rebase's state does), then removed."""
    from ..work.files import WorkFiles

    wf = WorkFiles(root)
    for f in doc["files"]:
        if f["state"] == CONFLICT:
            wf.write(check_member_path(f["path"]), None, None)
    if not StateDir(root, STATE_DIR).exists():
        return  # a port that never stopped kept no journal
    with StateDir(root).opened() as top:
        if top is not None:
            gone = f"{STATE_DIR}.done-{os.getpid()}"
            rename_at(top, STATE_DIR, gone)
            shutil.rmtree(gone, dir_fd=top, ignore_errors=True)


def _clear_leftovers(root: Path) -> None:
    """Before a start: what an ended port left (a directory renamed away, or one with no journal)."""
    with StateDir(root).opened() as top:
        if top is None:
            return
        for name in os.listdir(top):
            if name.startswith(f"{STATE_DIR}.done-") or (name == STATE_DIR and not port_in_progress(root)):
                shutil.rmtree(name, dir_fd=top, ignore_errors=True)


def port_continue(root: Path) -> Ported:
    """Take the resolved work-tree files of a stopped port, keep the resolutions, write the copy."""
    from ..work.files import WorkFiles

    doc = _load(root)
    store = ObjectStore(root)
    q = load_queue(root)
    if doc["copy"] in q.names and doc.get("finishing"):
        # the copy was written (one queue transaction) before a crash took the journal's end: end it now
        _end(root, doc)
        files = [PortedFile(f["path"], f["state"], f["detail"], f["work"], f["kind"]) for f in doc["files"]]
        return _ported(
            doc, "done", files, notes=("The port was interrupted after it wrote the copy; it is ended now.",)
        )
    if doc["patch"] not in q.names or sha256_hex(q.patch(doc["patch"]).raw) != doc["patch_sha"]:
        raise UsageError(
            f"{doc['patch']} changed since the port started.", hint="`imgquilt port --abort`, then port again."
        )
    patch = q.patch(doc["patch"])
    sections = {s.path: s for s in patch.sections}
    files: list[PortedFile] = []
    left: list[str] = []
    for f in doc["files"]:
        pf = PortedFile(f["path"], f["state"], f["detail"], f["work"], f["kind"])
        if pf.state != CONFLICT:
            files.append(pf)
            continue
        s = sections[pf.path]
        base, ours, theirs = doc["sides"][pf.path]
        tb = None if theirs == ABSENT else store.get(theirs)
        data = WorkFiles(root).read(check_member_path(pf.path)).data
        problem = _unresolved(store, pf, data, (base, ours, theirs), tb)
        if problem:
            left.append(f"{pf.work}: {problem}")
            continue
        doc["raws"][pf.path] = store.put(_section(s, tb, data, doc["strip"], doc["copy"]).raw) or ""
        rerere.keep(root, base, ours, theirs, pf.path, data)  # kept before anything else can fail
        files.append(PortedFile(pf.path, RESOLVED, "resolved by hand"))
    if left:
        raise RebaseConflict(
            f"The port of {doc['patch']} is still conflicted:\n" + "\n".join(f"  - {x}" for x in left),
            hint="Edit the file(s), then `imgquilt port --continue`; or `imgquilt port --abort`.",
        )
    _save(root, doc)
    return _finish(root, doc, files, patch)


def _unresolved(
    store: ObjectStore, pf: PortedFile, data: bytes | None, sides: tuple[str, str, str], tb: bytes | None
) -> str:
    """Why the work-tree file is not a resolution yet ("" when it is)."""
    if pf.kind == "markers" and data is not None:
        known = [store.get(x) or b"" for x in sides if x != ABSENT]
        left = leftover_markers(data, *known)
        if left:
            return f"conflict markers remain at line(s) {', '.join(map(str, left[:10]))}"
    if data is not None and pf.path.endswith(".py"):
        errs = new_python_errors(tb, data, pf.path)
        if errs:
            return "new Python errors: " + "; ".join(located(data, pf.path, errs))
    return ""


def port_abort(root: Path) -> Ported:
    """Drop a stopped port (series, patches/ and targets.lock were never changed); each conflict the
    user had already resolved in the work tree is kept for the next port or rebase."""
    from ..work.files import WorkFiles

    doc = _load(root)
    store = ObjectStore(root)
    if doc.get("finishing") and doc["copy"] in load_queue(root).names:
        _end(root, doc)
        files = [PortedFile(f["path"], f["state"], f["detail"], f["work"], f["kind"]) for f in doc["files"]]
        return _ported(
            doc,
            "done",
            files,
            notes=(
                f"The port was interrupted after it wrote {doc['copy']}: there was nothing "
                f"left to abort. `imgquilt delete -r {doc['copy']}` (and series from git) undo it.",
            ),
        )
    kept: list[str] = []
    for f in doc["files"]:
        if f["state"] != CONFLICT:
            continue
        pf = PortedFile(f["path"], f["state"], f["detail"], f["work"], f["kind"])
        base, ours, theirs = doc["sides"][pf.path]
        tb = None if theirs == ABSENT else store.get(theirs)
        data = WorkFiles(root).read(check_member_path(pf.path)).data
        untouched = pf.kind in ("binary", "delete") and sha256_hex(data) == theirs
        if not untouched and not _unresolved(store, pf, data, (base, ours, theirs), tb):
            if rerere.keep(root, base, ours, theirs, pf.path, data):
                kept.append(pf.path)
    _end(root, doc)
    files = [PortedFile(f["path"], f["state"], f["detail"], f["work"], f["kind"]) for f in doc["files"]]
    notes = (
        (
            f"Kept the resolution of {', '.join(kept)} for the next port or rebase that meets the same three sides; "
            "`imgquilt rebase --forget` drops kept resolutions.",
        )
        if kept
        else ()
    )
    return _ported(doc, "aborted", files, kept=tuple(kept), notes=notes)
