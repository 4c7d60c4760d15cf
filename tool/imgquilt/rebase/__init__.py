"""Carry a queue onto a new image with 3-way merges; stop on conflicts; `--continue` / `--abort`.

    options     RebaseOptions, --map parsing, the image opener type
    moves       where each target is in the new image (--map, files found moved)
    carry       one patch onto the new image: carry or 3-way merge each section
    sections    rewriting a section's bytes (renamed path, new base)
    resolve     --continue: the user's resolutions from the work tree
    work_files  conflicted files in .imgquilt/work/ (and what was there before)
    state       the journal (state.json) and the state directory
    backup      the copy of the queue taken at the start; --abort puts it back
    finish      verify the rebased queue on the new image, write it, end the rebase
    loop        start / continue / skip / abort
    report      per-file and per-patch outcomes, the report and its JSON
    rerere      kept resolutions, keyed by the three sides of a merge (as `git rerere`)
    kept        the rebase's side of them: reuse, keep at --continue, keep at --abort
    port        `port PATCH --profile NAME`: a guarded copy by a 3-way merge onto a profile's image
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> the module that holds it, loaded on first use (PEP 562): a command that only asks whether a
# rebase is stopped (rebase.state) loads none of the rebase machinery
_WHERE = {
    **dict.fromkeys(["abort_rebase", "continue_rebase", "skip_rebase", "start_rebase"], ".loop"),
    **dict.fromkeys(["find_moved", "image_listing"], ".moves"),
    **dict.fromkeys(["Opener", "RebaseOptions", "parse_map"], ".options"),
    **dict.fromkeys(["CONFLICT", "MERGED", "MOVED", "STATES", "UNCHANGED", "UPSTREAM", "FileOutcome", "PatchOutcome",
                     "RebaseReport", "patch_state"], ".report"),
    **dict.fromkeys(["REBASE_DIR", "STATE_VERSION", "rebase_in_progress"], ".state"),
    "WORK_DIR": "..work",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "CONFLICT", "MERGED", "MOVED", "REBASE_DIR", "STATES", "STATE_VERSION", "UNCHANGED", "UPSTREAM", "WORK_DIR",
    "FileOutcome", "Opener", "PatchOutcome", "RebaseOptions", "RebaseReport",
    "abort_rebase", "continue_rebase", "find_moved", "image_listing", "parse_map", "patch_state", "rebase_in_progress", "skip_rebase", "start_rebase",
]
