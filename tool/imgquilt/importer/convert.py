"""Applying a foreign patch to real bases: names, placement (offset, fuzz, anchors), every pin checked.

The rules are the ones `git apply` and GNU `patch` follow, so an import gives the tree they give:

* names: a git diff names its files; for a plain diff the file to patch is chosen as GNU patch
  chooses it: of the `---`/`+++` names, the ones that exist, else (a new file) all of them, and of
  those the "best" (fewest components, shortest base name, shortest name);
* kinds: a path is read as itself, never through a final symlink: a diff that changes a regular file
  where a symlink stands is refused, as both tools refuse it (`--through-links` patches the file the
  link leads to and keeps the link); a git symlink diff (mode 120000) creates, retargets
  or deletes the link itself;
* renames and copies read their source as the patch found it (two files renamed onto each other
  swap), a rename's destination may be a path the patch renames away or deletes, and a renamed file
  keeps its mode and kind; `old mode`/`new mode` change the mode;
* git `index` lines are checked against the bases ("check"), recorded when they disagree ("warn":
  a quilt series, as quilt ignores them), or ignored.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable

from ..engine.apply import PlaceError, Placed, apply_placed, link_target_problem, place_hunks, renumbered
from ..errors import BadInput, BaseDrift, HunkMismatch, MalformedPatch, MissingTarget, ResultMismatch
from ..fs.paths import check_member_path
from ..queue.binarypatch import BinaryPatchError, DeltaBaseMismatch, apply_binary, git_blob_sha1
from ..queue.hunks import ABSENT, Hunk, sha256_hex, split_lines
from .names import best_name, strip_path
from .values import Base, Converted, FileChange, ForeignFile, ForeignPatch, IndexMismatch, Pin
from .values import bad as _bad

_EMPTY = sha256_hex(b"")

_ZERO_SHA1 = re.compile(r"^0+$")
EMPTY_BLOB = git_blob_sha1(b"")

# read(path, follow): what the path holds where the patch is imported; `follow` resolves a final
# symlink too (only for --through-links), else the path is read as itself
BaseReader = Callable[[str, bool], Base]
# every path of the image ending in "/" + the given tail (for package-relative paths)
TailFinder = Callable[[str], list[str]]


@dataclass
class Prefixes:
    """Where package-relative paths were found in this import (a later file tries the same place first)."""

    found: list[str] = field(default_factory=list)


def _under(prefix: str, path: str) -> str:
    return f"{prefix.strip('/')}/{path}" if prefix.strip("/") else path


def file_paths(f: ForeignFile, strip: int, source: str, prefix: str = "",
               exists: Callable[[str], bool] | None = None) -> tuple[str, str, str | None]:
    """(path read, path written, a note on the choice) inside the image for one file diff; `prefix` as `patch -d DIR`.

    `exists` (None: not known) lets a plain diff's name be chosen as GNU patch chooses it."""
    if f.pin is not None and f.pin.target:
        target = f.pin.target if f.pin.target.startswith("/") else _under(prefix, f.pin.target)
        target = check_member_path(target.lstrip("/"), what=f"TARGET in {source}")
        return target, target, None

    def one(name: str | None) -> str | None:
        if name is None:
            return None
        return check_member_path(_under(prefix, strip_path(name, strip, source=source, line=f.line)), what=f"path in {source}")

    old, new = one(f.old_name), one(f.new_name)
    if f.rename or f.copy:
        if f.moved_names is not None:  # git apply takes these names, one component less stripped
            old, new = (check_member_path(_under(prefix, strip_path(n, max(strip - 1, 0), source=source, line=f.line)),
                                          what=f"path in {source}") for n in f.moved_names)
        if old is None or new is None:
            raise _bad(source, f.line, "a rename or copy names no source or destination.")
        return old, new, None
    if not f.git and old is not None and new is not None and old != new and exists is not None:
        return (*_gnu_choice(old, new, f, exists),)  # type: ignore[return-value]
    name = new if (new is not None and not f.new_absent) else (old if old is not None else new)
    if name is None:
        raise _bad(source, f.line, "both sides of the diff are /dev/null.")
    return name, name, None


