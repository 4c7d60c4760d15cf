"""Where the image's interpreter finds a module: its search path for a patched file, and the files it
would try, in CPython's order (importlib's FileFinder).

The search path (decided here, documented in docs/boot-checks.md):
- a file under a `site-packages` or `dist-packages` directory belongs to the interpreter that has that
  directory on sys.path. Its search path is that directory, and for a Debian layout
  (`usr/local/lib/pythonX.Y/dist-packages`, `usr/lib/python3/dist-packages`,
  `usr/lib/pythonX.Y/dist-packages`) all three, in that order, as Debian's site.py puts them;
- any other file belongs to the package tree it sits in: the first directory up from it without an
  `__init__.py` is where its absolute imports are looked for (as `python -m pkg.mod` run there would
  have it); its relative imports go by directories (the root is searched too, so a tree of namespace
  packages resolves), and none is ever said to climb above its top package;
- the standard library is never searched: a module whose top-level name is one of the running
  Python's `sys.stdlib_module_names` is not checked (it changes with a Python upgrade, not a package
  one, and it lives in the image's lowest layer, which a check should not have to read).

In a directory D, a module `n` is (FileFinder's order): the package `D/n/` with an `__init__` (an
extension module, then `.py`, then `.pyc`), else the module `D/n` + an extension suffix, `.py`,
`.pyc`, else, when `D/n/` is a directory, a portion of a namespace package.

Reads go through `ModuleFiles`, which the caller provides over its Source, with the patched files'
own bytes in front of the image's. A lookup may be lazy: it reads down only until one candidate is
found, and what it has not read is UNKNOWN. A lazy answer is used only to say that a name IS there;
a finding (a name or module that is NOT there) is only reported after the same resolution ran again
with every lookup settled (`settle=True`: read as deep as needed to decide every candidate).
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import AbstractSet as Set, Mapping, Protocol, Sequence

from ..errors import BadImage, BadInput, ImgquiltError, UnsafePath
from ..fs.content import Data, held, in_memory_max
from ..fs.types import DirListing, HasRootDir, ListsDirs, LocatesFiles, Located, PeeksTargets, ReadsFirst, Source, TargetFile

FILE, ABSENT, UNKNOWN = "file", "absent", "unknown"
MODULE_CAP = 8 << 20  # a module file larger than this is not parsed: "cannot tell"
KEEP_BUDGET = 64 << 20  # bytes of .py files an image source keeps as it reads layers (modules looked up next)

_ARCHES = {
    "amd64": ("x86_64-linux-gnu", "x86_64-linux-musl"),
    "arm64": ("aarch64-linux-gnu", "aarch64-linux-musl"),
    "ppc64le": ("powerpc64le-linux-gnu",),
    "s390x": ("s390x-linux-gnu",),
    "386": ("i386-linux-gnu",),
    "arm": ("arm-linux-gnueabihf", "arm-linux-gnueabi"),
    "riscv64": ("riscv64-linux-gnu",),
}
_VERSIONS = tuple(f"3{m}" for m in range(8, 16))


@dataclass(frozen=True)
class Look:
    """What is at one path: a file (its bytes; None when over MODULE_CAP), nothing, or not known yet;
    and the directories that exist on its way (resolved, root first)."""

    kind: str  # FILE | ABSENT | UNKNOWN
    data: bytes | None = None
    resolved: str = ""
    dirs: tuple[str, ...] = ()
    too_large: bool = False


class ModuleFiles(Protocol):
    """The files of the image the check reads, the patched files' bytes first."""

    def look(self, paths: Sequence[str], *, settle: bool) -> dict[str, Look]:
        """Each path's Look. settle=False may leave paths UNKNOWN once one of them is a FILE."""
        ...

    def platform(self) -> str | None: ...


