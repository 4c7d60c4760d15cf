"""Where each target of the queue is in the new image: --map prefixes and files found moved."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ..errors import BadInput, BaseDrift, MissingTarget, UsageError
from ..fs.types import Source, read_targets
from ..queue.hunks import ABSENT
from ..queue.patchfile import FileSection
from ..queue.queue import Queue

_SKIP_TOP = {"proc", "sys", "dev"}


def _walk_rootfs(top: Path) -> tuple[list[str], set[str]]:
    """Every non-directory path below `top` and every directory, not following symlinks."""
    files: list[str] = []
    dirs: set[str] = set()
    stack = [("", top)]
    while stack:
        rel, path = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for e in entries:
            child = f"{rel}/{e.name}" if rel else e.name
            if not rel and e.name in _SKIP_TOP:
                continue
            if e.is_dir(follow_symlinks=False):
                dirs.add(child)
                stack.append((child, Path(e.path)))
            elif e.is_file(follow_symlinks=False) or e.is_symlink():
                files.append(child)
    return files, dirs


def image_listing(source: Source) -> tuple[list[str], set[str]] | None:
    """(file paths, directory paths) of a source, or None when it cannot list itself.

    Images offer `list_paths()` (every non-directory path of the merged filesystem); a rootfs
    is walked here.
    """
    lister = getattr(source, "list_paths", None)
    if callable(lister):
        files = [p.strip("/") for p in lister() if p.strip("/")]
        dirs = {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
        return files, dirs
    root = getattr(source, "root", None)
    if isinstance(root, Path) and root.is_dir():
        return _walk_rootfs(root)
    return None


def _tail(a: str, b: str) -> int:
    """How many trailing path components `a` and `b` share."""
    pa, pb = a.split("/"), b.split("/")
    n = 0
    while n < min(len(pa), len(pb)) and pa[-1 - n] == pb[-1 - n]:
        n += 1
    return n


def find_moved(missing: Sequence[str], files: Sequence[str], taken: set[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Match each missing path to the file with the same basename and longest common path tail.

    A match needs a unique best candidate that shares at least two components (or is the only
    file with that name). Returns (moves, ambiguous: path -> tied candidates).
    """
    by_name: dict[str, list[str]] = {}
    wanted = {p.rsplit("/", 1)[-1] for p in missing}
    for f in files:
        name = f.rsplit("/", 1)[-1]
        if name in wanted and f not in taken:
            by_name.setdefault(name, []).append(f)
    moves: dict[str, str] = {}
    ambiguous: dict[str, list[str]] = {}
    for p in missing:
        cands = by_name.get(p.rsplit("/", 1)[-1], [])
        if not cands:
            continue
        scored = sorted(((_tail(p, c), c) for c in cands), reverse=True)
        best = scored[0][0]
        tied = sorted(c for s, c in scored if s == best)
        if len(tied) > 1:
            ambiguous[p] = tied
        elif best >= 2 or len(cands) == 1:
            moves[p] = tied[0]
    return moves, ambiguous


def _prefix_of_move(old: str, new: str) -> tuple[str, str] | None:
    n = _tail(old, new)
    po, pn = old.split("/")[:-n], new.split("/")[:-n]
    return ("/".join(po), "/".join(pn)) if po and pn else None


def _map_path(path: str, maps: Sequence[tuple[str, str]]) -> str | None:
    """Apply the longest matching `OLD=NEW` prefix (whole components) to `path`."""
    best: tuple[str, str] | None = None
    for old, new in maps:
        if (path == old or path.startswith(old + "/")) and (best is None or len(old) > len(best[0])):
            best = (old, new)
    if best is None:
        return None
    return best[1] + path[len(best[0]):]


def _first_sections(q: Queue) -> dict[str, FileSection]:
    """Per target path, the first section of the series that names it."""
    firsts: dict[str, FileSection] = {}
    for p in q.patches:
        for s in p.sections:
            firsts.setdefault(s.path, s)
    return firsts


def plan_paths(q: Queue, source: Source, maps: Sequence[tuple[str, str]]) -> tuple[dict[str, str], dict[str, bytes | None], list[str]]:
    """Where each target is in the new image and its bytes there; notes on what moved."""
    sections = _first_sections(q)
    firsts = {path: s.base_sha256 for path, s in sections.items()}
    for old, _ in maps:
        if not any(p == old or p.startswith(old + "/") for p in firsts):
            raise UsageError(f"--map {old}=…: no target of the queue is at or below {old!r}.")
    paths = {p: _map_path(p, maps) or p for p in firsts}
    links = q.link_paths()
    targets = read_targets(source, sorted(set(paths.values())), {paths[p] for p in links})
    data = {old: targets[new].data for old, new in paths.items()}
    kinds = [old for old, new in paths.items() if targets[new].data is not None and targets[new].link != (old in links)]
    if kinds:
        raise BaseDrift(
            "The new image holds another kind of file than the queue changes at " + ", ".join(
                f"{paths[p]} ({'a symlink' if targets[paths[p]].link else 'a regular file'})" for p in sorted(kinds)) + ".",
            hint="Carry those patches by hand (drop them with `imgquilt delete`, rebase, and re-create the change), or map "
                 "the path elsewhere with --map OLD=NEW.",
        )
    notes: list[str] = []
    # a missing file the queue changes (not one it creates) may have moved
    missing = [p for p, base in firsts.items() if data[p] is None and base != ABSENT and paths[p] == p]
    moves: dict[str, str] = {}
    dirs: set[str] | None = None
    listing = None
    if missing:
        listing = image_listing(source)
        if listing is not None:
            files, dirs = listing
            moves, ambiguous = find_moved(missing, files, set(paths.values()))
            for p, cands in sorted(ambiguous.items()):
                raise BadInput(
                    f"{p} is not in the new image, and {len(cands)} files could be it: {', '.join(cands)}.",
                    hint=f"Say which with --map {p}=NEW_PATH (or map a directory prefix).",
                )
    # new files go where their moved neighbours went
    prefixes = {pp for pp in (_prefix_of_move(o, n) for o, n in moves.items()) if pp}
    if prefixes and dirs is not None:
        for p, base in firsts.items():
            if base == ABSENT and paths[p] == p:
                mapped = _map_path(p, sorted(prefixes))
                parent = p.rsplit("/", 1)[0] if "/" in p else ""
                if mapped and parent not in dirs:
                    moves[p] = mapped
    if moves:
        moved_targets = read_targets(source, sorted(set(moves.values())), {moves[p] for p in links if p in moves})
        for old, new in moves.items():
            paths[old] = new
            data[old] = moved_targets[new].data
            notes.append(f"{old} moved to {new} in the new image.")
    seen: dict[str, str] = {}
    for old, new in sorted(paths.items()):
        if new in seen:
            raise BadInput(f"{seen[new]} and {old} would both become {new}.", hint="Give --map to say where each goes.")
        seen[new] = old
    gone = [p for p, base in firsts.items() if data[p] is None and base != ABSENT and not sections[p].is_delete]
    if gone:
        searched = "not found elsewhere with the same path tail" if listing is not None else "this image cannot be searched for moved files"
        raise MissingTarget(
            f"Not in the new image ({searched}): " + ", ".join(paths[p] for p in sorted(gone)) + ".",
            hint="Tell imgquilt where they went with --map OLD=NEW (a path or a directory prefix), or remove the patch first.",
        )
    return paths, data, notes
