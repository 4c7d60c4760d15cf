"""WorkTree: one queue's work tree and applied stack, and the queries every command shares.

The commands themselves live in their own modules (push, pop, refresh, track, series_edit, header,
importing); WorkTree's methods of the same names call them.
"""
from __future__ import annotations

from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Collection, Iterator

from ..errors import BadInput, UsageError
from ..store import ObjectStore
from .bases import Bases, SourceOpener
from .files import FileState, WorkFiles
from .queuefiles import QueueFiles
from .state import Tracked, WorkState

if TYPE_CHECKING:  # the patch format loads on use: `imgquilt top` reads no patch
    from ..queue.patchfile import Header, Patch
    from ..queue.lock import LockUpdate


class _Sibling:
    """A module of this package loaded on first use: `imgquilt top` need not load push or import (email)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(import_module(f"{__package__}.{self._name}"), attr)


_header, _importing, _pop, _push = _Sibling("header"), _Sibling("importing"), _Sibling("pop"), _Sibling("push")
_refresh, _series_edit, _track, _unrefreshed = _Sibling("refresh"), _Sibling("series_edit"), _Sibling("track"), _Sibling("unrefreshed")


class WorkTree:
    """The work tree and applied stack of one queue directory."""

    def __init__(self, root: Path, *, open_image: SourceOpener | None = None, image_explicit: bool = False) -> None:
        self.root = Path(root)
        self.store = ObjectStore(self.root)
        self.queue = QueueFiles(self.root)
        self.record = WorkState(self.root)
        self.files = WorkFiles(self.root)
        self.bases = Bases(self.root, self.store, open_image, image_explicit=image_explicit, pin=self.record.profile)
        self.lock_update: LockUpdate | None = None  # what the last command did about targets.lock (work.relock)

    @property
    def work(self) -> Path:
        return self.files.dir

    @property
    def state(self) -> Path:
        return self.record.dir

    def scratch_dir(self) -> Path:
        """The state directory, made and checked to hold no link, for an editor's temp file."""
        return self.record.scratch_dir()

    @property
    def series_path(self) -> Path:
        return self.queue.series_path

    @property
    def patches_dir(self) -> Path:
        return self.queue.patches_dir

    # --- series and the applied stack ---------------------------------------------------
    def series(self) -> list[str]:
        """Every patch series lists, guarded or not."""
        return self.queue.names()

    def profile(self) -> str | None:
        """The profile the work tree follows (`imgquilt select`); None: the default."""
        return self.record.profile()

    def guards(self) -> tuple[str, ...]:
        """The guards the work tree's selection turns on: its profile's (none for the default)."""
        name = self.profile()
        if name is None:
            return ()
        return self._profile_entry(name).select

    def _profile_entry(self, name: str):
        from ..queue.lock import read_lock_file

        found = read_lock_file(self.root / "targets.lock").profile(name)
        if found is None:
            raise UsageError(f"The work tree follows profile {name!r}, which targets.lock no longer declares.",
                             hint="`imgquilt select NAME` another profile, or `imgquilt select --none` for the default.")
        return found

    def selected(self) -> list[str]:
        """The patches push and pop walk: series in order, less the patches the selection's guards
        leave out (queue.series.pushable); every patch when series has no guards."""
        from ..queue.series import has_guards, selected_entries

        entries = self.queue.entries()
        if not has_guards(entries):
            return [e.name for e in entries]
        return [e.name for e in selected_entries(entries, self.guards())]

    def selected_queue(self, patches: dict[str, Patch]):
        """The queue of the selection (as the verbs take it), with `patches` by name."""
        from ..queue.queue import Queue

        whole = Queue(self.root, self.queue.series_bytes(), tuple(self.queue.entries()),
                      tuple(patches[n] for n in self.series() if n in patches))
        return whole.selection(self.guards())

    def applied(self) -> list[str]:
        return self.record.applied()

    def top(self) -> str | None:
        applied = self.applied()
        return applied[-1] if applied else None

    def unapplied(self) -> list[str]:
        return self.selected()[len(self.applied()) :]

    def snapshot(self, name: str) -> list[Tracked]:
        """The files patch `name` tracks, as they were before it (only for applied patches)."""
        return self.record.snapshot(name)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the work-tree lock: one changing command at a time, after cleaning up what an
        interrupted one left (queue.interrupted: dead temp files, an import or a rehash to undo)."""
        from ..queue.interrupted import recover

        with self.record.locked():
            recover(self.root)
            yield

    def remembered_image(self) -> str | None:
        return self.record.remembered_image()

    def remember_image(self, ref: str) -> None:
        self.record.remember_image(ref)

    def read_patch(self, name: str) -> Patch:
        return self.queue.read_patch(name)

    def read_work(self, path: str) -> FileState:
        return self.files.read(path)

    def consistent(self) -> list[str]:
        """The applied list, checked to be the head of series."""
        applied = self.applied()
        if self.selected()[: len(applied)] != applied:
            if self.series()[: len(applied)] == applied or set(applied) <= set(self.series()):
                why = "a guard changed while they were applied" if self.queue.entries() and any(e.guards for e in self.queue.entries()) else None
                if why:
                    raise UsageError(f"The applied patches are no longer the first patches of the work tree's selection ({why}).",
                                     hint=f"Applied: {', '.join(applied)}. Restore the guards, or `imgquilt pop -a` before changing them.")
            raise UsageError(
                "The applied patches are no longer the first patches of series (series was edited while they were applied).",
                hint=f"Applied: {', '.join(applied)}. Restore series, or remove .imgquilt/state and .imgquilt/work to start over.",
            )
        return applied

    def need_top(self) -> str:
        top = self.top()
        if top is None:
            raise UsageError("No patch is applied.", hint="`imgquilt push` one, or create one with `imgquilt new NAME`.")
        return top

    # --- contents -----------------------------------------------------------------------
    def file_index(self, applied: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        """Over the applied stack: (named path -> resolved file, resolved file -> its work-tree location).

        Two names of one image file (`lib/x` through a symlink, `usr/lib/x`) share one work copy, kept
        at the name the lowest applied patch used, as the container would see one file.
        """
        named: dict[str, str] = {}
        where: dict[str, str] = {}
        for name in applied:
            for t in self.snapshot(name):
                named[t.path] = t.resolved
                where.setdefault(t.resolved, t.path)
        return named, where

    def location(self, path: str, applied: list[str] | None = None) -> str:
        """Where in work/ the content of `path` lives (another name of the same file, if one is tracked)."""
        named, where = self.file_index(self.applied() if applied is None else applied)
        return where.get(named.get(path, path), path)

    def current(self, paths: list[str], applied: list[str] | None = None, *, keep: bool = True,
                links: Collection[str] = ()) -> dict[str, FileState]:
        """What each path holds now: the work copy if an applied patch tracks its file, else the image's.
        `links`: paths read as themselves (a symlink is not followed; the work tree holds regular files only)."""
        named, where = self.file_index(self.applied() if applied is None else applied)
        untracked = [p for p in paths if p not in named]
        as_link = set(links)
        seeded = self.bases.read(untracked, keep=keep, links=[p for p in untracked if p in as_link]) if untracked else {}
        out: dict[str, FileState] = {}
        for p in paths:
            resolved = named.get(p) or seeded[p].resolved or p
            if resolved in where:
                st = self.read_work(where[resolved])
                out[p] = FileState(st.data, st.mode, resolved)
                continue
            out[p] = seeded[p]
            stray = self.read_work(p)
            if stray.data is not None and stray.data != seeded[p].data:
                raise UsageError(
                    f"{self.work / p} is tracked by no applied patch and differs from the image's {p}.",
                    hint="Move it aside (its base is read from the image), then `imgquilt add` the path and copy your edit back.",
                )
        return out

    def blob(self, sha: str, *, what: str) -> bytes | None:
        """Snapshot bytes from the object store (None for "absent")."""
        found, data = self.store.get_or_absent(sha)
        if not found:
            raise BadInput(
                f"The saved bytes of {what} (sha256 {sha}) are missing from .imgquilt/objects.",
                hint="The work-tree state is damaged: `imgquilt pop -f` what you can, or remove .imgquilt/state and .imgquilt/work.",
            )
        return data

    def track(self, path: str, st: FileState) -> Tracked:
        """A snapshot entry for `path` as it is now; its bytes go to the object store for pop to restore."""
        if st.data is not None:
            self.store.put(st.data)
        from ..queue.hunks import sha256_hex

        return Tracked(path, sha256_hex(st.data), st.mode, st.resolved or path)

    # --- the patch as the work tree says it is ---------------------------------------------
    def compute(self, name: str) -> tuple[Patch, Patch]:
        """(patch as on disk, patch as the work tree says it should be now)."""
        return _refresh.compute(self, name)

    def unrefreshed(self, name: str) -> list[str]:
        """Paths whose content after patch `name` is not what the patch file says (hashes only, no diff)."""
        return _refresh.unrefreshed(self, name)

    # --- commands -----------------------------------------------------------------------
    def select_profile(self, name: str | None, *, pop: bool = False) -> list[str]:
        return _series_edit.select_profile(self, name, pop=pop)

    def set_guards(self, name: str | None, guards: list[str], *,
                   new_guard: bool = False) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        return _series_edit.set_guards(self, name, guards, new_guard=new_guard)

    def new(self, name: str, header: Header, guards: tuple[str, ...] = (), *, new_guard: bool = False) -> Patch:
        return _series_edit.new(self, name, header, guards, new_guard=new_guard)

    def delete(self, name: str | None = None, *, remove: bool = False, force: bool = False) -> str:
        return _series_edit.delete(self, name, remove=remove, force=force)

    def rename(self, new: str, old: str | None = None) -> tuple[str, list[str]]:
        return _series_edit.rename(self, new, old)

    def move(self, name: str, *, after: str | None = None, before: str | None = None, top: bool = False,
             python_check: bool = True) -> _series_edit.Moved:
        return _series_edit.move(self, name, after=after, before=before, top=top, python_check=python_check)

    def add(self, paths: list[str], *, new: bool = False) -> tuple[str, list[str], list[str]]:
        return _track.add(self, paths, new=new)

    def fold(self, data: bytes, *, strip: int = 1, source: str = "<stdin>", check_git_index: bool = True) -> tuple[str, list[str], list[str]]:
        return _track.fold(self, data, strip=strip, source=source, check_git_index=check_git_index)

    def refresh(self, name: str | None = None, *, python_check: bool = True) -> _refresh.Refreshed:
        return _refresh.refresh(self, name, python_check=python_check)

    def diff(self, name: str | None = None) -> Patch:
        return _refresh.diff(self, name)

    def diff_unrefreshed(self, name: str | None = None) -> Patch:
        return _unrefreshed.diff_unrefreshed(self, name)

    def revert(self, paths: list[str]) -> tuple[str, list[str]]:
        return _unrefreshed.revert(self, paths)

    def remove(self, paths: list[str]) -> tuple[str, list[str]]:
        return _unrefreshed.remove(self, paths)

    def files_of(self, name: str | None = None) -> tuple[str, list[str]]:
        return _unrefreshed.files(self, name)

    def next(self) -> str | None:
        """The next patch to push (None when every patch is applied)."""
        return _unrefreshed.neighbour(self, 1)

    def previous(self) -> str | None:
        """The patch below the top (None with fewer than two applied)."""
        return _unrefreshed.neighbour(self, -1)

    def push(self, target: str | None = None, *, all: bool = False, count: int | None = None) -> list[_push.Pushed]:
        return _push.push(self, target, all=all, count=count)

    def pop(self, target: str | None = None, *, all: bool = False, count: int | None = None, force: bool = False) -> list[str]:
        return _pop.pop(self, target, all=all, count=count, force=force)

    def header(self, name: str | None = None) -> tuple[str, Header]:
        return _header.header(self, name)

    def set_header(self, name: str, header: Header) -> Patch:
        return _header.set_header(self, name, header)

    def set_fields(self, name: str | None, changes: list[tuple[str, str | None]]) -> Patch:
        return _header.set_fields(self, name, changes)

    def import_patches(
        self,
        items: list[_importing.ImportItem],
        *,
        fields: list[tuple[str, str | None]] = (),  # type: ignore[assignment]
        replace: bool = False,
        check_git_index: bool = True,
        fuzz: int = 0,
        prefix: str = "",
        after: str | None = None,
        before: str | None = None,
        through_links: bool = False,
        placed: list[_importing.Placement] | None = None,
        guard_others: dict[str, tuple[str, ...]] | None = None,
    ) -> list[_importing.Imported]:
        return _importing.import_patches(self, items, fields=fields, replace=replace, check_git_index=check_git_index, fuzz=fuzz,
                                         prefix=prefix, after=after, before=before, through_links=through_links, placed=placed,
                                         guard_others=guard_others)