class SourceModules:
    """The files of a Source as the check reads them: `view(overlay)` is a ModuleFiles with `overlay`
    (resolved path -> bytes, None: deleted) in front of the source; views share what was read.

    Lazy lookups use the source's `read_first` (reads layers down until one path is a file) or, without
    it, `peek_targets`; a settled lookup is `read_targets`. A rootfs has neither: every lookup is settled.
    A source that `locate`s (an image) is asked that instead, with the same laziness: a `.py` module is
    read, an extension module or a pyc only located (its bytes never read, spooled or stored).
    """

    def __init__(self, source: Source, *, cap: int = MODULE_CAP) -> None:
        self.source = source
        self.cap = cap
        self._settled: dict[str, TargetFile | None] = {}  # None: refused (a directory, a loop): no file
        self._lazy: dict[str, TargetFile] = {}
        self.reads = 0  # paths asked of the source (tests and the bench count them)
        self._platform: tuple[str | None] | None = None
        # a tree on this machine lists a directory exactly and cheaply: names it does not hold are
        # absent without a lookup each (a module search tries dozens of names per directory)
        self._lists = isinstance(source, HasRootDir) and isinstance(source, ListsDirs)
        self._dirs: dict[str, DirListing | None] = {}
        # an image reads a layer whole: have it keep the .py files of the packages looked up in it, so
        # the next module of the package needs no second pass over the layer (bounded: KEEP_BUDGET)
        self._packages: set[str] = set()
        keep = getattr(source, "keep_also", None)
        if callable(keep):
            keep(self._wanted_module, KEEP_BUDGET)

    def view(self, overlay: Mapping[str, bytes | None] | None = None, named: Mapping[str, str] | None = None) -> ModuleFiles:
        """A ModuleFiles over the source with `overlay` in front; `named`: named path -> resolved path
        of overlay files (a target named through a symlinked directory)."""
        return _View(self, dict(overlay or {}), dict(named or {}))

    def platform(self) -> str | None:
        if self._platform is None:
            try:
                self._platform = (self.source.info().platform,)
            except ImgquiltError:
                self._platform = (None,)
        return self._platform[0]

    def _wanted_module(self, path: str) -> bool:
        """A module worth keeping as its layer is read: one of a package looked up, or the top of any
        package of a site directory (`site-packages/torch/__init__.py`, `site-packages/six.py`): the
        patched files' imports are looked up next, and each one not kept would cost another pass
        over a layer the targets' read had just walked."""
        if not path.endswith(".py"):
            return False
        parts = path.split("/")
        if (len(parts) >= 2 and parts[-2] in _SITE_DIRS) or (len(parts) >= 3 and parts[-1] == "__init__.py" and parts[-3] in _SITE_DIRS):
            return True
        return any("/".join(parts[:i]) in self._packages for i in range(1, len(parts)))

    def expect(self, paths: Sequence[str]) -> None:
        """The patched .py files, before the source reads them: the modules of their packages will
        be looked up, so the layers read for the targets already keep them."""
        self._note_packages([p for p in paths if p.endswith(".py")])

    def _note_packages(self, paths: Sequence[str]) -> None:
        """The top package directories of paths about to be read: their .py files are worth keeping."""
        for p in paths:
            parts = p.split("/")
            idx = max((i for i, x in enumerate(parts[:-1]) if x in ("site-packages", "dist-packages")), default=-1)
            top = idx + 2 if idx >= 0 else len(parts) - 1  # the top package's directory, else the file's own
            if top < len(parts):
                self._packages.add("/".join(parts[:top]))

    def raw(self, paths: Sequence[str], settle: bool) -> dict[str, TargetFile | None]:
        """Each path's TargetFile as the source has it; a path left out is not decided yet (lazy only)."""
        lazy = not settle and isinstance(self.source, (ReadsFirst, PeeksTargets))
        out: dict[str, TargetFile | None] = {}
        todo: list[str] = []
        for p in dict.fromkeys(paths):
            if p in self._settled:
                out[p] = self._settled[p]
            elif lazy and p in self._lazy:
                out[p] = self._lazy[p]
            else:
                todo.append(p)
        if todo and self._lists:
            todo = self._unlisted(todo, out)
        if todo:
            self.reads += len(todo)
            self._note_packages(todo)
            got = self._read(todo, lazy)
            for p in todo:
                if p in got:
                    (self._lazy if lazy else self._settled)[p] = got[p]
                    out[p] = got[p]
                elif not lazy:
                    self._settled[p] = None
                    out[p] = None
        return out

    def absent_in(self, parent: str, names: Set[str]) -> tuple[str, tuple[str, ...]] | None:
        """Where `parent`/NAME is for every NAME in `names` when the source's listing of `parent` holds
        none of them: (the resolved path of the names' directory, the directories on its way), exactly
        what `_unlisted` settles each of them to. None: this source does not list, or a name is there."""
        if not self._lists:
            return None
        d = self._listing(parent)
        if d is None:
            return parent, ()  # no directory there: nothing below it either
        if not d.entries.keys().isdisjoint(names):
            return None
        return d.resolved, tuple(x.path for x in d.parents)

    def _listing(self, parent: str) -> DirListing | None:
        """The source's listing of `parent`, asked once (None: no directory there)."""
        if parent not in self._dirs:
            self._dirs[parent] = self.source.peek_dir(parent)  # type: ignore[attr-defined]
        return self._dirs[parent]

    def _unlisted(self, paths: list[str], out: dict[str, TargetFile | None]) -> list[str]:
        """Settle the paths whose directory does not hold their name (into `out`); the rest still to read."""
        rest: list[str] = []
        for p in paths:
            parent, _, name = p.rpartition("/")
            d = self._listing(parent)
            if d is not None and name in d.entries:
                rest.append(p)
                continue
            if d is None:
                t = TargetFile(p, p, None)  # no directory there: nothing below it either
            else:
                t = TargetFile(p, f"{d.resolved}/{name}" if d.resolved else name, None, parents=d.parents)
            self._settled[p] = t
            out[p] = t
        return rest

    def _read(self, paths: list[str], lazy: bool) -> dict[str, TargetFile | None]:
        try:
            return dict(self._read_batch(paths, lazy))
        except BadImage:
            raise  # a damaged image fails the run as any read of it would
        except BadInput:
            pass
        out: dict[str, TargetFile | None] = {}
        for p in paths:  # one by one: some path is a directory, or climbs out through a link
            try:
                out.update(self._read_batch([p], lazy))
            except BadImage:
                raise
            except UnsafePath:
                continue  # never decided: never a claim about it
            except BadInput:
                out[p] = None  # not a regular file: no module there
        return out

    def _read_batch(self, paths: list[str], lazy: bool) -> dict[str, TargetFile]:
        src = self.source
        if isinstance(src, LocatesFiles):
            # an extension module's or a pyc's presence is all the check asks: its bytes are never read
            got = src.locate(paths, first=lazy, read=[p for p in paths if _read_whole(p)])
            return {p: _stand_in(t) if isinstance(t, Located) else t for p, t in got.items()}
        if lazy and isinstance(src, ReadsFirst):
            return src.read_first(paths)
        if lazy and isinstance(src, PeeksTargets):
            return src.peek_targets(paths)
        return src.read_targets(paths)


