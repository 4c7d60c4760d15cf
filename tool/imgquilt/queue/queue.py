"""The queue directory: `series`, `patches/`, `targets.lock` and local state in `.imgquilt/`."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..fs.content import Data, chunks_of
from ..util.regular import read_regular_file
from ..errors import MalformedPatch
from .lock import Lock, read_lock
from .patchfile import Patch, parse_patch_source, read_patch_source
from .series import SeriesEntry, has_guards, parse_series, selected_entries, selection_text


def series_sha256(series_bytes: bytes, patch_bytes: Sequence[Data]) -> str:
    """sha256 over the series file followed by every patch file, in series order."""
    h = hashlib.sha256(series_bytes)
    for b in patch_bytes:
        for chunk in chunks_of(b):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Queue:
    """A loaded queue: its series and every listed patch, parsed."""

    root: Path
    series_bytes: bytes
    entries: tuple[SeriesEntry, ...]
    patches: tuple[Patch, ...]  # in series order

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @property
    def lock_path(self) -> Path:
        return self.root / "targets.lock"

    @property
    def state_dir(self) -> Path:
        return self.root / ".imgquilt"

    @cached_property
    def series_sha256(self) -> str:
        return series_sha256(self.series_bytes, [p.raw for p in self.patches])

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def lock(self) -> Lock | None:
        return read_lock(self.lock_path)

    @property
    def guarded(self) -> bool:
        """Does series set a guard on some patch?"""
        return has_guards(self.entries)

    def selection(self, guards: Iterable[str] = ()) -> Queue:
        """The queue that selecting `guards` applies (MQ's pushable, queue.series), as every verb
        takes a queue. A series without guards is its own selection, byte for byte. With guards, the
        selection's `series_bytes` are its selection_text, so its series_sha256 covers the selected
        patches only (docs/targets-lock.md)."""
        if not self.guarded:
            return self
        keep = selected_entries(self.entries, guards)
        names = {e.name for e in keep}
        return Queue(self.root, selection_text(keep), tuple(keep), tuple(p for p in self.patches if p.name in names))

    def patch(self, name: str) -> Patch:
        for p in self.patches:
            if p.name == name:
                return p
        raise KeyError(name)

    def first_bases(self) -> dict[str, str]:
        """Per named path, the base hash the series starts from."""
        out: dict[str, str] = {}
        for p in self.patches:
            for s in p.sections:
                out.setdefault(s.path, s.base_sha256)
        return out

    def final_hashes(self) -> dict[str, str]:
        """Per named path, the hash the whole series ends at (from the headers alone)."""
        return {s.path: s.patched_sha256 for p in self.patches for s in p.sections}

    def link_paths(self) -> set[str]:
        """The paths a symlink section names: read as the link itself (never followed) for the whole series."""
        return {s.path for p in self.patches for s in p.sections if s.link}

    @cached_property
    def patches_naming(self) -> dict[str, tuple[str, ...]]:
        """Per named path, the names of the patches that name it, in series order (each once): one
        pass over the sections, where asking each patch for each path costs patches x paths."""
        out: dict[str, dict[str, None]] = {}
        for p in self.patches:
            for s in p.sections:
                out.setdefault(s.path, {})[p.name] = None
        return {path: tuple(names) for path, names in out.items()}

    def target_paths(self) -> list[str]:
        """Every path the series names, in first-use order."""
        seen: dict[str, None] = {}
        for p in self.patches:
            for s in p.sections:
                seen.setdefault(s.path)
        return list(seen)


ParseMany = Callable[[list[tuple[str, "int | None", bytes]]], list[Patch]]
"""Parses (name, strip, bytes) of every patch, in order, as parse_patch would, the first error raised:
what a caller gives load_queue to take the parses from a cache (verbs.refs)."""


def load_queue(root: Path, *, parse_many: ParseMany | None = None) -> Queue:
    """Read series and every patch it lists (strictly: a missing or malformed patch is an error),
    after cleaning up what an interrupted command left (an import or a rehash is undone or finished, dead temps go).
    `parse_many`: parses the patches when each was read in memory (none streamed); the errors come in
    the same order either way (a missing file after the patches before it are parsed)."""
    from ..fs.content import set_spool_home
    from ..util.statedir import StateDir
    from .interrupted import recover

    recover(root)
    # large contents spool beside the object store (linked into it, not copied), once the queue has its
    # state directory (reading a queue that has none creates nothing)
    if (root / ".imgquilt").is_dir():
        spool = StateDir(root, "tmp")
        set_spool_home(spool.path, spool.ensure)
    else:
        set_spool_home(None)
    series_file = root / "series"
    series_bytes = read_regular_file(series_file) or b""
    entries = parse_series(series_bytes, source=str(series_file))
    sources = []
    missing = None
    for e in entries:
        f = root / "patches" / e.name
        source = read_patch_source(f)
        if source is None:
            missing = MalformedPatch(
                f"series line {e.line} lists {e.name!r}, but {f} does not exist.",
                hint="Restore the patch file or remove it from series (`imgquilt check` lists every problem).",
            )
            break
        sources.append(source)
    read = entries[: len(sources)]
    if parse_many is not None and all(isinstance(s, bytes) for s in sources):
        patches = parse_many([(e.name, e.strip, s) for e, s in zip(read, sources)])
    else:
        patches = [parse_patch_source(s, e.name, e.strip) for e, s in zip(read, sources)]
    if missing is not None:
        raise missing
    return Queue(root, series_bytes, tuple(entries), tuple(patches))