def _gnu_choice(old: str, new: str, f: ForeignFile, exists: Callable[[str], bool]) -> tuple[str, str, str | None]:
    """GNU patch's choice between two names (its manual, "Multiple Patches"): the best of those that
    exist; when none does and the diff creates the file, the best of all; else the `+++` name, which
    the missing-file error then names."""
    there = [n for n in (old, new) if exists(n)]
    if there:
        name = best_name(there)
        why = f"it exists, {new if name == old else old} does not" if len(there) == 1 else "the shorter of two names that both exist"
    elif f.old_absent or all(h.old_len == 0 for h in f.hunks):
        name, why = best_name([old, new]), "the shorter of the two names, for a new file"
    else:
        return new, new, None
    if name == new and len(there) != 1:
        return name, name, None
    return name, name, f"the diff names {old} and {new}; took {name} ({why}), as GNU patch does"


def _tail_candidates(path: str, f: ForeignFile, pin: Pin, read: BaseReader, find_tail: TailFinder | None) -> tuple[list[str], list[str]]:
    """(files ending in `path`, those the patch's own evidence points at: its pinned base, its git blob, else all)."""
    if find_tail is None:
        return [], []
    candidates = sorted(find_tail(path))
    if pin.base not in (None, ABSENT):
        return candidates, [c for c in candidates if sha256_hex(read(c, False).data) == pin.base]
    if f.git_index is not None and not _ZERO_SHA1.match(f.git_index[0]):
        return candidates, [c for c in candidates if git_blob_sha1(read(c, False).data).startswith(f.git_index[0])]
    return candidates, candidates


def _placement_notes(where: str, placed: list[Placed]) -> list[str]:
    notes = []
    for p in placed:
        if p.hunk.anchor is not None or (p.start == p.named and not p.fuzz):
            continue
        d = p.start - p.named
        moved = f"{abs(d)} line{'s' if abs(d) != 1 else ''} {'below' if d > 0 else 'above'} its header" if d else "at its header's line"
        fuzz = f", with fuzz {p.fuzz}" if p.fuzz else ""
        notes.append(f"{where} hunk {p.index + 1} at line {p.start + 1}, {moved}{fuzz}")
    return notes


def _blob_ok(want: str, data: bytes | None) -> bool:
    return git_blob_sha1(data).startswith(want) or (data is None and bool(_ZERO_SHA1.match(want)))