class _View:
    def __init__(self, files: SourceModules, overlay: dict[str, bytes | None], named: dict[str, str]) -> None:
        self.files = files
        self.overlay = overlay
        self.named = named
        self._overlay_dirs = {"/".join(p.split("/")[:i]) for p in overlay for i in range(1, p.count("/") + 1)}
        self._by_dir: dict[str, frozenset[str]] | None = None

    def platform(self) -> str | None:
        return self.files.platform()

    def look(self, paths: Sequence[str], *, settle: bool) -> dict[str, Look]:
        out: dict[str, Look] = {}
        rest: list[str] = []
        for p in paths:
            over = self._from_overlay(p)
            if over is not None:
                out[p] = over
            else:
                rest.append(p)
        raw = self.files.raw(rest, settle) if rest else {}
        for p in rest:
            if p not in raw:
                out[p] = Look(UNKNOWN)
            else:
                t = raw[p]
                out[p] = Look(ABSENT, None, p) if t is None else self._to_look(t)
        return out

    def absent_as(self, parent: str, names: Set[str]) -> tuple[str, tuple[str, ...]] | None:
        """The (resolved directory, directories on the way) that look(settle=True) gives every
        `parent`/NAME, NAME in `names`, as ABSENT, when one listing decides them all (the module search
        tries dozens of names in one directory, each a memo row's entry to check again); None when it
        does not (a source that does not list, a name that is there or that a patch touches): then
        look them up one by one."""
        if not names.isdisjoint(self._patched_in(parent)):
            return None
        got = self.files.absent_in(parent, names)
        if got is None:
            return None
        rparent, dirs = got
        if rparent != parent and not names.isdisjoint(self._patched_in(rparent)):
            return None
        return rparent, self._with_made_dirs(rparent, dirs)

    def _with_made_dirs(self, directory: str, dirs: tuple[str, ...]) -> tuple[str, ...]:
        """`dirs` (the directories on the way to `directory`'s entries), and those of `directory` and
        above that the patches create: such a directory holds what they put there."""
        if not self._overlay_dirs or not directory:
            return dirs
        return dirs + tuple(d for d in _dirs_to(directory) if d in self._overlay_dirs and d not in dirs)

    def _patched_in(self, directory: str) -> frozenset[str]:
        """The names in `directory` that the overlay holds (a patched or deleted file, or a named path)."""
        if self._by_dir is None:
            by_dir: dict[str, set[str]] = {}
            for path in (*self.overlay, *self.named):
                parent, _, name = path.rpartition("/")
                by_dir.setdefault(parent, set()).add(name)
            self._by_dir = {k: frozenset(v) for k, v in by_dir.items()}
        return self._by_dir.get(directory, frozenset())

    def _from_overlay(self, path: str) -> Look | None:
        key = self.named.get(path, path)
        if key not in self.overlay:
            return None
        data = self.overlay[key]
        dirs = tuple(_ancestors(key))
        if data is None:
            return Look(ABSENT, None, key, dirs)
        return self._sized(data, key, dirs, path)

    def _sized(self, data: Data, resolved: str, dirs: tuple[str, ...], name: str) -> Look:
        """A file's Look: a module source's bytes held (a spooled one read back, within the cap); any
        other file (`name`, the path looked up, is an extension module or a pyc) only is there: its
        bytes are never read."""
        if not _read_whole(name):
            return Look(FILE, None, resolved, dirs)
        if len(data) > min(self.files.cap, in_memory_max()):
            return Look(FILE, None, resolved, dirs, too_large=True)
        return Look(FILE, held(data, resolved), resolved, dirs)

    def _to_look(self, t: TargetFile) -> Look:
        dirs = tuple(d.path for d in t.parents)
        if t.resolved in self.overlay:
            data = self.overlay[t.resolved]
            return Look(ABSENT, None, t.resolved, dirs) if data is None else self._sized(data, t.resolved, dirs, t.path)
        if t.data is None:
            return Look(ABSENT, None, t.resolved, self._with_made_dirs(t.resolved.rpartition("/")[0], dirs))
        return self._sized(t.data, t.resolved, dirs, t.path)


