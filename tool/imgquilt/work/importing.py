"""import: foreign patches (diff -u, git, quilt, pinned) turned into imgquilt patches after the top.

Bases are read at that point of the stack: the work tree, else the image. Several patches chain:
each one's bases are the results of the ones before it. Nothing is written until all converted;
then the import is one transaction (queue.interrupted.QueueJournal): a journal (with a backup of
each patch file it replaces), the patch files, and one rename of `series` that commits it all (the
last patch file, when series does not change: a -f of patches already listed), or of targets.lock
when the lock follows the import (work.relock). A kill at any point
leaves a queue that the next command puts back exactly as it was (or, past the commit, exactly
imported).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import BadInput, ImgquiltError, UsageError
from ..importer import ForeignPatch, apply_foreign, file_paths, parse_foreign
from ..queue.interrupted import Change
from ..queue.patchfile import Header, Patch, build_patch, make_section, parse_patch
from .patchtext import check_patch_name
from .relock import commit

if TYPE_CHECKING:
    from .tree import WorkTree


@dataclass(frozen=True)
class ImportItem:
    """One foreign patch to import under `name`."""

    name: str
    data: bytes
    strip: int = 1
    source: str = "<patch>"
    guards: tuple[str, ...] = ()  # written on its series line (an MQ series' guards, import --guard)


@dataclass(frozen=True)
class Imported:
    name: str
    patch: Patch
    kind: str
    notes: tuple[str, ...] = field(default=())


def import_patches(
    wt: WorkTree,
    items: list[ImportItem],
    *,
    fields: list[tuple[str, str | None]] = (),  # type: ignore[assignment]
    replace: bool = False,
    check_git_index: bool = True,
    fuzz: int = 0,
    prefix: str = "",
    guard_others: dict[str, tuple[str, ...]] | None = None,
) -> list[Imported]:
    """Turn foreign patches into imgquilt patches inserted after the top patch, bases from the work tree or image.
    `guard_others`: new guards for patches already in series, written in the same transaction
    (`import --series VENDOR.series --profile NAME`)."""
    with wt.locked():
        applied = wt.consistent()
        names = wt.series()
        _check_names(wt, items, applied, names, replace)
        stacked = [n for n in (guard_others or {}) if n in applied]
        if stacked:
            raise UsageError(f"{', '.join(stacked)} would leave the profile, but the imported patches' bases are read on top of it "
                             "(it is applied).", hint="Pop down to the last patch the vendor series lists, then import again.")
        overlay: dict[str, bytes | None] = {}

        def read(path: str, _want: str | None) -> bytes | None:
            if path not in overlay:
                overlay[path] = wt.current([path], applied, keep=False)[path].data
            return overlay[path]

        parsed = [parse_foreign(it.data, it.source) for it in items]
        # every base the patches name, read in one go (a series names hundreds of files)
        first = sorted({p for fp, it in zip(parsed, items) for p in _named_paths(fp, it.strip, prefix)})
        # nothing goes to the object store: push and lock store the bases they use
        overlay.update({p: st.data for p, st in wt.current(first, applied, keep=False).items()})
        out: list[Imported] = []
        for it, fp in zip(items, parsed):
            conv = apply_foreign(
                fp, it.strip, read, label=it.source, check_git_index=check_git_index, fuzz=fuzz, prefix=prefix, find_tail=wt.bases.ending_in
            )
            if not conv.changes:
                raise BadInput(f"{it.source} changes nothing in these files.", hint="Nothing to import.")
            header = Header(fp.header)
            for key, value in fields:
                header = header.with_field(key, value)
            patch = build_patch(it.name, header, [make_section(c.path, c.base, c.result, c.mode, c.hunks) for c in conv.changes])
            parse_patch(patch.raw, it.name)  # what we write must read back
            for c in conv.changes:
                overlay[c.path] = c.result
            out.append(Imported(it.name, patch, fp.kind, tuple(conv.notes)))
        fresh = [imp.name for imp in out if imp.name not in names]
        guards = {it.name: it.guards for it in items if it.guards}
        series = wt.queue.inserted(fresh, applied[-1] if applied else None, guards) if fresh else wt.queue.series_bytes()
        if guards or guard_others:
            from ..queue.series import guarded

            for name, g in {**{n: g for n, g in guards.items() if n in names}, **(guard_others or {})}.items():
                series = guarded(series, name, g)
        # series last, then the lock that follows: the last rename commits the import
        commit(wt, "import", [Change(f"patches/{imp.name}", imp.patch.raw) for imp in out] + [Change("series", series)],
               series=series, patches={imp.name: imp.patch for imp in out})
        return out


def _named_paths(fp: ForeignPatch, strip: int, prefix: str) -> list[str]:
    """The image paths a foreign patch reads (a name that will not resolve is left to the real pass)."""
    out: list[str] = []
    for f in fp.files:
        try:
            out += list(file_paths(f, strip, fp.source, prefix))
        except ImgquiltError:
            continue
    return out


def _check_names(wt: WorkTree, items: list[ImportItem], applied: list[str], names: list[str], replace: bool) -> None:
    seen: set[str] = set()
    for it in items:
        check_patch_name(it.name)
        if it.name in seen:
            raise UsageError(f"Two imported patches would be named {it.name}.", hint="Name them with -P, one file at a time.")
        seen.add(it.name)
        if it.name in applied:
            raise UsageError(f"Patch {it.name} is applied; it cannot be replaced.", hint="Pop it first.")
        if (it.name in names or wt.queue.exists(it.name)) and not replace:
            raise UsageError(f"Patch {it.name} already exists.", hint="Pass -f to replace it, or -P to import under another name.")
