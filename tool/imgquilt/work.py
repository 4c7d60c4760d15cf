"""The quilt workflow over a work tree of the target files.

Everything lives in the queue's `.imgquilt/` (local state, never committed; it ignores itself):

    work/<path>            the target files at their image paths, as the patches name them
    state/applied          the applied patches, bottom first, one a line (quilt's .pc/applied-patches)
    state/pc/<name>.json   per applied patch: every file it tracks, with the sha256 and mode the file had
                           before the patch (quilt's .pc/<patch>/ backups); <name> is %-quoted
    state/image            the last --image bases were read from (used when there is no targets.lock)
    state/lock             flock'ed while a command changes the work tree
    objects/ab/<sha256>    the object store (store.py): snapshot bytes and every base read

Rules:
  * A file is in work/ exactly while an applied patch tracks it. The first time a path is needed
    (push, add, edit, fold, import), its current content is its base in the image: read from
    `--image` when given, else from the object store by the sha256 targets.lock pins for the path,
    else from the lock's image, else from the last --image this work tree used. A base is never
    looked up by the hash a patch *wants*: that would hide drift.
  * Two names of one image file (`lib/x` through a symlink and `usr/lib/x`) share one work copy,
    at the name the lowest applied patch used, as the container sees one file.
  * `new` and `import` insert after the top patch (at the start of series when none is applied),
    as quilt does; import reads its bases at that point (the work tree, else the image).
  * `push` verifies every base hash, applies in memory, verifies every result hash, and only then
    writes: snapshot (object store + pc/<name>.json), the applied list, then the files.
  * `refresh` rewrites a patch from snapshot -> current bytes with make_section, keeping the header
    and every unchanged section byte for byte; sections without a change are dropped; a new file
    whose work copy is executable gets `Mode:` with its permission bits.
  * `pop` refuses while the top patch has changes not refreshed into it (`-f` discards them),
    restores the snapshots and removes files no applied patch tracks any more.
  * Work-tree files are read and written through directory fds with O_NOFOLLOW: a symlink planted
    in work/ is refused, never followed.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import quote

from .engine.hunks import ABSENT, HunkError, apply_hunks, sha256_hex
from .errors import BadInput, BaseDrift, MalformedPatch, Refused, ResultMismatch, UnsafePath, UsageError
from .fs.paths import check_member_path
from .fs.types import Source
from .importer import apply_foreign, parse_foreign
from .queue.lock import Lock, read_lock
from .queue.patchfile import FileSection, Header, Patch, build_patch, make_section, parse_patch
from .queue.series import SeriesEntry, parse_series
from .rootfs.dirfd import lstat_at, open_root, parent_dir, read_at, split
from .store import ObjectStore, remember
from .util.atomic import atomic_write

WORK_DIR = Path(".imgquilt") / "work"
STATE_DIR = Path(".imgquilt") / "state"

SourceOpener = Callable[[], Source]


@dataclass(frozen=True)
class Tracked:
    """A file an applied patch tracks, as it was before the patch."""

    path: str
    sha256: str  # 64 hex, or "absent"
    mode: int | None  # permission bits of the work copy (None: absent)
    resolved: str  # the image file it names (symlinks resolved inside the image)


@dataclass(frozen=True)
class FileState:
    """The content of a path at some point of the applied stack."""

    data: bytes | None
    mode: int | None
    resolved: str | None = None


@dataclass(frozen=True)
class Pushed:
    name: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Refreshed:
    name: str
    patch: Patch
    changed: bool


@dataclass(frozen=True)
class ImportItem:
    """One foreign patch to import under `name`."""

    name: str
    data: bytes
    strip: int = 1
    source: str = "<patch>"


@dataclass(frozen=True)
class Imported:
    name: str
    patch: Patch
    kind: str
    notes: tuple[str, ...] = field(default=())


def check_patch_name(name: str) -> str:
    """A patch name for series and patches/: a safe relative path, no spaces, `#` or hidden parts."""
    bad = not name or any(c.isspace() for c in name) or "#" in name or name.startswith("-")
    if not bad:
        norm = check_member_path(name, what="patch name")
        bad = norm != name or any(p.startswith(".") for p in norm.split("/"))
    if bad:
        raise UsageError(
            f"Unusable patch name {name!r}.",
            hint="Use a relative file name without spaces, `#`, `..` or hidden parts, e.g. 0003-fix-port.patch.",
        )
    return name


def read_queue_patch(data: bytes, name: str) -> Patch:
    """parse_patch, plus the header-only patch `new` writes before its first refresh (no sections)."""
    if not re.search(rb"^(Index: |diff |--- |\+\+\+ |@@ )", data, re.M):
        return Patch(name, Header(data), (), data)
    return parse_patch(data, name)


def check_header(raw: bytes, name: str) -> Header:
    """A header as a user edited it: no diff lines in it, ends with one blank separator line."""
    lines = raw.splitlines(keepends=True)
    for k, ln in enumerate(lines):
        nxt = lines[k + 1] if k + 1 < len(lines) else b""
        if ln.startswith((b"Index: ", b"diff --git ", b"@@ ")) or (ln.startswith(b"--- ") and nxt.startswith(b"+++ ")):
            raise MalformedPatch(
                f"The header of {name} may not hold diff lines ({ln.rstrip()!r}).",
                hint="Edit only the description fields; the diff is written by `imgquilt refresh`.",
            )
    body = raw.rstrip(b"\r\n \t")
    return Header(body + b"\n\n" if body else b"")


class WorkTree:
    """The work tree and applied stack of one queue directory."""

    def __init__(self, root: Path, *, open_image: SourceOpener | None = None, image_explicit: bool = False) -> None:
        self.root = Path(root)
        self.work = self.root / WORK_DIR
        self.state = self.root / STATE_DIR
        self.store = ObjectStore(self.root)
        self._open_image = open_image
        self._image_explicit = image_explicit
        self._source: Source | None = None
        self._snaps: dict[str, list[Tracked]] = {}  # read once per command; every write goes through here

    # --- series and state files ---------------------------------------------------------
    @property
    def series_path(self) -> Path:
        return self.root / "series"

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    def series_bytes(self) -> bytes:
        try:
            return self.series_path.read_bytes()
        except FileNotFoundError:
            return b""

    def entries(self) -> list[SeriesEntry]:
        return parse_series(self.series_bytes(), source=str(self.series_path))

    def series(self) -> list[str]:
        return [e.name for e in self.entries()]

    def applied(self) -> list[str]:
        try:
            text = (self.state / "applied").read_text("utf-8", "surrogateescape")
        except FileNotFoundError:
            return []
        return [ln for ln in text.splitlines() if ln.strip()]

    def top(self) -> str | None:
        applied = self.applied()
        return applied[-1] if applied else None

    def unapplied(self) -> list[str]:
        names = self.series()
        return names[len(self.applied()) :]

    def lock(self) -> Lock | None:
        return read_lock(self.root / "targets.lock")

    def remembered_image(self) -> str | None:
        """The last --image the work tree was seeded from (used when there is no targets.lock)."""
        try:
            return (self.state / "image").read_text().strip() or None
        except FileNotFoundError:
            return None

    def remember_image(self, ref: str) -> None:
        self._ensure_state()
        if self.remembered_image() != ref:
            atomic_write(self.state / "image", (ref + "\n").encode())

    def _ensure_state(self) -> None:
        if not self.state.is_dir():
            self.state.mkdir(parents=True, exist_ok=True)
            ignore = self.root / ".imgquilt" / ".gitignore"
            if not ignore.exists():
                atomic_write(ignore, b"*\n")

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the work-tree lock: one changing command at a time."""
        self._ensure_state()
        fd = os.open(self.state / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError("Another imgquilt command is changing this work tree.", hint="Wait for it to finish, then retry.") from None
            yield
        finally:
            os.close(fd)

    def _write_applied(self, names: list[str]) -> None:
        self._ensure_state()
        atomic_write(self.state / "applied", "".join(n + "\n" for n in names).encode("utf-8", "surrogateescape"))

    def _pc_path(self, name: str) -> Path:
        return self.state / "pc" / (quote(name, safe="") + ".json")

    def snapshot(self, name: str) -> list[Tracked]:
        """The files patch `name` tracks, as they were before it (only for applied patches)."""
        if name not in self._snaps:
            self._snaps[name] = self._read_snapshot(name)
        return list(self._snaps[name])

    def _read_snapshot(self, name: str) -> list[Tracked]:
        try:
            doc = json.loads(self._pc_path(name).read_text())
        except FileNotFoundError:
            return []
        except (ValueError, OSError) as exc:
            raise BadInput(f"Work-tree state of {name} cannot be read: {exc}.", hint="Remove .imgquilt/state and .imgquilt/work to start over.") from None
        return [
            Tracked(f["path"], f["sha256"], None if f["mode"] is None else int(f["mode"], 8), f.get("resolved") or f["path"])
            for f in doc["files"]
        ]

    def _write_snapshot(self, name: str, files: list[Tracked]) -> None:
        doc = {"patch": name, "files": [
            {"path": t.path, "resolved": t.resolved, "sha256": t.sha256, "mode": None if t.mode is None else f"{t.mode:04o}"} for t in files
        ]}
        self._pc_path(name).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self._pc_path(name), (json.dumps(doc, indent=1) + "\n").encode())
        self._snaps[name] = list(files)

    def _drop_snapshot(self, name: str) -> None:
        self._snaps.pop(name, None)
        try:
            self._pc_path(name).unlink()
        except FileNotFoundError:
            pass

    def _series_lines(self) -> list[str]:
        return self.series_bytes().decode("utf-8", "surrogateescape").splitlines(keepends=True)

    def _write_series_lines(self, lines: list[str]) -> None:
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        atomic_write(self.series_path, "".join(lines).encode("utf-8", "surrogateescape"))

    def _insert_series(self, names: list[str], after: str | None) -> None:
        """Insert names after `after` (None: before the first patch), keeping comments and options."""
        lines = self._series_lines()
        entries = self.entries()
        if after is not None:
            at = next(e.line for e in entries if e.name == after)
        else:
            at = entries[0].line - 1 if entries else len(lines)
        if at > 0 and not lines[at - 1].endswith(("\n", "\r")):
            lines[at - 1] += "\n"
        lines[at:at] = [n + "\n" for n in names]
        self._write_series_lines(lines)

    def _remove_series(self, name: str) -> None:
        lines = self._series_lines()
        entry = next(e for e in self.entries() if e.name == name)
        del lines[entry.line - 1]
        self._write_series_lines(lines)

    def _rename_series(self, old: str, new: str) -> None:
        lines = self._series_lines()
        entry = next(e for e in self.entries() if e.name == old)
        line = lines[entry.line - 1]
        k = line.index(old)
        lines[entry.line - 1] = line[:k] + new + line[k + len(old) :]
        self._write_series_lines(lines)

    def _consistent(self) -> list[str]:
        """The applied list, checked to be the head of series."""
        applied = self.applied()
        names = self.series()
        if names[: len(applied)] != applied:
            raise UsageError(
                "The applied patches are no longer the first patches of series (series was edited while they were applied).",
                hint=f"Applied: {', '.join(applied)}. Restore series, or remove .imgquilt/state and .imgquilt/work to start over.",
            )
        return applied

    def read_patch(self, name: str) -> Patch:
        try:
            data = (self.patches_dir / name).read_bytes()
        except FileNotFoundError:
            raise BadInput(f"Patch file patches/{name} does not exist.", hint="Restore it, or `imgquilt delete` it from series.") from None
        return read_queue_patch(data, name)

    def _write_patch(self, patch: Patch) -> None:
        dest = self.patches_dir / patch.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, patch.raw)

    # --- work-tree files ----------------------------------------------------------------
    def work_path(self, path: str) -> Path:
        return self.work / check_member_path(path)

    def read_work(self, path: str) -> FileState:
        if not self.work.is_dir():
            return FileState(None, None)
        fd = open_root(self.work)
        try:
            st = lstat_at(fd, path)
            if st is None:
                return FileState(None, None)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePath(
                    f"Work-tree file {path!r} is not a regular file (a symlink or directory); imgquilt does not follow it.",
                    hint=f"Replace {self.work / path} with a regular file.",
                )
            return FileState(read_at(fd, path), stat.S_IMODE(st.st_mode))
        finally:
            os.close(fd)

    def _write_work(self, path: str, data: bytes | None, mode: int | None) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        fd = open_root(self.work)
        try:
            if data is None:
                self._unlink_work(fd, path)
                return
            with parent_dir(fd, path, create=True) as (dfd, name):
                tmp = f".{name}.imgquilt-tmp"
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(wfd, view) :]
                    os.fchmod(wfd, (mode if mode is not None else 0o644) & 0o777)
                    os.fsync(wfd)
                    os.close(wfd)
                    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                except BaseException:
                    try:
                        os.close(wfd)
                    except OSError:
                        pass
                    try:
                        os.unlink(tmp, dir_fd=dfd)
                    except FileNotFoundError:
                        pass
                    raise
        finally:
            os.close(fd)

    def _make_parents(self, path: str) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        fd = open_root(self.work)
        try:
            with parent_dir(fd, path, create=True):
                pass
        finally:
            os.close(fd)

    def _unlink_work(self, fd: int, path: str) -> None:
        parents, _ = split(path)
        try:
            with parent_dir(fd, path) as (dfd, name):
                os.unlink(name, dir_fd=dfd)
        except (FileNotFoundError, NotADirectoryError):
            pass
        for k in range(len(parents), 0, -1):  # drop directories left empty
            try:
                with parent_dir(fd, "/".join(parents[:k])) as (dfd, name):
                    os.rmdir(name, dir_fd=dfd)
            except OSError:
                break

    # --- contents -----------------------------------------------------------------------
    def _blob(self, sha: str, *, what: str) -> bytes | None:
        if sha == ABSENT:
            return None
        data = self.store.get(sha)
        if data is None:
            raise BadInput(
                f"The saved bytes of {what} (sha256 {sha}) are missing from .imgquilt/objects.",
                hint="The work-tree state is damaged: `imgquilt pop -f` what you can, or remove .imgquilt/state and .imgquilt/work.",
            )
        return data

    def _index(self, applied: list[str]) -> tuple[dict[str, str], dict[str, str]]:
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
        named, where = self._index(self.applied() if applied is None else applied)
        return where.get(named.get(path, path), path)

    def _image(self) -> Source:
        if self._source is None:
            if self._open_image is None:
                raise UsageError(
                    "A base must be read from the image, but no image is known.",
                    hint="Pass --image REF, or pin one with `imgquilt lock --image REF`.",
                )
            self._source = self._open_image()
        return self._source

    def seed(self, paths: list[str]) -> dict[str, FileState]:
        """The image's content of paths no applied patch tracks (object store by the lock's pin, else the image)."""
        out: dict[str, FileState] = {}
        need: list[str] = []
        lock = None if self._image_explicit else self.lock()
        for p in paths:
            t = lock.target(p) if lock is not None else None
            if t is not None:
                if t.base_sha256 == ABSENT:
                    out[p] = FileState(None, None, t.resolved)
                    continue
                data = self.store.get(t.base_sha256)
                if data is not None:
                    out[p] = FileState(data, t.mode & 0o777, t.resolved)
                    continue
            need.append(p)
        if need:
            targets = self._image().read_targets(need)
            for p in need:
                tf = targets[p]
                out[p] = FileState(tf.data, None if tf.data is None else tf.mode & 0o777, tf.resolved)
            remember(self.root, [targets[p].data for p in need])
        return out

    def current(self, paths: list[str], applied: list[str] | None = None) -> dict[str, FileState]:
        """What each path holds now: the work copy if an applied patch tracks its file, else the image's."""
        named, where = self._index(self.applied() if applied is None else applied)
        untracked = [p for p in paths if p not in named]
        seeded = self.seed(untracked) if untracked else {}
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

    def _after(self, applied: list[str], index: int, t: Tracked) -> FileState:
        """The content of t's file right after applied[index]: the next snapshot above it, else the work copy."""
        for name in applied[index + 1 :]:
            for u in self.snapshot(name):
                if u.resolved == t.resolved:
                    return FileState(self._blob(u.sha256, what=f"{u.path} before {name}"), u.mode, u.resolved)
        return self.read_work(self.location(t.path, applied))

    # --- computing a patch from the work tree ---------------------------------------------
    def compute(self, name: str) -> tuple[Patch, Patch]:
        """(patch as on disk, patch as the work tree says it should be now)."""
        applied = self._consistent()
        if name not in applied:
            raise UsageError(f"Patch {name} is not applied.", hint=f"`imgquilt push {name}` first.")
        patch = self.read_patch(name)
        snap = self.snapshot(name)
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
            old = self._blob(t.sha256, what=f"{path} before {name}")
            now = self._after(applied, index, t)
            if sha256_hex(old) == sha256_hex(now.data):
                continue
            mode = None
            if old is None and now.data is not None and now.mode is not None and now.mode & 0o111:
                mode = now.mode
            s0 = existing.get(path)
            if s0 is not None and (s0.base_sha256, s0.patched_sha256, s0.mode if old is None else None) == (t.sha256, sha256_hex(now.data), mode):
                sections.append(s0)  # unchanged: keep its bytes (and any extra fields)
            else:
                sections.append(make_section(path, old, now.data, mode))
        return patch, build_patch(name, patch.header, sections)

    def unrefreshed(self, name: str) -> list[str]:
        """Paths whose content after patch `name` is not what the patch file says (hashes only, no diff)."""
        applied = self._consistent()
        if name not in applied:
            return []
        patch = self.read_patch(name)
        sections = {s.path: s for s in patch.sections}
        snap = self.snapshot(name)
        index = applied.index(name)
        dirty = [s for s in sections if s not in {t.path for t in snap}]
        for t in snap:
            want = sections[t.path].patched_sha256 if t.path in sections else t.sha256
            if sha256_hex(self._after(applied, index, t).data) != want:
                dirty.append(t.path)
        return sorted(dirty)

    # --- commands -----------------------------------------------------------------------
    def new(self, name: str, header: Header) -> Patch:
        """Create patches/NAME (header only), insert it after the top patch and make it the top."""
        check_patch_name(name)
        with self.locked():
            applied = self._consistent()
            if name in self.series():
                raise UsageError(f"Patch {name} is already in series.", hint="Pick another name.")
            if (self.patches_dir / name).exists():
                raise UsageError(f"patches/{name} already exists (not in series).", hint="Import it with `imgquilt import`, or pick another name.")
            raw = check_header(header.raw, name).raw
            patch = Patch(name, Header(raw), (), raw)
            self._write_patch(patch)
            if not self.series_path.exists():
                atomic_write(self.series_path, b"")
            self._insert_series([name], applied[-1] if applied else None)
            self._write_snapshot(name, [])
            self._write_applied(applied + [name])
            return patch

    def _need_top(self) -> str:
        top = self.top()
        if top is None:
            raise UsageError("No patch is applied.", hint="`imgquilt push` one, or create one with `imgquilt new NAME`.")
        return top

    def add(self, paths: list[str]) -> tuple[str, list[str], list[str]]:
        """Track files in the top patch: snapshot their current content. Returns (top, added, already)."""
        with self.locked():
            applied = self._consistent()
            top = self._need_top()
            norm = list(dict.fromkeys(check_member_path(p, what="file to add") for p in paths))
            snap = self.snapshot(top)
            have = {t.path for t in snap}
            fresh = [p for p in norm if p not in have]
            cur = self.current(fresh, applied)
            self._one_name_per_file(top, snap, {p: cur[p] for p in fresh})
            _, where = self._index(applied)
            for p in fresh:
                st = cur[p]
                if st.data is not None:
                    self.store.put(st.data)
                    if st.resolved not in where:
                        self._write_work(p, st.data, st.mode)
                elif st.resolved not in where:
                    self._make_parents(p)  # so the new file can be created right there
                snap.append(Tracked(p, sha256_hex(st.data), st.mode, st.resolved or p))
            self._write_snapshot(top, snap)
            return top, fresh, [p for p in norm if p in have]

    def _one_name_per_file(self, name: str, snap: list[Tracked], fresh: dict[str, FileState]) -> None:
        seen = {t.resolved: t.path for t in snap}
        for p, st in fresh.items():
            r = st.resolved or p
            if r in seen and seen[r] != p:
                raise UsageError(
                    f"{p} and {seen[r]} are the same file in the image ({r}); patch {name} can name it only one way.",
                    hint=f"Use {seen[r]}.",
                )
            seen[r] = p

    def refresh(self, name: str | None = None) -> Refreshed:
        with self.locked():
            name = name or self._need_top()
            disk, now = self.compute(name)
            if now.raw != disk.raw:
                self._write_patch(now)
            remember(self.root, [self.read_work(self.location(s.path)).data for s in now.sections])
            return Refreshed(name, now, now.raw != disk.raw)

    def _plan_push(self, name: str, applied: list[str]) -> tuple[Patch, dict[str, FileState], dict[str, FileState]]:
        patch = self.read_patch(name)
        cur = self.current(patch.paths, applied)
        self._one_name_per_file(name, [], cur)
        named, where = self._index(applied)
        results: dict[str, FileState] = {}
        problems: list[str] = []
        kinds: set[type] = set()
        top = applied[-1] if applied else None
        for s in patch.sections:
            st = cur[s.path]
            actual = sha256_hex(st.data)
            if actual != s.base_sha256:
                if st.resolved in where:
                    dirty = self.unrefreshed(top) if top is not None else []
                    if any(named.get(d) == st.resolved for d in dirty):
                        why = f"it has changes not refreshed into {top}: `imgquilt refresh` first"
                    else:
                        why = "the work copy is what the patches below left; the series chain is broken here (`imgquilt check`)"
                else:
                    why = "the image differs from the patch's base: pass the right --image, or `imgquilt rebase --image REF`"
                where_txt = s.path if (st.resolved or s.path) == s.path else f"{s.path} (resolved: {st.resolved})"
                problems.append(f"{name}: {where_txt}: base drifted: expected sha256 {s.base_sha256}, found {actual} ({why}).")
                kinds.add(BaseDrift)
                continue
            try:
                new = apply_hunks(st.data or b"", s.hunks)
            except HunkError as exc:
                problems.append(f"{name}: {s.path}: base matches ({actual}) but {exc}; regenerate the patch.")
                kinds.add(MalformedPatch)
                continue
            result = None if s.is_delete else new
            got = sha256_hex(new) if (s.is_delete and new) else sha256_hex(result)
            if got != s.patched_sha256:
                problems.append(f"{name}: {s.path}: the result is not the pinned one: expected sha256 {s.patched_sha256}, got {got}.")
                kinds.add(ResultMismatch)
                continue
            mode = s.mode if (s.is_new and s.mode is not None) else (st.mode if st.mode is not None else 0o644)
            results[s.path] = FileState(result, None if result is None else mode & 0o777, st.resolved)
        if problems:
            cls = next(iter(kinds)) if len(kinds) == 1 else Refused
            raise cls(
                f"Refused: cannot push {name}; nothing was changed.\n" + "\n".join(f"  - {p}" for p in problems),
                hint="Fix what is named above, then push again.",
            )
        return patch, cur, results

    def _push_one(self, name: str, applied: list[str]) -> Pushed:
        patch, cur, results = self._plan_push(name, applied)
        _, where = self._index(applied)
        snap = []
        for s in patch.sections:
            st = cur[s.path]
            if st.data is not None:
                self.store.put(st.data)
            snap.append(Tracked(s.path, sha256_hex(st.data), st.mode, st.resolved or s.path))
        remember(self.root, [r.data for r in results.values()])
        self._write_snapshot(name, snap)
        self._write_applied(applied + [name])
        for s in patch.sections:
            r, before = results[s.path], cur[s.path]
            loc = where.get(before.resolved or s.path, s.path)
            if before.resolved not in where or (r.data, r.mode) != (before.data, before.mode):
                self._write_work(loc, r.data, r.mode)
        return Pushed(name, tuple(patch.paths))

    def push(self, target: str | None = None, *, all: bool = False, count: int | None = None) -> list[Pushed]:
        """Apply the next patch (or up to and including `target`, `count` patches, or all)."""
        with self.locked():
            applied = self._consistent()
            rest = self.series()[len(applied) :]
            if not rest:
                raise UsageError(
                    "The series is fully applied" + (f", ending at {applied[-1]}." if applied else " (it is empty)."),
                    hint="Nothing to push.",
                )
            if target is not None:
                if target not in rest:
                    where = "already applied" if target in applied else "not in series"
                    raise UsageError(f"Patch {target} is {where}.")
                todo = rest[: rest.index(target) + 1]
            elif all:
                todo = rest
            else:
                todo = rest[: max(1, count or 1)]
            done: list[Pushed] = []
            for name in todo:
                try:
                    done.append(self._push_one(name, applied))
                except Refused as exc:
                    exc.pushed = done  # type: ignore[attr-defined]
                    raise
                applied = applied + [name]
            return done

    def _pop_one(self, applied: list[str], force: bool) -> tuple[str, list[str]]:
        top = applied[-1]
        if not force:
            dirty = self.unrefreshed(top)
            if dirty:
                raise Refused(
                    f"Refused: {top} has changes not refreshed into it: {', '.join(dirty)}. Nothing was changed.",
                    hint="`imgquilt refresh` to keep them, or `imgquilt pop -f` to discard them.",
                )
        snap = self.snapshot(top)
        _, where = self._index(applied)
        _, below = self._index(applied[:-1])
        restored: list[str] = []
        for t in snap:
            loc = where.get(t.resolved, t.path)
            if t.resolved in below:
                data = self._blob(t.sha256, what=f"{t.path} before {top}")
                now = self.read_work(loc)
                if now.data != data or (data is not None and now.mode != t.mode):
                    self._write_work(loc, data, t.mode)
            else:
                self._write_work(loc, None, None)
            restored.append(t.path)
        self._write_applied(applied[:-1])
        self._drop_snapshot(top)
        return top, restored

    def pop(self, target: str | None = None, *, all: bool = False, count: int | None = None, force: bool = False) -> list[str]:
        """Unapply the top patch (or until `target` is the top, `count` patches, or all)."""
        with self.locked():
            applied = self._consistent()
            if not applied:
                raise UsageError("No patch is applied.", hint="Nothing to pop.")
            if target is not None:
                if target not in applied:
                    raise UsageError(f"Patch {target} is not applied.")
                n = len(applied) - applied.index(target) - 1
            elif all:
                n = len(applied)
            else:
                n = max(1, count or 1)
            popped: list[str] = []
            for _ in range(min(n, len(applied))):
                name, _ = self._pop_one(applied, force)
                popped.append(name)
                applied = applied[:-1]
            return popped

    def diff(self, name: str | None = None) -> Patch:
        """The patch as the work tree says it is now (snapshot -> current), without writing it."""
        name = name or self._need_top()
        return self.compute(name)[1]

    def header(self, name: str | None = None) -> tuple[str, Header]:
        name = name or self._need_top()
        if name not in self.series():
            raise UsageError(f"Patch {name} is not in series.")
        return name, self.read_patch(name).header

    def set_header(self, name: str, header: Header) -> Patch:
        with self.locked():
            patch = self.read_patch(name)
            new = build_patch(name, check_header(header.raw, name), patch.sections)
            if new.raw != patch.raw:
                self._write_patch(new)
            return new

    def set_fields(self, name: str | None, changes: list[tuple[str, str | None]]) -> Patch:
        name, header = self.header(name)
        for key, value in changes:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", key) or key in ("Index", "Base-SHA256", "Patched-SHA256"):
                raise UsageError(f"Unusable header field name {key!r}.")
            header = header.with_field(key, value)
        return self.set_header(name, header)

    def delete(self, name: str | None = None, *, remove: bool = False, force: bool = False) -> str:
        with self.locked():
            applied = self._consistent()
            name = name or self._need_top()
            if name not in self.series():
                raise UsageError(f"Patch {name} is not in series.")
            if name in applied:
                if name != applied[-1]:
                    raise UsageError(f"Patch {name} is applied below the top.", hint=f"Pop to it first: `imgquilt pop {name}`, then `imgquilt pop`.")
                self._pop_one(applied, force)
            self._remove_series(name)
            if remove:
                try:
                    (self.patches_dir / name).unlink()
                except FileNotFoundError:
                    pass
            return name

    def rename(self, new: str, old: str | None = None) -> tuple[str, list[str]]:
        """Rename a patch everywhere: patches/, series, the applied state and other patches' Requires."""
        check_patch_name(new)
        with self.locked():
            applied = self._consistent()
            old = old or self._need_top()
            names = self.series()
            if old not in names:
                raise UsageError(f"Patch {old} is not in series.")
            if new in names or (self.patches_dir / new).exists():
                raise UsageError(f"Patch {new} already exists.", hint="Pick another name.")
            patch = self.read_patch(old)
            self._write_patch(Patch(new, patch.header, patch.sections, patch.raw))
            self._rename_series(old, new)
            if old in applied:
                self._write_snapshot(new, self.snapshot(old))
                self._drop_snapshot(old)
                self._write_applied([new if n == old else n for n in applied])
            (self.patches_dir / old).unlink()
            touched = []
            token = re.compile(r"(?<![^\s,])" + re.escape(old) + r"(?![^\s,])")
            for other in self.series():
                if other == new:
                    continue
                try:
                    p = self.read_patch(other)
                except BadInput:
                    continue
                if old in p.header.requires:
                    value = token.sub(new, p.header.get("Requires") or "")
                    self._write_patch(build_patch(other, p.header.with_field("Requires", value), p.sections))
                    touched.append(other)
            return old, touched

    def fold(self, data: bytes, *, strip: int = 1, source: str = "<stdin>", check_git_index: bool = True) -> tuple[str, list[str], list[str]]:
        """Apply a plain patch to the top patch's files (adding them); the patch then needs a refresh."""
        with self.locked():
            applied = self._consistent()
            top = self._need_top()
            fp = parse_foreign(data, source)
            cache: dict[str, FileState] = {}

            def read(path: str, _want: str | None) -> bytes | None:
                if path not in cache:
                    cache.update(self.current([path], applied))
                return cache[path].data

            conv = apply_foreign(fp, strip, read, label=source, check_git_index=check_git_index)
            snap = self.snapshot(top)
            have = {t.path for t in snap}
            changed = {c.path for c in conv.changes}
            fresh = {p: st for p, st in cache.items() if p in changed and p not in have}
            self._one_name_per_file(top, snap, fresh)
            for path, st in fresh.items():
                if st.data is not None:
                    self.store.put(st.data)
                snap.append(Tracked(path, sha256_hex(st.data), st.mode, st.resolved or path))
            _, where = self._index(applied)
            self._write_snapshot(top, snap)
            for c in conv.changes:
                st = cache[c.path]
                mode = st.mode if st.mode is not None else (c.mode or 0o644)
                self._write_work(where.get(st.resolved or c.path, c.path), c.result, mode)
            return top, [c.path for c in conv.changes], conv.notes

    def import_patches(
        self,
        items: list[ImportItem],
        *,
        fields: list[tuple[str, str | None]] = (),  # type: ignore[assignment]
        replace: bool = False,
        check_git_index: bool = True,
    ) -> list[Imported]:
        """Turn foreign patches into imgquilt patches inserted after the top patch, bases from the work tree or image."""
        with self.locked():
            applied = self._consistent()
            names = self.series()
            seen: set[str] = set()
            for it in items:
                check_patch_name(it.name)
                if it.name in seen:
                    raise UsageError(f"Two imported patches would be named {it.name}.", hint="Name them with -P, one file at a time.")
                seen.add(it.name)
                if it.name in applied:
                    raise UsageError(f"Patch {it.name} is applied; it cannot be replaced.", hint="Pop it first.")
                if (it.name in names or (self.patches_dir / it.name).exists()) and not replace:
                    raise UsageError(f"Patch {it.name} already exists.", hint="Pass -f to replace it, or -P to import under another name.")
            overlay: dict[str, bytes | None] = {}

            def read(path: str, _want: str | None) -> bytes | None:
                if path not in overlay:
                    overlay[path] = self.current([path], applied)[path].data
                return overlay[path]

            out: list[Imported] = []
            for it in items:
                fp = parse_foreign(it.data, it.source)
                conv = apply_foreign(fp, it.strip, read, label=it.source, check_git_index=check_git_index)
                if not conv.changes:
                    raise BadInput(f"{it.source} changes nothing in these files.", hint="Nothing to import.")
                header = Header(fp.header)
                for key, value in fields:
                    header = header.with_field(key, value)
                sections = [make_section(c.path, c.base, c.result, c.mode) for c in conv.changes]
                patch = build_patch(it.name, header, sections)
                parse_patch(patch.raw, it.name)  # what we write must read back
                for c in conv.changes:
                    overlay[c.path] = c.result
                remember(self.root, [c.base for c in conv.changes] + [c.result for c in conv.changes])
                out.append(Imported(it.name, patch, fp.kind, tuple(conv.notes)))
            for imp in out:
                self._write_patch(imp.patch)
            if not self.series_path.exists():
                atomic_write(self.series_path, b"")
            fresh = [imp.name for imp in out if imp.name not in names]
            if fresh:
                self._insert_series(fresh, applied[-1] if applied else None)
            return out