_PRESENT = b""  # a Located file's stand-in bytes: only ever for a path _read_whole refuses, never read


def _stand_in(loc: Located) -> TargetFile:
    """A Located as the TargetFile the lookups keep: a file that is there (its bytes not read) or none."""
    return TargetFile(loc.path, loc.resolved, _PRESENT if loc.present else None, parents=loc.parents)


def _read_whole(path: str) -> bool:
    """Whether the check reads the bytes of the file found at `path`: a module source's, never an
    extension module's or a pyc's (their kind is all the check says of them: "cannot tell")."""
    return path.endswith(".py")


def _ancestors(path: str) -> tuple[str, ...]:
    """The directories above `path`, root first."""
    parent = path.rpartition("/")[0]
    return _dirs_to(parent) if parent else ()


@functools.lru_cache(maxsize=1 << 14)
def _dirs_to(directory: str) -> tuple[str, ...]:
    """`directory` and the directories above it, root first (every candidate of a module search in
    one directory asks for the same ones)."""
    parent = directory.rpartition("/")[0]
    return (_dirs_to(parent) if parent else ()) + (directory,)


# --- the search path of a patched file ---------------------------------------------------------
@dataclass(frozen=True)
class Place:
    """Where a patched file sits for the interpreter: its search path, its own module name, its version."""

    entries: tuple[str, ...]
    module: str  # dotted name of the file's module ("" when the file is no module: not .py)
    is_package: bool  # an __init__.py
    version: str | None  # "312" (from a pythonX.Y directory), None when the path does not say
    site: bool  # under a site-packages/dist-packages directory