class _Apply:
    """One foreign patch applied in memory, file diff by file diff."""

    def __init__(self, fp: ForeignPatch, strip: int, read: BaseReader, label: str, git_index: str, fuzz: int,
                 prefix: str, find_tail: TailFinder | None, through_links: bool, prefixes: Prefixes) -> None:
        self.fp, self.strip, self.read, self.label = fp, strip, read, label
        self.git_index, self.fuzz, self.prefix, self.find_tail = git_index, fuzz, prefix, find_tail
        self.follow, self.prefixes = through_links, prefixes
        self.state: dict[str, Base] = {}
        self.first: dict[str, Base] = {}
        self.order: list[str] = []
        self.notes: list[str] = []
        self.kept: dict[str, tuple[Hunk, ...] | None] = {}
        self.written: set[str] = set()
        self.vacated: list[str] = []
        self.mismatches: list[IndexMismatch] = []

    def get(self, path: str, follow: bool = False) -> Base:
        if path not in self.state:
            self.state[path] = self.read(path, follow)
            self.first[path] = self.state[path]
        if path not in self.order:  # the patch's own order: the sections are written in it
            self.order.append(path)
        return self.state[path]

    def exists(self, path: str) -> bool:
        """Is there something at `path` (probing a name: it joins the patch's order only when used)?"""
        if path not in self.state:
            self.state[path] = self.first[path] = self.read(path, False)
        return self.state[path].data is not None

    def run(self) -> Converted:
        named = []
        for f in self.fp.files:
            src, dst, why = file_paths(f, self.strip, self.fp.source, self.prefix, self.exists)
            if why:
                self.notes.append(f"{dst}: {why}")
            if f.gnu_cut:
                self.notes.append(f"{dst}: the diff names {f.gnu_cut!r} with no tab after it; the name ends at its first "
                                  "space, as quilt (GNU patch) reads it (git would take the whole name)")
            named.append((f, src, dst))
        # git apply: a destination may be a path this patch deletes or renames away (two files swapped)
        leaving = {src for f, src, _dst in named if f.rename} | {src for f, src, _dst in named if f.new_absent}
        # package-relative paths: the first changed file that is missing says where they start (then a
        # new file of the patch goes there too)
        if not self.prefix and not self.prefixes.found:
            missing = next(((f, src) for f, src, dst in named if not f.old_absent and src == dst and not f.headers_only
                            and not (f.pin is not None and f.pin.target and (f.pin.base in (None, ABSENT)))
                            and not self.exists(src)), None)
            if missing is not None:
                self._infer(missing[0], missing[1], missing[0].pin or Pin())
        for f, src, dst in named:
            if f.headers_only:
                self.notes.append(f"{dst}: a `diff --git` header with nothing under it; skipped (as git apply and patch do)")
                continue
            self.one(f, src, dst, leaving)
        for path in self.vacated:
            if path not in self.written:
                self.state[path] = Base(None)
        changes = self._changes()
        _through_links(self.label, changes)
        return Converted(changes, self.notes, self.mismatches)

    def _changes(self) -> list[FileChange]:
        out: list[FileChange] = []
        for path in self.order:
            base, result = self.first[path], self.state[path]
            mode_change = None
            if base.data is not None and result.data is not None:
                if base.link != result.link:
                    raise BadInput(
                        f"Cannot import {self.label}: {path}: the patch turns a {'symlink' if base.link else 'regular file'} "
                        f"into a {'symlink' if result.link else 'regular file'}; one imgquilt patch section carries one kind of file.",
                        hint="Split it: import the deletion as one patch and the creation as the next.",
                    )
                if not result.link and base.mode is not None and result.mode is not None and base.mode != result.mode:
                    mode_change = (base.mode, result.mode)
            if base.data == result.data and mode_change is None and (base.data is None or base.link == result.link):
                continue
            hunks = self.kept.get(path)
            if result.data is None or base.data is None and not result.data or mode_change is not None:
                hunks = None  # deletions, empty files, mode changes: the writer's own form
            mode = result.mode if base.data is None and result.mode not in (None, 0o644) and not result.link else None
            deleted_mode = base.mode if result.data is None and base.data is not None and not base.link else None
            out.append(FileChange(path, base.data, result.data, mode, hunks, link=result.link if result.data is not None else base.link,
                                  mode_change=mode_change, deleted_mode=deleted_mode))
        return out

    # --- one file diff ------------------------------------------------------------------------
    def one(self, f: ForeignFile, src: str, dst: str, leaving: set[str]) -> None:
        where = f"{self.label}: {dst}" + (f" (from {src})" if src != dst else "")
        pin = f.pin or Pin()
        content_less = f.binary and f.binary_patch is None
        if content_less and not (f.old_absent and f.new_file_mode is not None and not f.link):
            raise BadInput(
                f"Cannot import {where}: the diff says only that the binary file differs; it carries no content.",
                hint="Export it again with `git format-patch --binary` (or `git diff --binary`), which carries the bytes.",
            )
        base = self.get(src)
        if f.rename or f.copy:
            base = self.first[src]  # git apply: a rename or copy reads its source as the patch found it
        if base.data is None and src == dst and src not in self.written:
            src, dst, where, base = self._moved(f, src, dst, where, pin)
        base = self._kind(f, src, where, base)
        actual = sha256_hex(base.data)
        if f.old_absent and not f.git and base.data is not None and not base.link and actual == _EMPTY and not (f.rename or f.copy):
            # GNU patch (so quilt, which writes `--- /dev/null` for an empty original) creates a file of a
            # plain diff over an empty one, keeping its mode: a change of the empty file
            f = replace(f, old_absent=False)
        changes_it = any(h.old_len for h in f.hunks) or f.rename or f.copy or f.mode_change is not None or f.new_absent
        if base.data is None and not f.old_absent and (changes_it or pin.base not in (None, ABSENT)):
            raise self._missing(f, src, where, pin)
        if pin.base is not None and pin.base != actual:
            raise BaseDrift(
                f"Refused: {where}: the patch pins base sha256 {pin.base}, the file here is {actual}.",
                hint="Import onto the image the patch was made for (--image REF), or drop the stale pin line.",
            )
        if f.old_absent and base.data is not None and not (f.rename or f.copy) and src not in leaving:
            raise BaseDrift(
                f"Refused: {where}: the patch creates the file, but it exists here (sha256 {actual}).",
                hint="The file is already there: drop this part of the patch, or import onto another image.",
            )
        self._index(f, src, "base", f.git_index[0] if f.git_index else None, base.data, where, actual)
        if dst != src or f.old_absent:
            there = self.get(dst)
            if there.data is not None and dst not in leaving and dst != src:
                raise BaseDrift(
                    f"Refused: {where}: the patch {'renames' if f.rename else 'copies'} onto {dst}, which exists here "
                    f"(sha256 {sha256_hex(there.data)}).",
                    hint="The destination is already there: import onto the image the patch was made for.",
                )
        result, placed = self._result(f, base, where, actual, content_less)
        link = bool(f.link) if f.link is not None else base.link
        if f.new_absent:
            if result:
                raise ResultMismatch(f"Refused: {where}: the patch deletes the file, but {len(result)} byte(s) remain after its hunks.",
                                     hint="The diff does not match the file here: import onto the image the patch was made for.")
            out: Base = Base(None)
        elif base.data is None and not result and not f.old_absent and not f.hunks:
            out = Base(None)  # nothing created
        else:
            assert result is not None
            if link and link_target_problem(result):
                raise MalformedPatch(f"Cannot import {where}: {link_target_problem(result)}.",
                                     hint="A git symlink diff holds the link's target as its one line; fix the diff.")
            out = Base(result, self._mode(f, base, pin, where), link)
        got = sha256_hex(out.data)
        if pin.patched is not None and pin.patched != got:
            raise ResultMismatch(
                f"Refused: {where}: the patch pins patched sha256 {pin.patched}, applying it gives {got}.",
                hint="The pin and the diff disagree: fix the pin line, or regenerate the patch.",
            )
        self._index(f, dst, "result", f.git_index[1] if f.git_index else None, out.data, where, got, content_less)
        if content_less:
            self.notes.append(f"{dst}: the diff carries no bytes for this new binary file; created it empty, as quilt "
                              "(GNU patch) does")
        if dst != src:
            self.get(dst)
            if f.rename:
                self.vacated.append(src)
        self.state[dst] = out
        self.written.add(dst)
        exact = f.hunks and all(h.anchor is None for h in f.hunks) and all(p.fuzz == 0 for p in placed) and src == dst
        self.kept[dst] = renumbered(placed) if exact and dst not in self.kept else None

    def _kind(self, f: ForeignFile, src: str, where: str, base: Base) -> Base:
        """The base as the diff means it: a symlink diff needs a symlink there, a regular one a regular file
        (or, with --through-links, the file a link leads to)."""
        if base.data is None:
            return base
        if f.link is True and not base.link:
            raise BaseDrift(
                f"Refused: {where}: the diff changes a symlink (mode 120000), but a regular file is here (sha256 {sha256_hex(base.data)}).",
                hint="Import onto the image the patch was made for (--image REF); git apply and patch refuse it too.",
            )
        if f.link is not True and base.link:
            if self.follow and not (f.rename or f.copy):
                followed = self.read(src, True)
                self.state[src] = self.first[src] = followed
                self.notes.append(f"{src}: a symlink to {base.data.decode('utf-8', 'backslashreplace')}; patched the file "
                                  "it leads to (--through-links)")
                return followed
            if not (f.rename or f.copy):
                raise BaseDrift(
                    f"Refused: {where}: {src} is a symlink here (to {base.data.decode('utf-8', 'backslashreplace')}), and the "
                    "diff changes a regular file; git apply and patch refuse it too.",
                    hint="Name the file the link leads to in the diff, or pass --through-links to patch the file it leads to "
                         "(the link stays).",
                )
        return base

    def _mode(self, f: ForeignFile, base: Base, pin: Pin, where: str) -> int | None:
        if f.link or base.link:
            return None
        if f.mode_change is not None:
            if base.mode is not None and base.mode != f.mode_change[0] & 0o777:
                self.notes.append(f"{where.split(': ', 1)[-1]}: the diff says mode {f.mode_change[0]:04o}, the file here is "
                                  f"{base.mode:04o}; set {f.mode_change[1] & 0o777:04o} as it says")
            return f.mode_change[1] & 0o777
        if base.data is not None and not f.old_absent:
            return base.mode
        mode = f.new_file_mode if f.new_file_mode is not None else pin.mode
        if f.new_file_mode is not None and pin.mode is not None and bool(pin.mode & 0o111) == bool(f.new_file_mode & 0o111):
            mode = pin.mode  # an imgquilt patch's `Mode:` gives the exact bits git's 100644/100755 cannot
        return (mode & 0o777) if mode is not None else 0o644

    def _result(self, f: ForeignFile, base: Base, where: str, actual: str, content_less: bool) -> tuple[bytes | None, list[Placed]]:
        if content_less:
            return b"", []
        if f.binary_patch is not None:
            try:
                return apply_binary(base.data, f.binary_patch), []
            except DeltaBaseMismatch as exc:  # made for another file: refused, as a hunk that does not fit
                raise HunkMismatch(f"Refused: {where}: the binary patch does not apply: {exc.message} (base sha256 {actual}).",
                                   hint="The diff was made against other bytes: import onto the right image.") from None
            except BinaryPatchError as exc:  # the delta itself is broken or hostile
                raise MalformedPatch(f"Cannot import {where}: the binary patch is malformed: {exc.message}",
                                     hint="Make the diff again with `git diff --binary`.") from None
        src_lines = split_lines(base.data or b"")
        if base.data and not base.data.endswith(b"\n") and any(h.anchor == "append" for h in f.hunks):
            raise HunkMismatch(
                f"Refused: {where}: the file does not end with a newline, so an `@@ append` hunk has no line to follow (base sha256 {actual}).",
                hint="Write the hunk as a numbered diff that also changes the last line.",
            )
        try:
            placed = place_hunks(src_lines, f.hunks, fuzz=self.fuzz)
        except PlaceError as exc:
            raise _no_fit(where, exc, actual, self.fuzz) from None
        self.notes += _placement_notes(where.split(": ", 1)[-1].split(" (from ")[0], placed)
        return apply_placed(src_lines, placed), placed

    def _index(self, f: ForeignFile, path: str, side: str, want: str | None, data: bytes | None, where: str, sha: str,
               content_less: bool = False) -> None:
        """A git `index` blob id against the bytes here: refused ("check"), recorded ("warn") or skipped."""
        if want is None or self.git_index == "ignore" or _blob_ok(want, data):
            return
        have = git_blob_sha1(data)[: len(want)]
        if self.git_index == "warn":
            self.mismatches.append(IndexMismatch(path, side, want, have))
            return
        if content_less:
            raise BadInput(
                f"Cannot import {where}: the diff carries no bytes for this binary file (git names its blob {want}); "
                "quilt would create it empty.",
                hint="Export it again with `git format-patch --binary`, or pass --ignore-git-index to create it empty as quilt does.",
            )
        if side == "base":
            raise BaseDrift(
                f"Refused: {where}: the git diff was made against blob {want}, the file here is blob {have} (sha256 {sha}).",
                hint="Import onto the image the diff was made for (--image REF), or pass --ignore-git-index to trust the hunks alone.",
            )
        raise ResultMismatch(
            f"Refused: {where}: git names the result blob {want}, applying the hunks gives {have}.",
            hint="The hunks and the index line disagree (an edited diff?): pass --ignore-git-index to trust the hunks, "
                 "or export the patch again.",
        )

    # --- a path not where the diff says ------------------------------------------------------------
    def _moved(self, f: ForeignFile, src: str, dst: str, where: str, pin: Pin) -> tuple[str, str, str, Base]:
        """A path the diff names is not here: package-relative paths go under the prefix found for this
        import (a new file too, once one is found)."""
        unchanged = (src, dst, where, self.get(src))
        if self.prefix or (f.pin is not None and f.pin.target and pin.base in (None, ABSENT)):
            return unchanged
        if not self.prefixes.found and not f.old_absent:
            self._infer(f, src, pin)
        for pre in self.prefixes.found:
            cand = _under(pre, src)
            if f.old_absent or self.exists(cand):
                self._forget(src)
                self.notes.append(f"{src} is not in the image; {'created' if f.old_absent else 'took'} {cand} (under {pre}).")
                return cand, cand, f"{self.label}: {cand}", self.get(cand)
        return unchanged

    def _infer(self, f: ForeignFile, src: str, pin: Pin) -> None:
        """Where package-relative paths start: the one file ending in a missing changed path (its pinned
        base or git blob, if the patch has one, must match); nothing when none or several fit."""
        _, hits = _tail_candidates(src, f, pin, self.read, self.find_tail)
        if len(hits) != 1:
            return
        pre = hits[0][: -len(src)].rstrip("/")
        if not pre:
            return
        self.prefixes.found.append(pre)
        evidence = " with the pinned base" if pin.base not in (None, ABSENT) else " with the diff's git blob" if f.git_index else ""
        self.notes.append(f"{src} is not in the image; {hits[0]} is the one file ending in it{evidence}, so the patch's "
                          f"paths start at {pre} (say so with --prefix {pre}).")

    def _forget(self, path: str) -> None:
        if path in self.state and path not in self.written:
            if path in self.order:
                self.order.remove(path)
            del self.state[path], self.first[path]

    def _missing(self, f: ForeignFile, src: str, where: str, pin: Pin) -> MissingTarget:
        candidates, hits = _tail_candidates(src, f, pin, self.read, self.find_tail)
        if self.prefix:
            hint = f"Check --prefix {self.prefix} and the -p level (-p{self.strip}), and the image (--image REF)."
        elif candidates:
            shown = candidates[:6]
            prefixes = ", ".join(f"--prefix {c[: -len(src)].rstrip('/')}" for c in shown)
            hint = f"The patch's paths look package-relative: say where they start, e.g. {prefixes}" + (" ..." if len(candidates) > 6 else ".")
        else:
            hint = f"Check the path (the -p level: -p{self.strip}; a TARGET line), --prefix DIR for package-relative paths, and the image (--image REF)."
        named = ", ".join(candidates[:8]) + (" ..." if len(candidates) > 8 else "") if candidates else ""
        if candidates:
            what = ("none has the pinned base sha256" if pin.base not in (None, ABSENT) else
                    "none has the diff's git blob" if f.git_index else "")
            if hits and len(hits) > 1:
                what = f"{len(hits)} fit"
            found = f"; files ending in it: {named}" + (f" ({what})" if what else "")
        else:
            found = ""
        return MissingTarget(f"Cannot import {where}: the file does not exist here, and the patch changes it{found}.", hint=hint)


