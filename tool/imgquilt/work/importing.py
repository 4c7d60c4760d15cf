"""import: foreign patches (diff -u, git, quilt, pinned) turned into imgquilt patches, placed in series.

Where they go: after the top patch; with nothing applied, after the last patch of series (a queue
grows at its end); `--after PATCH` / `--before PATCH` name the place. Never below an applied patch:
the work tree holds what the patches below the top leave, and a patch slipped under them would
change their bases.

Bases are read at that place: the work tree (else the image) at the top, carried through the
unapplied patches before the place (each verified against its pins), and each imported patch's
results are the next one's bases. A patch already in series after the place that changes the same
files is re-chained onto what the imported patches leave (work.rehash), as `refresh --rehash` does.

Nothing is written until all converted; then the import is one transaction
(queue.interrupted.QueueJournal): a journal (with a backup of each patch file it replaces), the
patch files, and one rename of `series` that commits it all (the last patch file, when series does
not change: a -f of patches already listed), or of targets.lock when the lock follows the import
(work.relock). A kill at any point leaves a queue that the next
command puts back exactly as it was (or, past the commit, exactly imported).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from typing import TYPE_CHECKING

from ..engine.apply import HunkError, apply_section
from ..errors import BadInput, BaseDrift, ImgquiltError, UsageError
from ..importer import Base, ForeignFile, ForeignPatch, Prefixes, apply_foreign, file_paths, parse_foreign
from ..importer.values import FileChange, IndexMismatch
from ..queue.hunks import sha256_hex
from ..queue.interrupted import Change
from ..queue.patchfile import FileSection, Header, Patch, build_patch, make_section, parse_patch
from .patchtext import check_patch_name
from .relock import commit

if TYPE_CHECKING:
    from .tree import WorkTree

INDEX_FIELD = "Git-Index-Ignored"


@dataclass(frozen=True)
class ImportItem:
    """One foreign patch to import under `name`; `series`: it comes from a quilt series (git `index`
    lines that disagree are recorded, as quilt ignores them, not refused)."""

    name: str
    data: bytes
    strip: int = 1
    source: str = "<patch>"
    guards: tuple[str, ...] = ()  # written on its series line (an MQ series' guards, import --guard)
    series: bool = False


@dataclass(frozen=True)
class Imported:
    name: str
    patch: Patch
    kind: str
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Placement:
    """Where the imported patches went: after `after` (None: at the start of series), and the
    patches after them that were re-chained onto them."""

    after: str | None
    rechained: tuple[str, ...] = ()


def import_patches(
    wt: WorkTree,
    items: list[ImportItem],
    *,
    fields: list[tuple[str, str | None]] = (),  # type: ignore[assignment]
    replace: bool = False,
    check_git_index: bool = True,
    fuzz: int = 0,
    prefix: str = "",
    after: str | None = None,
    before: str | None = None,
    through_links: bool = False,
    placed: list[Placement] | None = None,
    guard_others: dict[str, tuple[str, ...]] | None = None,
) -> list[Imported]:
    """Turn foreign patches into imgquilt patches placed in series (see the module), bases read at that place.

    `placed`, when given, receives the Placement. `guard_others`: new guards for patches already in
    series, written in the same transaction (`import --series VENDOR.series --profile NAME`)."""
    with wt.locked():
        applied = wt.consistent()
        names = wt.series()
        _check_names(wt, items, applied, names, replace)
        _check_names(wt, items, applied, names, replace)
        stacked = [n for n in (guard_others or {}) if n in applied]
        if stacked:
            raise UsageError(f"{', '.join(stacked)} would leave the profile, but the imported patches' bases are read on top of it "
                             "(it is applied).", hint="Pop down to the last patch the vendor series lists, then import again.")
        importing = {it.name for it in items}
        at = _place(names, applied, after, before, importing)
        selected = set(wt.selected())  # the patches the work tree walks (guards): the ones the bases go through
        view = _View(wt, applied)
        top = names.index(applied[-1]) + 1 if applied else 0
        between = [n for n in names[top:at] if n in selected and n not in importing]
        # a series is what quilt applies with GNU patch: its names are read as GNU patch reads them
        parsed = [parse_foreign(it.data, it.source, gnu_names=it.series) for it in items]
        # every base the patches name, read in one go (a series names hundreds of files)
        view.prefetch(sorted({p for fp, it in zip(parsed, items) for p in _named_paths(fp, it.strip, prefix)}))
        view.carry([wt.read_patch(n) for n in between])
        prefixes = Prefixes()
        out: list[Imported] = []
        for it, fp in zip(items, parsed):
            policy = "ignore" if not check_git_index else "warn" if it.series else "check"
            conv = apply_foreign(fp, it.strip, view.read, label=it.source, git_index=policy, fuzz=fuzz, prefix=prefix,
                                 find_tail=wt.bases.ending_in, through_links=through_links, prefixes=prefixes)
            if not conv.changes:
                raise BadInput(f"{it.source} changes nothing in these files.",
                               hint="Nothing to import: check the -p level and the image, or leave this patch out.")
            alias = view.same_file(conv.changes)
            if alias is not None:
                raise BadInput(f"{it.source} changes {alias[0]} and {alias[1]}, which are one file ({alias[2]}) through "
                               "symbolic links: a patch changes a file once.",
                               hint=f"Edit the patch to change {alias[2]} in one diff, then import it again.")
            header = Header(fp.header)
            notes = list(conv.notes)
            if conv.index_mismatches:
                header = header.with_field(INDEX_FIELD, _index_record(conv.index_mismatches))
                notes.append(_index_note(conv.index_mismatches))
            for key, value in fields:
                header = header.with_field(key, value)
            sections = [make_section(c.path, c.base, c.result, c.mode, c.hunks, link=c.link, mode_change=c.mode_change,
                                     deleted_mode=c.deleted_mode)
                        for c in conv.changes]
            patch = build_patch(it.name, header, sections)
            if fp.trailer:
                patch = build_patch(it.name, header, [*patch.sections[:-1], _with_trailer(patch.sections[-1], fp.trailer)])
            patch = parse_patch(patch.raw, it.name)  # what we write must read back
            view.took(conv.changes)
            out.append(Imported(it.name, patch, fp.kind, tuple(notes)))
        fresh = [imp.name for imp in out if imp.name not in names]
        anchor = names[at - 1] if at > 0 else None
        guards = {it.name: it.guards for it in items if it.guards}
        series = wt.queue.inserted(fresh, anchor, guards) if fresh else wt.queue.series_bytes()
        if guards or guard_others:
            from ..queue.series import guarded

            for name, g in {**{n: g for n, g in guards.items() if n in names}, **(guard_others or {})}.items():
                series = guarded(series, name, g)
        order = names[:at] + fresh + names[at:]
        # re-chained over the work tree's selection: the imported patches it would push, and the ones after them
        from ..queue.series import pushable

        chosen = {it.name for it in items if pushable(it.guards, wt.guards())[0]}
        new = {imp.name: imp.patch for imp in out if imp.name in chosen}
        rechained, stale = _rechain(wt, [n for n in order if n in selected or n in new], new) if new else ({}, "")
        if stale:
            out[-1] = Imported(out[-1].name, out[-1].patch, out[-1].kind, out[-1].notes + (stale,))
        if placed is not None:
            placed.append(Placement(anchor, tuple(n for n in order if n in rechained)))
        # series last, then the lock that follows: the last rename commits the import
        changes = [Change(f"patches/{imp.name}", imp.patch.raw) for imp in out]
        changes += [Change(f"patches/{n}", p.raw) for n, p in rechained.items()]
        commit(wt, "import", changes + [Change("series", series)], series=series,
               patches={**{imp.name: imp.patch for imp in out}, **rechained})
        return out


def _place(names: list[str], applied: list[str], after: str | None, before: str | None, importing: set[str]) -> int:
    """The index in series where the imported patches go."""
    if after is not None and before is not None:
        raise UsageError("--after and --before name one place; give one of them.", hint="imgquilt import FILE --after PATCH")
    for opt, name in (("--after", after), ("--before", before)):
        if name is not None and name not in names:
            raise UsageError(f"{opt} {name}: no such patch in series.", hint="`imgquilt series` lists the patches.")
        if name is not None and name in importing:
            raise UsageError(f"{opt} {name}: that is a patch being imported.", hint="Name a patch that stays in series.")
    if after is not None:
        at = names.index(after) + 1
    elif before is not None:
        at = names.index(before)
    else:  # after the top; after the last patch when none is applied
        at = names.index(applied[-1]) + 1 if applied else len(names)
    top = names.index(applied[-1]) + 1 if applied else 0
    if at < top:
        below = next(n for n in names[at:top] if n in applied)
        raise UsageError(
            f"The imported patches would go below the applied patch {below}: the work tree holds what it leaves.",
            hint=f"Pop down to there first (`imgquilt pop {names[at - 1]}`" + (")" if at else " or `imgquilt pop -a`)")
                 + f", or import after the top ({applied[-1]}).",
        )
    return at


class _View:
    """What paths hold at the import's place: the work tree (else the image) at the top, then the
    unapplied patches before the place, then each imported patch. Keyed by (path, follow)."""

    def __init__(self, wt: WorkTree, applied: list[str]) -> None:
        self.wt, self.applied = wt, applied
        self.held: dict[tuple[str, bool], Base] = {}
        self.where: dict[tuple[str, bool], str] = {}  # the path each read resolved to (through links)

    def _load(self, paths: list[str], follow: bool) -> None:
        need = [p for p in paths if (p, follow) not in self.held]
        if not need:
            return
        # nothing goes to the object store: push and lock store the bases they use
        got = self.wt.current(need, self.applied, keep=False, links=() if follow else need)
        for p in need:
            st = got[p]
            self.held[(p, follow)] = Base(st.data, st.mode, st.link)
            self.where[(p, follow)] = st.resolved or p

    def same_file(self, changes: list[FileChange]) -> tuple[str, str, str] | None:
        """Two of one patch's paths that name one file through symbolic links in their directories:
        (first, second, the file). From the reads already made (prefetch read every path the patches
        name, its directories resolved); nothing is read again."""
        seen: dict[str, str] = {}
        for c in changes:
            where = self.where.get((c.path, False)) or self.where.get((c.path, True)) or c.path
            if seen.setdefault(where, c.path) != c.path:
                return seen[where], c.path, where
        return None

    def prefetch(self, paths: list[str]) -> None:
        self._load(paths, False)

    def read(self, path: str, follow: bool) -> Base:
        self._load([path], follow)
        return self.held[(path, follow)]

    def carry(self, patches: list[Patch]) -> None:
        """Apply the unapplied patches before the place, each section verified against its pins."""
        for p in patches:
            for s in p.sections:
                now = self.read(s.path, not s.link)
                if sha256_hex(now.data) != s.base_sha256:
                    raise BaseDrift(
                        f"Refused: {p.name}: {s.path}: the patch says Base-SHA256 {s.base_sha256}, the file is "
                        f"{sha256_hex(now.data)} where it stands; the import would go after it.",
                        hint="The queue's chain is broken there: `imgquilt check` says where; or import before that patch.",
                    )
                try:
                    new = None if s.is_delete else apply_section(now.data, s)
                except HunkError as exc:
                    raise BadInput(f"Cannot import after {p.name}: {s.path}: its own hunk does not apply ({exc}).",
                                   hint="`imgquilt check` lists the queue's problems; fix them first.") from None
                mode = s.mode if s.is_new else s.new_mode if s.new_mode is not None else now.mode
                self._set(s.path, Base(new, None if new is None else (mode if mode is not None else 0o644), s.link and new is not None))

    def took(self, changes: list[FileChange]) -> None:
        """An imported patch's results: the bases of the next one."""
        for c in changes:
            prev = self.held.get((c.path, False))
            if c.result is None:
                mode = None
            elif c.mode_change is not None:
                mode = c.mode_change[1]
            elif c.base is None:
                mode = c.mode if c.mode is not None else 0o644
            else:
                mode = prev.mode if prev is not None else None
            self._set(c.path, Base(c.result, None if c.link else mode, c.link and c.result is not None))

    def _set(self, path: str, b: Base) -> None:
        self.held[(path, False)] = b
        if not b.link:
            self.held[(path, True)] = b
        else:
            self.held.pop((path, True), None)