_SITE_DIRS = ("site-packages", "dist-packages")


def place_of(path: str, files: ModuleFiles, *, settle: bool) -> Place | None:
    """The Place of the .py file at resolved `path`; None when it is no importable module name."""
    parts = path.split("/")
    if not parts[-1].endswith(".py"):
        return None
    idx = max((i for i, p in enumerate(parts[:-1]) if p in _SITE_DIRS), default=-1)
    version = _version(parts[:idx] if idx >= 0 else parts)
    if idx >= 0:
        sp = "/".join(parts[: idx + 1])
        entries = _site_entries(sp, parts[: idx + 1], version)
        rel = parts[idx + 1:]
        site = True
    else:
        # the package tree: up from the file's directory while there is an __init__.py; that top is
        # where absolute imports are looked for. Relative imports go by directories (a tree of
        # namespace packages has no __init__.py to say where it starts): the module is named by its
        # whole path, and the root is searched too, so those names resolve.
        top = len(parts) - 1
        while top > 0:
            init = "/".join(parts[:top] + ["__init__.py"])
            got = files.look([init], settle=settle)[init]
            if got.kind != FILE:
                break
            top -= 1
        entries = ("/".join(parts[:top]), "") if top > 0 else ("",)
        rel = parts
        site = False
    names = rel[:-1] + [rel[-1][:-3]]
    is_package = names[-1] == "__init__"
    if is_package:
        names = names[:-1]
    if not names or not names[-1].isidentifier() or (site and not all(n.isidentifier() for n in names)) or any("." in n for n in names):
        return None
    return Place(entries, ".".join(names), is_package, version, site)


def _version(parts: list[str]) -> str | None:
    for p in reversed(parts):
        if p.startswith("python3.") and p[8:].isdigit():
            return "3" + p[8:]
    return None


def _site_entries(sp: str, parts: list[str], version: str | None) -> tuple[str, ...]:
    """The site directories of the interpreter that has `sp` on its path, in sys.path order."""
    if parts[-1] != "dist-packages":
        return (sp,)
    if version is None and sp != "usr/lib/python3/dist-packages":
        return (sp,)
    if sp not in ("usr/lib/python3/dist-packages", f"usr/local/lib/python{version[0]}.{version[1:]}/dist-packages" if version else "",
                  f"usr/lib/python{version[0]}.{version[1:]}/dist-packages" if version else ""):
        return (sp,)
    if version is None:
        return (sp,)  # the version-less Debian directory alone: the others need a version to be named
    dotted = f"{version[0]}.{version[1:]}"
    return (f"usr/local/lib/python{dotted}/dist-packages", "usr/lib/python3/dist-packages", f"usr/lib/python{dotted}/dist-packages")


def is_stdlib(top: str) -> bool:
    return top in getattr(sys, "stdlib_module_names", ()) or top in sys.builtin_module_names


def ext_suffixes(version: str | None, platform: str | None) -> tuple[str, ...]:
    """The extension-module suffixes the image's interpreter may load (as EXTENSION_SUFFIXES)."""
    arch = (platform or "").split("/")[1] if platform and "/" in platform else None
    triples = _ARCHES.get(arch or "", tuple(t for ts in _ARCHES.values() for t in ts))
    versions = (version,) if version else _VERSIONS
    return tuple(f".cpython-{v}-{t}.so" for v in versions for t in triples) + (".abi3.so", ".so")


# --- finding one module ----------------------------------------------------------------------
SOURCE, PACKAGE, NAMESPACE, NATIVE, BYTECODE, MISSING, LARGE = (
    "source", "package", "namespace", "native", "bytecode", "missing", "large")


@dataclass(frozen=True)
class Spec:
    """A module as the interpreter would find it."""

    name: str
    kind: str  # SOURCE | PACKAGE | NAMESPACE | NATIVE | BYTECODE | LARGE | MISSING
    file: str = ""  # resolved path of the file that is the module (or the package's __init__)
    data: bytes | None = None
    path: tuple[str, ...] = ()  # a package's __path__ (namespace: every portion)
    settled: bool = True  # every candidate before the found one was decided
    why: str = ""  # MISSING: where it was looked for


