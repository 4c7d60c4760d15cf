"""refresh and diff: a patch recomputed from snapshot -> current bytes.

Every section without a change is dropped; an unchanged section keeps its bytes (and any extra
fields); a new file whose work copy is executable gets `Mode:` with its permission bits (and git's
`new file mode 100755`), a deleted file git's `deleted file mode` with the mode it had before the
patch when it was executable (patchfile.needs_git_form).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import PythonCheckFailed, UsageError
from ..queue.hunks import sha256_hex
from ..queue.patchfile import FileSection, Patch, build_patch, make_section
from ..queue.interrupted import Change
from ..store import remember
from .files import FileState
from ..queue.lock import LockUpdate
from .relock import commit
from .state import Tracked

if TYPE_CHECKING:
    from .tree import WorkTree


@dataclass(frozen=True)
class Refreshed:
    name: str
    patch: Patch
    changed: bool
    notes: tuple[str, ...] = ()  # the cross-module check's "cannot tell"s (or why it could not run)
    lock: LockUpdate | None = None  # what became of targets.lock (work.relock)


def after(wt: WorkTree, applied: list[str], index: int, t: Tracked) -> FileState:
    """The content of t's file right after applied[index]: the next snapshot above it, else the work copy."""
    for name in applied[index + 1 :]:
        for u in wt.snapshot(name):
            if u.resolved == t.resolved:
                return FileState(wt.blob(u.sha256, what=f"{u.path} before {name}"), u.mode, u.resolved)
    return wt.read_work(wt.location(t.path, applied))


def compute(wt: WorkTree, name: str) -> tuple[Patch, Patch]:
    """(patch as on disk, patch as the work tree says it should be now)."""
    applied = wt.consistent()
    if name not in applied:
        raise UsageError(f"Patch {name} is not applied.", hint=f"`imgquilt push {name}` first.")
    patch = wt.read_patch(name)
    snap = wt.snapshot(name)
    by_path = {t.path: t for t in snap}
    for s in patch.sections:
        if s.path not in by_path:
            raise UsageError(
                f"patches/{name} has a section for {s.path}, which its work tree does not track (was the patch file edited while applied?).",
                hint="Pop it with `imgquilt pop -f` and push it again, or `imgquilt add` the file.",
            )
    existing = {s.path: s for s in patch.sections}
    order = [s.path for s in patch.sections] + [t.path for t in snap if t.path not in existing]
    index = applied.index(name)
    sections: list[FileSection] = []
    for path in order:
        t = by_path[path]
        old = wt.blob(t.sha256, what=f"{path} before {name}")
        now = after(wt, applied, index, t)
        change = _mode_change(t.mode, now, old)
        if sha256_hex(old) == sha256_hex(now.data) and change is None:
            continue
        mode = None
        if old is None and now.data is not None and now.mode is not None and now.mode & 0o111:
            mode = now.mode
        deleted_mode = t.mode & 0o777 if old is not None and now.data is None and t.mode is not None else None
        s0 = existing.get(path)
        # a new file's mode as it comes out (no `Mode:` is 0644; git's `new file mode 100644` reads as 0644)
        if s0 is not None and (s0.base_sha256, s0.patched_sha256, _made(s0.mode) if old is None else None, s0.mode_change) == (
                t.sha256, sha256_hex(now.data), _made(mode) if old is None else None, change):
            # unchanged: keep its bytes (and any extra fields); a plain deletion written before knows
            # its file's mode now, for the `deleted file mode` build_patch puts in front of it after
            # a section of git headers alone
            sections.append(s0 if s0.git_form or deleted_mode is None else replace(s0, deleted_mode=deleted_mode))
        else:
            sections.append(make_section(path, old, now.data, mode, mode_change=change, deleted_mode=deleted_mode))
    return patch, build_patch(name, patch.header, sections)


def _made(mode: int | None) -> int:
    return 0o644 if mode is None else mode


def _mode_change(before: int | None, now: FileState, old: bytes | None) -> tuple[int, int] | None:
    """A change of the executable bit of a file there before and after (git's notion of a mode change:
    other bits an editor may leave differ are not the patch's)."""
    if old is None or now.data is None or before is None or now.mode is None:
        return None
    if bool(before & 0o111) == bool(now.mode & 0o111):
        return None
    return (before & 0o777, now.mode & 0o777)


