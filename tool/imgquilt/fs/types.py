"""Values that every filesystem source (image, rootfs, tar) hands to the core."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection, Literal, Mapping, Protocol, Sequence, runtime_checkable

from .content import Data

NodeKind = Literal["file", "dir", "symlink", "other"]


@dataclass(frozen=True)
class Node:
    """One filesystem entry as seen without following a final symlink."""

    kind: NodeKind
    mode: int = 0o644  # permission bits only (incl. suid/sgid/sticky), never the type
    uid: int = 0
    gid: int = 0
    linkname: str = ""  # symlink target, verbatim
    layer: str | None = None  # digest of the layer that provides it (images)


@dataclass(frozen=True)
class DirMeta:
    """An existing directory on the way to a target: path (relative) and its metadata."""

    path: str
    mode: int
    uid: int
    gid: int


@dataclass(frozen=True)
class TargetFile:
    """A target file read from a source: named path, resolved path, bytes and metadata."""

    path: str  # as the patch names it
    resolved: str  # resolved inside the root, relative, no leading slash
    data: Data | None  # None: the file does not exist; a large file is a Spooled (fs.content)
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    layer: str | None = None
    parents: tuple[DirMeta, ...] = field(default=())  # existing parents of `resolved`, root first
    # modification time in whole seconds, as CPython compares it with a timestamp pyc (None: unknown);
    # not part of equality: the same bytes read from an image and from its extraction are one file
    mtime: int | None = field(default=None, compare=False)
    # a symlink read as itself (its final component not followed): `data` holds its target's bytes
    link: bool = False
    # the in-root paths of the symlinks followed to reach `resolved` (engine.plan refuses a series that
    # reaches a file through, or below, a link it changes itself); not part of equality
    via: tuple[str, ...] = field(default=(), compare=False)

    @property
    def exists(self) -> bool:
        return self.data is not None


@dataclass(frozen=True)
class FileChange:
    """One file's end state, as the sinks (layer, overlay) write it: new bytes, or deleted (data None)."""

    path: str  # as the patch names it
    resolved: str  # resolved inside the root, relative, no leading slash
    data: Data | None  # None: the file is deleted; a large file is a Spooled (fs.content)
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    parents: tuple[DirMeta, ...] = field(default=())  # existing parents of `resolved` in the base, root first
    link: bool = False  # a symlink whose target is `data` (no mode of its own)

    @property
    def deleted(self) -> bool:
        return self.data is None


@dataclass(frozen=True)
class ImageInfo:
    """What identifies the filesystem a queue was applied to."""

    ref: str
    digest: str | None  # manifest digest; None for a rootfs (the lock computes one over targets)
    platform: str | None = None
    kind: Literal["image", "rootfs", "tar"] = "image"


class Source(Protocol):
    """A filesystem imgquilt can read targets from (an image, a rootfs, a flat tar)."""

    def info(self) -> ImageInfo: ...

    def read_targets(self, paths: Sequence[str]) -> dict[str, TargetFile]:
        """Resolve every named path inside the root and read it; absent files have data None.

        Every source also takes `links=PATHS` (keyword): those paths are resolved without following
        their final component, so a symlink there comes back as itself (`link=True`, its target as
        data); a regular file there comes back as one. Call it through `read_targets()` below."""
        ...


def read_targets(source: Source, paths: Sequence[str], links: Collection[str] = ()) -> dict[str, TargetFile]:
    """`source.read_targets`, with the paths in `links` read as themselves (a symlink's target as data)."""
    links = [p for p in links if p in set(paths)]
    if not links:
        return source.read_targets(paths)
    return source.read_targets(paths, links=links)  # type: ignore[call-arg]


# Optional abilities of a Source: checked with isinstance, not probed with getattr.
@runtime_checkable
class PeeksTargets(Protocol):
    """A source that can answer from what it has already read, reading nothing more."""

    def peek_targets(self, paths: Sequence[str]) -> dict[str, TargetFile]: ...


@runtime_checkable
class ReadsFirst(Protocol):
    """A layered source that can read only as deep as it takes to find one of several paths (the
    Python check looks for a module among the files CPython would try, without deciding them all)."""

    def read_first(self, paths: Sequence[str]) -> dict[str, TargetFile]:
        """Read down until one of `paths` is a file, or every one is decided; return the decided ones."""
        ...


@dataclass(frozen=True)
class Located:
    """Whether a regular file is at a path (symlinks followed inside the root), its bytes never read:
    what the Python check asks of an extension module or a pyc, whose contents it never looks at."""

    path: str  # as named
    resolved: str
    present: bool  # a regular file is there (False: nothing is)
    parents: tuple[DirMeta, ...] = field(default=())  # existing parents of `resolved`, root first


@runtime_checkable
class LocatesFiles(Protocol):
    """A source that can resolve paths without reading the files they lead to (an image: its layer
    index; a file's bytes are never fetched, kept, spooled or stored to answer)."""

    def locate(self, paths: Sequence[str], *, first: bool, read: Collection[str] = ()) -> dict[str, TargetFile | Located]:
        """Every path in `read` as read_targets has it, every other one as Located. `first`: as read_first
        (stop going down once one of `paths` is a file; the undecided ones are left out), else every
        path decided (as read_targets). A path that is a directory or not a regular file is BadInput,
        as read_targets has it."""
        ...


def located_or_read(paths: Sequence[str], loose: Sequence[str], image: Callable[[], object],
                    read: Callable[[list[str]], Mapping[str, TargetFile]]) -> dict[str, TargetFile | Located]:
    """Every one of `paths`: those in `loose` only located when `image()` can locate (LocatesFiles; the
    image is opened only when there is one), the rest (all of them, when it cannot) by `read`. The one
    rule of the sources that stand between the Python check and an image (work/bases, work/relock)."""
    out: dict[str, TargetFile | Located] = {}
    if loose:
        src = image()
        if isinstance(src, LocatesFiles):
            out.update(src.locate(list(loose), first=False))
    rest = [p for p in paths if p not in out]
    if rest:
        out.update(read(rest))
    return out


@dataclass(frozen=True)
class DirListing:
    """A directory's entries, as a source knows them: its resolved path, itself and its parents
    (root first, the directory last), and every entry by name (never `.` or `..`)."""

    resolved: str
    parents: tuple[DirMeta, ...]
    entries: dict[str, Node]


@runtime_checkable
class ListsDirs(Protocol):
    """A source that can list a directory without reading more than it has (an image: the layers
    read so far, so looking for bytecode never makes a read go deeper than its targets did)."""

    def peek_dir(self, path: str) -> DirListing | None:
        """The directory at `path` (symlinks resolved inside the root); None when nothing read shows one."""
        ...


@runtime_checkable
class KnowsDeletions(Protocol):
    """A layered source that can name the layer which deleted (whited out) a path."""

    def deleted_by(self, path: str) -> str | None: ...


@runtime_checkable
class ListsPaths(Protocol):
    """A source that can list every non-directory path of its filesystem."""

    def list_paths(self) -> list[str]: ...


@runtime_checkable
class HasRootDir(Protocol):
    """A source that is a directory tree on this machine."""

    root: Path
