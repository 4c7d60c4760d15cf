"""On --continue: take the user's resolutions of a stopped patch from the work tree."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..engine.merge import leftover_markers
from ..pycheck.names import located, new_python_errors
from ..errors import RebaseConflict
from ..queue.hunks import sha256_hex
from ..queue.patchfile import Patch
from ..store import ObjectStore
from .carry import stored_bytes
from .report import CONFLICT, MERGED, MOVED, UPSTREAM
from .sections import original_section, rewritten
from .state import CarriedSection
from .work_files import work_read

REUSED = "resolved by a kept resolution (the same three sides were resolved before)"


def take_resolutions(root: Path, store: ObjectStore, patch: Patch, sections: list[CarriedSection], strip: int,
                     reused: frozenset[str] = frozenset(), *, python_check: bool = True) -> list[CarriedSection]:
    """The sections with every conflict resolved from its work-tree file; RebaseConflict while any is not.
    `reused`: the paths whose work-tree file a kept resolution filled (rebase.rerere), said so.
    `python_check=False` (--continue --no-python-check): a resolved .py file is taken as it is, its new
    syntax or name errors too (the patch is then marked `Python-Check: skipped`)."""
    unresolved: list[str] = []
    resolved: list[CarriedSection] = []
    for s in sections:
        if s.outcome.state != CONFLICT:
            resolved.append(s)
            continue
        oc = s.outcome
        data = work_read(root, oc.path)
        if oc.conflict == "markers" and data is not None:
            sides = [store.get(x) or b"" for x in (s.ours_sha, s.theirs_sha, oc.old_base) if x]
            left = leftover_markers(data, *sides)
            if left:
                unresolved.append(f"{oc.work}: conflict markers remain at line(s) {', '.join(map(str, left[:10]))}")
                continue
        nb = stored_bytes(store, oc.new_base, oc.path, patch.name)
        errs = new_python_errors(nb, data, oc.path) if python_check and data is not None and oc.path.endswith(".py") else []
        if errs:
            unresolved.append(f"{oc.work}: new Python errors: {'; '.join(located(data, oc.path, errs))}")
            continue
        again = oc.path in reused
        if sha256_hex(data) == oc.new_base:
            resolved.append(replace(s, outcome=replace(oc, state=UPSTREAM, by_hand=True, new_patched=oc.new_base, work=None,
                                                       reused=again, detail=REUSED if again else oc.detail)))
            continue
        sec = rewritten(oc.path, nb, data, original_section(patch, s.old_path), strip, patch.name)
        if data is not None:
            store.put(data)
        state = MOVED if oc.moved_from else MERGED
        new = replace(oc, state=state, merged=True, by_hand=True, new_patched=sec.patched_sha256, work=None,
                      detail=REUSED if again else "resolved by hand", reused=again)
        resolved.append(replace(s, outcome=new, raw_sha=store.put(sec.raw)))
    if unresolved:
        raise RebaseConflict(
            f"{patch.name} is still conflicted:\n" + "\n".join(f"  - {u}" for u in unresolved),
            hint="Edit the file(s), then `imgquilt rebase --continue`; or `imgquilt rebase --abort`.",
        )
    return resolved
