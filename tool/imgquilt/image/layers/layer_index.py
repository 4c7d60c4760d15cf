"""One scanned layer: every member's metadata by path, its whiteouts and opaque directories.

A layer is scanned once, top-down order being the caller's business: headers only, plus the data
of the members the caller asks to keep. The blob is read to its end (so its digest is checked)
before the index is handed back; an index therefore never holds unverified bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...errors import BadImage, DigestMismatch, UnsafePath
from ...fs.types import Node
from .tarwalk import TarWalker, member_path

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
AUFS_META = ".wh..wh."  # aufs bookkeeping (.wh..wh.plnk, .wh..wh.aufs): ignored, as containerd does

# kinds of a Rec
FILE, DIR, SYMLINK, HARDLINK, OTHER = "f", "d", "l", "h", "o"
_KIND_OF_TYPE = {"0": FILE, "7": FILE, "S": FILE, "5": DIR, "D": DIR, "2": SYMLINK, "1": HARDLINK,
                 "3": OTHER, "4": OTHER, "6": OTHER}
_NODE_KIND = {FILE: "file", HARDLINK: "file", DIR: "dir", SYMLINK: "symlink", OTHER: "other"}


class Rec:
    """One member of a layer (the last one wins when a path repeats)."""

    __slots__ = ("kind", "mode", "uid", "gid", "size", "linkname", "ordinal", "offset", "data", "sparse", "sha", "mtime")

    def __init__(self, kind: str, mode: int, uid: int, gid: int, size: int, linkname: str,
                 ordinal: int, offset: int, sparse: bool, mtime: int = 0) -> None:
        self.kind = kind
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.size = size
        self.linkname = linkname  # symlinks: verbatim; hard links: normalized archive path
        self.ordinal = ordinal
        self.offset = offset
        self.data: bytes | None = None
        self.sparse = sparse
        self.sha: str | None = None  # sha256 hex of the data, when the shared cache holds it
        self.mtime = mtime  # whole seconds, for judging a timestamp pyc against its source

    def node(self, layer: str | None) -> Node:
        return Node(_NODE_KIND[self.kind], self.mode, self.uid, self.gid,
                    self.linkname if self.kind == SYMLINK else "", layer)


@dataclass
class LayerIndex:
    """What one layer holds: explicit entries, whiteouts, opaque dirs, implied parent dirs."""

    position: int  # 0 = top layer
    entries: dict[str, Rec]
    whiteouts: dict[str, str]  # deleted path -> the .wh. member that deletes it
    opaque: dict[str, str]  # directory ("" = root) -> its .wh..wh..opq member
    implicit: set[str]  # directories that exist in the layer because something is under them
    members: int = 0
    kept_bytes: int = 0
    _children: dict[str, list[str]] | None = field(default=None, repr=False, compare=False)

    def children(self, directory: str) -> list[str]:
        """The paths of this layer's members directly in `directory` ("" = the root), whiteouts not
        included (a lookup decides what they hide)."""
        names = getattr(self.entries, "paths_in", None)
        if names is not None:  # a cached index keeps its members per directory
            return names(directory)
        if self._children is None:
            grouped: dict[str, list[str]] = {}
            for path in self.entries:
                grouped.setdefault(path.rpartition("/")[0], []).append(path)
            self._children = grouped
        return self._children.get(directory, [])


def _implicit_dirs(entries: dict[str, Rec], whiteouts: dict[str, str], opaque: dict[str, str]) -> set[str]:
    implicit: set[str] = set()
    for path in (*entries, *whiteouts):
        parent = path.rpartition("/")[0]
        while parent and parent not in implicit:
            implicit.add(parent)
            parent = parent.rpartition("/")[0]
    for path in opaque:
        while path and path not in implicit:
            implicit.add(path)
            path = path.rpartition("/")[0]
    return implicit


def scan_layer(stream, *, position: int, whiteouts: bool, keep: Callable[[str, int], bool],
               what: str) -> LayerIndex:
    """Walk a layer's tar stream to its end; keep the data of files for which keep(path, size)."""
    entries: dict[str, Rec] = {}
    wh: dict[str, str] = {}
    opq: dict[str, str] = {}
    kept = 0
    walker = TarWalker(stream, what=what)
    try:
        for e in walker:
            try:
                path = member_path(e.name)
            except UnsafePath:
                raise BadImage(f"The {what} holds an unsafe member name {e.name!r}.",
                               hint="imgquilt will not read an image whose paths escape its root.") from None
            if path is None:
                continue  # the root itself
            if whiteouts:
                parent, _, base = path.rpartition("/")
                if base.startswith(WHITEOUT):
                    if base == OPAQUE:
                        opq[parent] = path
                    elif not base.startswith(AUFS_META):
                        wh[f"{parent}/{base[4:]}" if parent else base[4:]] = path
                    continue
            kind = _KIND_OF_TYPE.get(e.type, OTHER)
            link = e.linkname
            if kind == HARDLINK:
                try:
                    link = member_path(link) or ""
                except UnsafePath:
                    raise BadImage(
                        f"The {what} holds a hard link {e.name!r} to an unsafe path {e.linkname!r}."
                    ) from None
            rec = Rec(kind, e.mode, e.uid, e.gid, e.size, link, e.ordinal, e.offset, e.sparse, e.mtime)
            entries[path] = rec
            if kind == FILE and keep(path, e.size):
                rec.data = walker.read_data()
                kept += e.size
        walker.finish()  # to the end of the blob: this is where its digest is checked
    except DigestMismatch:
        raise
    except BadImage:
        # a blob that does not match its digest is reported as such, not as whatever broke first
        drain = getattr(stream, "drain", None)
        if drain is not None:
            try:
                drain()
            except DigestMismatch:
                raise
            except BadImage:
                pass
        raise
    return LayerIndex(position, entries, wh, opq, _implicit_dirs(entries, wh, opq), walker.count, kept)