def unrefreshed(wt: WorkTree, name: str, patch: Patch | None = None) -> list[str]:
    """Paths whose content after patch `name` is not what the patch file (or `patch`) says (hashes only, no diff)."""
    applied = wt.consistent()
    if name not in applied:
        return []
    sections = {s.path: s for s in (patch or wt.read_patch(name)).sections}
    snap = wt.snapshot(name)
    index = applied.index(name)
    dirty = [p for p in sections if p not in {t.path for t in snap}]
    for t in snap:
        want = sections[t.path].patched_sha256 if t.path in sections else t.sha256
        if sha256_hex(after(wt, applied, index, t).data) != want:
            dirty.append(t.path)
    return sorted(dirty)


def refresh(wt: WorkTree, name: str | None = None, *, python_check: bool = True) -> Refreshed:
    """Write the work tree's changes into the patch (the top by default); the header is kept.

    With `python_check`, a .py file the patch leaves with a syntax error or an undefined name its
    content before the patch had not is refused (PythonCheckFailed), as `lock` and `apply` would."""
    with wt.locked():
        name = name or wt.need_top()
        disk, now = compute(wt, name)
        notes: list[str] = []
        if python_check:
            _python_check(wt, name, now)
            notes = _cross_check(wt, name, now)
        now = _marked(name, disk, now, python_check)
        remember(wt.root, [wt.read_work(wt.location(s.path)).data for s in now.sections])
        lock = None
        if now.raw != disk.raw:  # the patch file and the lock that follows it, as one transaction
            lock = commit(wt, "refresh", [Change(f"patches/{name}", now.raw)], patches={name: now})
        return Refreshed(name, now, now.raw != disk.raw, tuple(notes), lock)


def _marked(name: str, disk: Patch, now: Patch, python_check: bool) -> Patch:
    """The patch with its header saying whether its Python files went unchecked: `Python-Check: skipped`
    when --no-python-check wrote a change to a .py file; the field goes once a refresh checked them."""
    from ..queue.patchfile import PYTHON_CHECK_FIELD, PYTHON_CHECK_SKIPPED, build_patch

    header = now.header
    if python_check and header.python_unchecked:
        header = header.with_field(PYTHON_CHECK_FIELD, None)
    elif not python_check and not header.python_unchecked and now.raw != disk.raw and \
            any(s.path.endswith(".py") for s in now.sections):
        header = header.with_field(PYTHON_CHECK_FIELD, PYTHON_CHECK_SKIPPED)
    return now if header == now.header else build_patch(name, header, now.sections)


def diff(wt: WorkTree, name: str | None = None) -> Patch:
    """The patch as the work tree says it is now (snapshot -> current), without writing it."""
    return compute(wt, name or wt.need_top())[1]


def _python_check(wt: WorkTree, name: str, patch: Patch) -> None:
    from ..pycheck.names import located, new_python_errors

    applied = wt.consistent()
    index = applied.index(name)
    before = {t.path: t for t in wt.snapshot(name)}
    found: list[str] = []
    for s in patch.sections:
        t = before.get(s.path)
        if not s.path.endswith(".py") or t is None or s.is_delete:
            continue
        now = after(wt, applied, index, t).data
        if now is None:
            continue
        new = new_python_errors(wt.blob(t.sha256, what=f"{s.path} before {name}"), now, s.path)
        found += located(now, s.path, new)
    if found:
        raise PythonCheckFailed(
            f"Refused: {name}: the patch adds Python errors: {'; '.join(found)}. Nothing was written.",
            hint="Fix the file under .imgquilt/work/ and `imgquilt refresh` again, or keep it as it is with "
                 "`imgquilt refresh --no-python-check`.",
        )


class _NoImage(Exception):
    """The image the work tree's bases come from cannot be opened: the cross-module check is skipped."""


