"""The rebase's side of kept resolutions (rebase.rerere): take one when a conflict meets the same
three sides again, keep each one the user makes, and keep what a stopped rebase had resolved when
it is abandoned.

The three sides of a section's merge are its old base, its old result (the patch applied on the old
base: "ours") and the new base ("theirs"): FileOutcome's old_base, old_patched and new_base.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..engine.merge import leftover_markers
from ..errors import ImgquiltError
from ..fs.paths import check_member_path
from ..pycheck.names import new_python_errors
from ..queue.hunks import ABSENT, sha256_hex
from ..store import ObjectStore
from ..work.files import WorkFiles
from . import rerere
from .report import CONFLICT
from .state import CarriedSection, RebaseState
from .work_files import work_read

FORGET = "`imgquilt rebase --forget` drops kept resolutions"


def sides(cs: CarriedSection) -> tuple[str, str, str]:
    oc = cs.outcome
    return oc.old_base, oc.old_patched, oc.new_base


def reuse_kept(root: Path, st: RebaseState, sections: Sequence[CarriedSection]) -> bool:
    """Put the kept resolution of each conflicted section in its work-tree file; True when every
    conflict of the patch had one (the rebase then takes them as if the user had just resolved them).
    The paths filled go into the journal's `current["reused"]` and a note says which they are."""
    assert st.current is not None
    filled: list[str] = []
    conflicts = [cs for cs in sections if cs.outcome.state == CONFLICT]
    for cs in conflicts:
        found = rerere.find(root, *sides(cs))
        if found is None:
            continue
        WorkFiles(root).write(check_member_path(cs.outcome.path), found.result, None)
        filled.append(cs.outcome.path)
    if not filled:
        return False
    st.current["reused"] = filled
    name = st.current["name"]
    left = len(conflicts) - len(filled)
    st.notes.append(
        f"{name}: reused the kept resolution of {', '.join(filled)} (the same three sides were resolved "
        f"before, as git rerere)" + (f"; {left} other conflict(s) to resolve" if left else "") + f"; {FORGET}."
    )
    return not left


def keep_taken(
    root: Path, store: ObjectStore, before: Sequence[CarriedSection], after: Sequence[CarriedSection]
) -> None:
    """Keep every resolution `--continue` just took (the ones not already kept)."""
    for b, a in zip(before, after):
        if b.outcome.state != CONFLICT or a.outcome.reused:
            continue
        sha = a.outcome.new_patched or ABSENT
        data = None if sha == ABSENT else store.get(sha)
        if sha != ABSENT and data is None:
            continue
        rerere.keep(root, *sides(b), b.outcome.path, None if data is None else bytes(data))


def keep_abandoned(root: Path, st: RebaseState, store: ObjectStore) -> list[str]:
    """At `--abort` of a rebase stopped on a conflict: keep each work-tree file the user has already
    resolved (no marker left, not the file as the rebase wrote it, no new Python error); the paths kept."""
    if st.phase != "conflict" or st.current is None:
        return []
    kept: list[str] = []
    for d in st.current["sections"]:
        cs = CarriedSection.from_json(d)
        oc = cs.outcome
        if oc.state != CONFLICT or oc.path not in st.work_written:
            continue
        if resolved_in_work(root, store, cs):
            data = work_read(root, oc.path)
            if rerere.keep(root, *sides(cs), oc.path, data):
                kept.append(oc.path)
    return kept


def resolved_in_work(root: Path, store: ObjectStore, cs: CarriedSection) -> bool:
    """Whether the work-tree file of a conflicted section reads as a resolution: for markers, none is
    left; for a whole-file conflict (binary, delete), it is no longer the new image's version the
    rebase put there; a Python file has no new error against the new base."""
    oc = cs.outcome
    try:
        data = work_read(root, oc.path)
    except (ImgquiltError, OSError):  # a file that cannot be read is no resolution
        return False
    theirs = store.get(oc.new_base) if oc.new_base != ABSENT else None
    if oc.conflict == "markers":
        if data is None:
            return True
        sides_ = [store.get(x) or b"" for x in (cs.ours_sha, cs.theirs_sha, oc.old_base) if x]
        if leftover_markers(data, *sides_):
            return False
    elif oc.conflict in ("binary", "delete"):
        if sha256_hex(data) == (cs.theirs_sha or oc.new_base):
            return False
    elif oc.conflict == "python" and cs.ours_sha and sha256_hex(data) == cs.ours_sha:
        return False
    if data is not None and oc.path.endswith(".py"):
        return not new_python_errors(theirs, data, oc.path)
    return True
