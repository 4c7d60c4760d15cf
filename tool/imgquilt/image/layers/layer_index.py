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

    __slots__ = ("kind", "mode", "uid", "gid", "size", "linkname", "ordinal", "offset", "data", "sparse", "sha",
                 "extent", "mtime")

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
        self.data = None  # bytes, or a Spooled (fs.content) for a large file
        self.sparse = sparse
        self.sha: str | None = None  # sha256 hex of the data, when the shared cache holds it
        self.mtime = mtime  # whole seconds, for judging a timestamp pyc against its source
        # a member of a seekable layer walked by range (layers.toc_walk): (the TOC's sha256 hex of the data,
        # the run of frames holding it as a (start, end, skip, size, total) tuple, or none for an empty
        # file); its bytes are fetched by range and checked against that total and that sha256
        self.extent: tuple[str, tuple[tuple[int, int, int, int, bool], ...]] | None = None

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


class IndexBuilder:
    """Members in layer order -> a LayerIndex: whiteouts, opaque markers, implied directories, last one wins.

    Fed by the tar walk (scan_layer) and by a seekable layer's table of contents (layers.toc), so both
    give the same index for the same layer."""

    def __init__(self, *, position: int, whiteouts: bool, what: str) -> None:
        self.position = position
        self.whiteouts = whiteouts
        self.what = what
        self.entries: dict[str, Rec] = {}
        self.wh: dict[str, str] = {}
        self.opq: dict[str, str] = {}
        self.last_path = ""  # the path of the Rec `add` returned last
        self.raw: dict[str, dict[str, tuple]] = {}  # add_raw's members: directory -> path -> stored tuple

    def member(self, name: str, typeflag: str, linkname: str) -> tuple[str, str, str] | None:
        """(path, kind, link) of one member; None for the root, a whiteout or an opaque marker (noted)."""
        what = self.what
        try:
            path = member_path(name)
        except UnsafePath:
            raise BadImage(f"The {what} holds an unsafe member name {name!r}.",
                           hint="imgquilt will not read an image whose paths escape its root.") from None
        if path is None:
            return None  # the root itself
        if self.whiteouts:
            parent, _, base = path.rpartition("/")
            if base.startswith(WHITEOUT):
                if base == OPAQUE:
                    self.opq[parent] = path
                elif not base.startswith(AUFS_META):
                    self.wh[f"{parent}/{base[4:]}" if parent else base[4:]] = path
                return None
        kind = _KIND_OF_TYPE.get(typeflag, OTHER)
        link = linkname
        if kind == HARDLINK:
            try:
                link = member_path(link) or ""
            except UnsafePath:
                raise BadImage(f"The {what} holds a hard link {name!r} to an unsafe path {linkname!r}.") from None
        return path, kind, link

    def add(self, name: str, typeflag: str, mode: int, uid: int, gid: int, size: int, linkname: str,
            ordinal: int, offset: int, sparse: bool, mtime: int = 0) -> Rec | None:
        """One member; its Rec (None for the root, a whiteout or an opaque marker)."""
        member = self.member(name, typeflag, linkname)
        if member is None:
            return None
        path, kind, link = member
        rec = Rec(kind, mode, uid, gid, size, link, ordinal, offset, sparse, mtime)
        self.entries[path] = rec
        self.last_path = path
        return rec

    def store_raw(self, path: str, raw: tuple) -> None:
        """A member (a path `member` gave) straight into `raw` in the stored form (index_codec's tuple),
        grouped per directory, no Rec made: a TOC's tens of thousands of members, most never looked at."""
        parent = path.rpartition("/")[0]
        bucket = self.raw.get(parent)
        if bucket is None:
            bucket = self.raw[parent] = {}
        bucket[path] = raw  # the last one wins, as in `entries`
        self.last_path = path

    def finish(self, members: int, kept: int = 0) -> LayerIndex:
        return LayerIndex(self.position, self.entries, self.wh, self.opq,
                          _implicit_dirs(self.entries, self.wh, self.opq), members, kept)


def scan_layer(stream, *, position: int, whiteouts: bool, keep: Callable[[str, int], bool],
               what: str) -> LayerIndex:
    """Walk a layer's tar stream to its end; keep the data of files for which keep(path, size)."""
    builder = IndexBuilder(position=position, whiteouts=whiteouts, what=what)
    kept = 0
    walker = TarWalker(stream, what=what)
    try:
        for e in walker:
            rec = builder.add(e.name, e.type, e.mode, e.uid, e.gid, e.size, e.linkname, e.ordinal, e.offset, e.sparse, e.mtime)
            if rec is not None and rec.kind == FILE and keep(builder.last_path, e.size):
                rec.data = walker.read_content()
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
    return builder.finish(walker.count, kept)