class _LazyImage:
    """The work tree's image as a Source for the cross-module check, opened only when a module must be read."""

    def __init__(self, wt: WorkTree) -> None:
        self._wt = wt
        self._src = None
        self._keep: tuple | None = None

    def keep_also(self, wanted, budget: int) -> None:
        """Passed on to the image once it is opened (image.ImageSource.keep_also): the modules of a
        package looked up are kept as its layer is read, not read again in a second pass each."""
        self._keep = (wanted, budget)
        if self._src is not None:
            self._forward_keep()

    def _forward_keep(self) -> None:
        keep = getattr(self._src, "keep_also", None)
        if self._keep is not None and callable(keep):
            keep(*self._keep)

    def _open(self):
        from ..errors import ImgquiltError

        if self._src is None:
            try:
                self._src = self._wt.bases.image()
            except ImgquiltError as exc:
                raise _NoImage(exc.message) from None
            self._forward_keep()
        return self._src

    def info(self):
        return self._open().info()

    def read_targets(self, paths, *, links=()):
        from ..fs.types import read_targets

        return read_targets(self._open(), paths, links)

    def read_first(self, paths):
        from ..fs.types import ReadsFirst

        src = self._open()
        return src.read_first(paths) if isinstance(src, ReadsFirst) else src.read_targets(paths)

    def peek_targets(self, paths):
        from ..fs.types import PeeksTargets

        src = self._open()
        return src.peek_targets(paths) if isinstance(src, PeeksTargets) else src.read_targets(paths)

    def locate(self, paths, *, first, read=()):
        """The image's own (fs.types.LocatesFiles: an extension module's presence, its bytes not read);
        a source without it reads every path."""
        from ..fs.types import LocatesFiles

        src = self._open()
        if isinstance(src, LocatesFiles):
            return src.locate(paths, first=first, read=read)
        return self.read_first(paths) if first else self.read_targets(paths)


def _cross_check(wt: WorkTree, name: str, patch: Patch) -> list[str]:
    """The cross-module check (pycheck's `check`) of the patch's .py files: their imports and calls
    against the image with every applied patch up to this one in front of it, new findings only
    (against the files as they were before the patch). Refuses (PythonCheckFailed) on a finding;
    returns the "cannot tell" notes."""
    from ..pycheck import check
    from ..pycheck.pysearch import SourceModules

    applied = wt.consistent()
    index = applied.index(name)
    mine = {t.resolved: t for t in wt.snapshot(name)}
    after_all: dict[str, bytes | None] = {}
    named: dict[str, str] = {}
    for p in applied[: index + 1]:
        for t in wt.snapshot(p):
            named[t.path] = t.resolved
            if t.resolved not in after_all:
                after_all[t.resolved] = after(wt, applied, index, t).data
    before_all = dict(after_all)
    for r, t in mine.items():
        before_all[r] = wt.blob(t.sha256, what=f"{t.path} before {name}")
    by_path = {t.path: t for t in mine.values()}
    files = [(s.path, by_path[s.path].resolved, before_all[by_path[s.path].resolved], after_all[by_path[s.path].resolved])
             for s in patch.sections
             if s.path.endswith(".py") and s.path in by_path and after_all.get(by_path[s.path].resolved) is not None]
    if not files:
        return []
    changed = [(r, before_all[r], after_all[r]) for r in mine if before_all[r] != after_all[r]]
    image = SourceModules(_LazyImage(wt))  # type: ignore[arg-type]
    from ..cache.layers import cache_disabled
    from ..pycheck.names import checker_version
    from ..pycheck.rows import PyCheckResults

    # the shared cache's rows (issue 37): a refresh re-checks only the files whose bytes, or whose
    # modules, changed since the last check
    memo = None if cache_disabled() else PyCheckResults(checker_version())
    try:
        results = check(files, image.view(after_all, named), image.view(before_all, named), changed=changed, memo=memo)
    except _NoImage as exc:
        return [f"The cross-module Python check did not run: {exc}"]
    found = [x for ff in results for f in ff.findings for x in f.located(ff.check.path)]
    if found:
        raise PythonCheckFailed(
            f"Refused: {name}: the patch adds Python errors: {'; '.join(found)}. Nothing was written.",
            hint="Fix the file under .imgquilt/work/ and `imgquilt refresh` again, or keep it as it is with "
                 "`imgquilt refresh --no-python-check`.",
        )
    return [x for ff in results for f in ff.notes for x in f.located(ff.check.path)]