class Finder:
    """Finds modules for one patched file's Place, caching what it found."""

    def __init__(self, files: ModuleFiles, place: Place, *, settle: bool, cache: dict | None = None) -> None:
        self.files = files
        self.place = place
        self.settle = settle
        self.suffixes = ext_suffixes(place.version, files.platform())
        # what was found, shared by the Finders of one view, search path and version (`cache`)
        shared = cache if cache is not None else {}
        self._specs: dict[str, Spec | None] = shared.setdefault((id(files), place.entries, place.version, settle), {})

    def find(self, dotted: str) -> Spec | None:
        """The module `dotted` (absolute); None when imgquilt does not look for it (the standard
        library, a top-level name no searched directory holds: it may come from PYTHONPATH or a .pth)."""
        if dotted in self._specs:
            return self._specs[dotted]
        parts = dotted.split(".")
        if is_stdlib(parts[0]):
            spec = None  # the standard library is not looked at (see the module docstring)
        elif len(parts) == 1:
            spec = self._find_in(parts[0], dotted, self.place.entries)
            if spec is not None and spec.kind == MISSING:
                spec = None  # not in the searched directories: cannot tell where else it may come from
        else:
            parent = self.find(".".join(parts[:-1]))
            if parent is None:
                spec = None
            elif parent.kind in (SOURCE, NATIVE, BYTECODE, LARGE) or not parent.path:
                spec = Spec(dotted, MISSING, settled=parent.settled,
                            why=f"'{parent.name}' is not a package ({parent.file})")
            else:
                spec = self._find_in(parts[-1], dotted, parent.path)
        self._specs[dotted] = spec
        return spec

    def _find_in(self, name: str, dotted: str, dirs: Sequence[str]) -> Spec:
        cands: list[tuple[str, str, str]] = []  # (path, kind, dir of the entry)
        for d in dirs:
            base = f"{d}/{name}" if d else name
            for s in self.suffixes:
                cands.append((f"{base}/__init__{s}", NATIVE, d))
            cands.append((f"{base}/__init__.py", PACKAGE, d))
            cands.append((f"{base}/__init__.pyc", BYTECODE, d))
            for s in self.suffixes:
                cands.append((f"{base}{s}", NATIVE, d))
            cands.append((f"{base}.py", SOURCE, d))
            cands.append((f"{base}.pyc", BYTECODE, d))
        looks = self.files.look([c[0] for c in cands], settle=self.settle)
        settled = True
        portions: list[str] = []
        for d in dirs:
            base = f"{d}/{name}" if d else name
            mine = [c for c in cands if c[2] == d]
            for path, kind, _ in mine:
                lk = looks[path]
                if lk.kind == UNKNOWN:
                    settled = False
                    continue
                if lk.kind != FILE:
                    continue
                is_init = "/__init__" in path[len(base):]
                pkg_path = (lk.resolved.rsplit("/", 1)[0],) if is_init else ()
                if lk.too_large:
                    return Spec(dotted, LARGE, lk.resolved, None, pkg_path, settled)
                if kind == PACKAGE:
                    return Spec(dotted, PACKAGE, lk.resolved, lk.data, pkg_path, settled)
                if kind == NATIVE:
                    return Spec(dotted, NATIVE, lk.resolved, None, pkg_path, settled)
                if kind == BYTECODE:
                    return Spec(dotted, BYTECODE, lk.resolved, None, pkg_path, settled)
                return Spec(dotted, SOURCE, lk.resolved, lk.data, (), settled)
            # no file: a directory there is a namespace portion (unless a later entry has a real module)
            init = looks[f"{base}/__init__.py"]
            if init.kind == UNKNOWN:
                settled = False
            elif init.resolved and init.resolved.rsplit("/", 1)[0] in init.dirs:
                portions.append(init.resolved.rsplit("/", 1)[0])
        if portions:
            return Spec(dotted, NAMESPACE, "", None, tuple(portions), settled)
        where = ", ".join(d or "/" for d in dirs)
        return Spec(dotted, MISSING, settled=settled, why=f"no {name}.py, {name}/ or extension module in {where}")