def _with_trailer(s: FileSection, trailer: bytes) -> FileSection:
    """The last section with the foreign patch's trailer after its diff, kept as it came."""
    raw = s.raw if s.raw.endswith(b"\n") else s.raw + b"\n"
    return dataclass_replace(s, raw=raw + trailer)


def _index_record(found: list[IndexMismatch]) -> str:
    """The header field's value: per file, the blob the diff names and the one here."""
    lines = ["the diff's git `index` lines name other blobs than the files here (quilt ignores them):"]
    by_path: dict[str, dict[str, IndexMismatch]] = {}
    for m in found:
        by_path.setdefault(m.path, {})[m.side] = m
    for path, sides in by_path.items():
        said = " and ".join(f"{side} blob {m.want}" for side, m in sides.items())
        here = " and ".join(m.have for m in sides.values())
        lines.append(f"{path}: {said} in the diff; {here} here")
    return "\n".join(lines)


def _index_note(found: list[IndexMismatch]) -> str:
    paths = list(dict.fromkeys(m.path for m in found))
    shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    return (f"warning: its git `index` lines do not name these bases ({shown}): imported as quilt applies it, "
            f"recorded in its {INDEX_FIELD}: header")


def _rechain(wt: WorkTree, order: list[str], new: dict[str, Patch]) -> tuple[dict[str, Patch], str]:
    """The patches after the imported ones that touch a file they change, carried onto what they leave
    (work.rehash, as `refresh --rehash` re-chains); only those whose bytes change. When that cannot be
    done (the work tree holds changes not refreshed, a hunk fits nowhere), they are left as they are
    and the note says how to re-chain them."""
    paths = {s.path for p in new.values() for s in p.sections}
    first = min(order.index(n) for n in new)
    touched = [n for n in order[first:] if n not in new and any(s.path in paths for s in wt.read_patch(n).sections)]
    if not touched:
        return {}, ""
    from .rehash import rechain

    try:
        out = rechain(wt, order, new, list(new))
    except ImgquiltError as exc:
        last = [n for n in order if n in new][-1]
        return {}, (f"{', '.join(touched)} change{'s' if len(touched) == 1 else ''} the same files after it and could not be "
                    f"re-chained onto it ({exc.message.splitlines()[0]}); once the work tree is refreshed, "
                    f"`imgquilt refresh --rehash {last}` re-chains them")
    return {n: out[n] for n in touched if out[n].raw != wt.read_patch(n).raw}, ""


def _named_paths(fp: ForeignPatch, strip: int, prefix: str) -> list[str]:
    """The image paths a foreign patch reads (a name that will not resolve is left to the real pass)."""
    out: list[str] = []
    for f in fp.files:
        try:
            src, dst, _ = file_paths(f, strip, fp.source, prefix)
            out += [src, dst]
            for name in (f.old_name, f.new_name):
                if name is not None and not f.git:
                    out += list(file_paths(_only(f, name), strip, fp.source, prefix)[:2])
        except ImgquiltError:
            continue
    return out


def _only(f: ForeignFile, name: str) -> ForeignFile:
    """`f` naming `name` on both sides (to read both names of a plain diff up front)."""
    return dataclass_replace(f, old_name=name, new_name=name)


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
