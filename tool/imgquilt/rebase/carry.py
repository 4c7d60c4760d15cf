"""Carry one patch onto the new image, section by section.

A new base equal to the old one carries the section unchanged; otherwise git merges (base = old
base, ours = old result, theirs = new base) and a clean merge rewrites the section against the
new base. A chain on one file rebases each patch against the previous patch's new result.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..fs.content import held, held_or_none
from ..engine.apply import HunkError, apply_section
from ..engine.merge import merge3
from ..pycheck.names import located, new_python_errors
from ..pycheck.regions import regions_of, upstream_changes
from ..errors import BadInput, MalformedPatch
from ..queue.binarypatch import is_binary
from ..queue.hunks import ABSENT, sha256_hex
from ..queue.patchfile import PYTHON_CHECK_FIELD, PYTHON_CHECK_SKIPPED, FileSection, Header, Patch, parse_patch, rehash_command
from ..store import ObjectStore
from .report import CONFLICT, MERGED, MOVED, UNCHANGED, UPSTREAM, FileOutcome, PatchOutcome, patch_state
from .sections import original_section, retarget, rewritten
from .state import CarriedSection, RebaseState
from .work_files import put_work


def stored_bytes(store: ObjectStore, sha: str, path: str, patch: str) -> bytes | None:
    found, data = store.get_or_absent(sha)
    if not found:
        raise BadInput(
            f"{patch}: {path}: the object store lost the bytes of {sha}.",
            hint="`imgquilt rebase --abort`, then start again with --from OLDREF.",
        )
    return data


def _keep_result(store: ObjectStore, s: FileSection, base_sha: str) -> None:
    """A section carried as it is: its result goes to the store too (when its base is there), so the
    checks after the step, and the next patch of the chain, have the bytes."""
    if s.patched_sha256 == ABSENT or store.has(s.patched_sha256):
        return
    found, base = store.get_or_absent(base_sha)
    if not found:
        return
    try:
        store.put(apply_section(base, s))
    except HunkError:
        return  # the final verification names it


def _labels(patch: str, st: RebaseState) -> dict[str, str]:
    return {"ours_label": f"{patch} (old image + patch)", "base_label": "old image", "theirs_label": f"{st.new_ref} (new image)"}


def rebase_section(root: Path, st: RebaseState, store: ObjectStore, patch: Patch, s: FileSection, strip: int) -> CarriedSection:
    """Carry or merge one section; a conflict puts the file in the work tree."""
    new_path = st.paths[s.path]
    moved_from = s.path if new_path != s.path else None
    old_base = st.old_chain[s.path]
    if old_base != s.base_sha256:
        raise BadInput(
            f"{patch.name}: {s.path}: Base-SHA256 {s.base_sha256} does not continue the chain (the file is at {old_base}).",
            hint="Run `imgquilt check`; rebase needs a sound queue.",
        )
    new_base = st.new_chain[s.path]
    base = FileOutcome(new_path, UNCHANGED, old_base, s.patched_sha256, new_base, moved_from=moved_from)
    if new_base == old_base:
        raw = s.raw if moved_from is None else retarget(s, new_path, patch.name)
        oc = replace(base, state=MOVED if moved_from else UNCHANGED, new_patched=s.patched_sha256)
        _keep_result(store, s, new_base)
        return CarriedSection(oc, s.path, store.put(raw), mode=s.mode)
    ob = stored_bytes(store, old_base, s.path, patch.name)
    try:
        applied = apply_section(ob, s)
    except HunkError as exc:
        raise MalformedPatch(f"{patch.name}: {s.path}: {exc}",
                             hint=f"Fix the hunk by hand to fit its base, then {rehash_command([patch.name])}.") from None
    ours = None if s.is_delete else applied
    if sha256_hex(ours) != s.patched_sha256:
        raise MalformedPatch(f"{patch.name}: {s.path}: the patch does not produce its Patched-SHA256 {s.patched_sha256}.",
                             hint=f"Edited by hand? {rehash_command([patch.name])} re-pins it (and re-chains the patches after it).")
    if ours is not None:
        store.put(ours)
    nb = stored_bytes(store, new_base, new_path, patch.name)
    if not (s.binary is not None or is_binary(ob) or is_binary(nb)):
        # what upstream changed in the functions, classes or lines the patch edits
        base = replace(base, upstream=tuple(upstream_changes(s.path, regions_of(s, ob), ob, nb, new_path=new_path)))
    if ours is None:
        if nb is None:
            return CarriedSection(replace(base, state=UPSTREAM, new_patched=ABSENT), s.path, mode=s.mode)
        work = put_work(root, st, new_path, nb)
        detail = "the patch deletes the file, the new image changed it: delete the work-tree file to keep the deletion, or leave the version to keep"
        return CarriedSection(replace(base, state=CONFLICT, conflict="delete", work=work, detail=detail), s.path, mode=s.mode,
                              ours_sha=None, theirs_sha=store.put(nb))
    if s.binary is not None or s.link or is_binary(ob) or is_binary(ours) or is_binary(nb):
        # a binary file (a symlink's target) is a whole: upstream either made exactly our result, or it is a conflict
        if new_base == s.patched_sha256:
            return CarriedSection(replace(base, state=UPSTREAM, new_patched=new_base), s.path, mode=s.mode)
        work = put_work(root, st, new_path, nb or b"")
        detail = ("symlink retargeted upstream: the work-tree file holds the new image's target (no newline); make it the "
                  "target you want" if s.link else
                  "binary file changed upstream: no markers; the work-tree file is the new image's version, make it the patched one")
        return CarriedSection(replace(base, state=CONFLICT, conflict="binary", work=work, detail=detail), s.path, mode=s.mode,
                              ours_sha=store.put(ours), theirs_sha=store.put(nb or b""))
    # a text merge works on whole files: a large one is held here, within IMGQUILT_IN_MEMORY_MAX
    ob, ours, nb = held_or_none(ob, s.path), held(ours, s.path), held_or_none(nb, new_path)
    m = merge3(ob or b"", ours, nb or b"", **_labels(patch.name, st), style=st.conflict_style)
    if m.clean:
        if m.data == (nb or b"") and (nb is not None or not m.data):
            return CarriedSection(replace(base, state=UPSTREAM, merged=True, new_patched=new_base), s.path, mode=s.mode)
        errs = new_python_errors(nb, m.data, new_path) if new_path.endswith(".py") else []
        if errs:
            work = put_work(root, st, new_path, m.data)
            detail = "merged without conflict markers, but the result has new Python errors: " + "; ".join(located(m.data, new_path, errs))
            return CarriedSection(replace(base, state=CONFLICT, conflict="python", work=work, detail=detail), s.path, mode=s.mode,
                                  ours_sha=store.put(ours), theirs_sha=store.put(nb or b""))
        sec = rewritten(new_path, nb, m.data, s, strip, patch.name)
        oc = replace(base, state=MOVED if moved_from else MERGED, merged=True, new_patched=sec.patched_sha256)
        store.put(m.data)
        return CarriedSection(oc, s.path, store.put(sec.raw), mode=s.mode)
    work = put_work(root, st, new_path, m.data)
    if m.binary:
        detail = "binary file: no markers; the work-tree file is the new image's version, make it the patched one"
        kind = "binary"
    else:
        detail = f"{m.conflicts} conflict(s) marked in the file"
        kind = "markers"
    return CarriedSection(replace(base, state=CONFLICT, conflict=kind, work=work, detail=detail), s.path, mode=s.mode,
                          ours_sha=store.put(ours), theirs_sha=store.put(nb or b""))


def _python_mark(header: Header, st: RebaseState, outcomes: list[FileOutcome]) -> Header:
    """`Python-Check: skipped` on a patch carried with a .py section while the Python checks are off
    (--no-python-check): merged or not, nothing checked it against the new image's modules. With them
    on, the rebase checks every step and its finish verifies the whole series: an earlier mark goes."""
    if st.python_check:
        return header.with_field(PYTHON_CHECK_FIELD, None) if header.python_unchecked else header
    carried_py = any(o.state != UPSTREAM and o.path.endswith(".py") for o in outcomes)
    return header.with_field(PYTHON_CHECK_FIELD, PYTHON_CHECK_SKIPPED) if carried_py and not header.python_unchecked else header


def finish_patch(st: RebaseState, store: ObjectStore, patch: Patch, sections: list[CarriedSection], strip: int) -> None:
    """Assemble the rebased patch, advance both chains and journal the patch as done."""
    dropped_names = {d["name"] for d in st.done if d["dropped"]}
    header = patch.header
    notes: list[str] = []
    reqs = header.requires
    if any(r in dropped_names for r in reqs):
        kept = [r for r in reqs if r not in dropped_names]
        header = header.with_field("Requires", ", ".join(kept) if kept else None)
        notes.append("Requires no longer names " + ", ".join(r for r in reqs if r in dropped_names) + " (dropped from series).")
    outcomes = [s.outcome for s in sections]
    state = patch_state(outcomes)
    raws: list[bytes] = []
    for s in sections:
        if s.outcome.state == UPSTREAM:
            if st.keep_empty:
                nb = stored_bytes(store, s.outcome.new_base, s.outcome.path, patch.name)
                like = original_section(patch, s.old_path)
                raws.append(rewritten(s.outcome.path, nb, nb, like, strip, patch.name).raw)
            continue
        data = store.get(s.raw_sha or "")
        if data is None:
            raise BadInput(f"{patch.name}: the object store lost a rebased section of {s.outcome.path}.",
                           hint="`imgquilt rebase --abort` and start again.")
        raws.append(data)
    dropped = not raws
    raw_sha = None
    if dropped:
        notes.append(f"Its change is already in {st.new_ref}: dropped from series (--keep-empty keeps it).")
    else:
        header = _python_mark(header, st, outcomes)
        if state == UPSTREAM and header.get("Applied-Upstream") is None:
            header = header.with_field("Applied-Upstream", st.new_ref)
            notes.append("Kept with no-op sections (--keep-empty); Applied-Upstream names the new image.")
        raw = header.raw + b"".join(raws)
        parse_patch(raw, patch.name)  # a rebased patch must read back
        raw_sha = store.put(raw)
    for s in sections:
        st.old_chain[s.old_path] = s.outcome.old_patched
        st.new_chain[s.old_path] = s.outcome.new_patched or ABSENT
    st.done.append({**PatchOutcome(patch.name, state, tuple(outcomes), dropped, tuple(notes)).to_json(), "raw_sha": raw_sha})
    st.next += 1
    st.current = None