def _through_links(label: str, changes: list[FileChange]) -> None:
    """A file the patch reaches through a symlink the patch itself creates or changes is refused: imgquilt
    reads and writes every path in the image as it is, never through a link a patch makes."""
    links = {c.path for c in changes if c.link}
    for c in changes:
        parts = c.path.split("/")
        via = next(("/".join(parts[:k]) for k in range(1, len(parts)) if "/".join(parts[:k]) in links), None)
        if via is not None:
            raise BadInput(
                f"Cannot import {label}: {c.path} goes through the symlink {via}, which the same patch creates or changes.",
                hint="Name the file by the path the link leads to, or import the link and the file as two patches "
                     "against the image that has the link.",
            )


def apply_foreign(
    fp: ForeignPatch,
    strip: int,
    read_base: BaseReader,
    *,
    label: str | None = None,
    git_index: str = "check",
    fuzz: int = 0,
    prefix: str = "",
    find_tail: TailFinder | None = None,
    through_links: bool = False,
    prefixes: Prefixes | None = None,
) -> Converted:
    """Apply every file diff of `fp` to real bases; verify every pin. Nothing is written here.

    `read_base(path, follow)` returns what the path holds (see Base). `git_index`: "check" (a blob id
    that disagrees is refused), "warn" (recorded in Converted.index_mismatches) or "ignore".
    """
    if git_index not in ("check", "warn", "ignore"):
        raise ValueError(git_index)
    return _Apply(fp, strip, read_base, label or fp.source, git_index, fuzz, prefix, find_tail, through_links,
                  prefixes if prefixes is not None else Prefixes()).run()


def _no_fit(where: str, exc: PlaceError, actual: str, fuzz: int) -> HunkMismatch:
    if exc.would is not None:
        line, need = exc.would
        detail = f"hunk {exc.index + 1} (header line {exc.named + 1}) matches nowhere exactly; with --fuzz {need} it would apply at line {line}"
        hint = f"Check the change at line {line}, then pass --fuzz {need} to accept it, or regenerate the diff against this file."
    else:
        detail = f"hunk {exc.index + 1} (header line {exc.named + 1}) matches nowhere, not even with 2 context lines dropped (fuzz 2)"
        hint = "The diff was made against other bytes: import onto the right image, or regenerate the diff against this file."
    return HunkMismatch(f"Refused: {where}: {detail} (base sha256 {actual}).", hint=hint)
