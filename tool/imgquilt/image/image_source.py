"""ImageSource: the target files of an image (or flat tar), read from its layers without extracting.

How a read goes:
1. Resolve every target over the layers scanned so far (`MergedView`), as the runtime would,
   symlinks included. A lookup nothing scanned decides is UNKNOWN: the target is still open, and
   the path where it would be is "wanted".
2. While some target is open, scan the next layer down: headers only, keeping the data of wanted
   files (and, within a budget, of files that share a wanted file's name: the usual way a symlink
   found lower down redirects to a file seen higher up, e.g. bin -> usr/bin).
3. Once every target is decided, stop: lower layers are never opened.
4. A file whose data was not kept when its layer was scanned (its path was discovered later, or
   it is a hard link to an earlier member) is read in a second pass over just that layer.

Digests: a layer blob is always read to its end, and its digest checked, before anything read from
it is used; a mismatch is DigestMismatch (exit 6). While a layer is scanned three threads share the
work: one decompresses, one hashes the stored bytes, and this one walks the tar headers; so a
scan costs about what decompressing the layer alone costs. While a layer is scanned, the next ones down
(up to layer_reads() layers at once, downloads included, those the shared cache has no index of) are
scanned by threads of their own with the same wanted paths, so every core decompresses meanwhile;
when the targets are all decided without them, those scans are cancelled and nothing of them is used
(a file one did not keep costs a second pass, as above).

Seekable layers (zstd:chunked, eStargz; layers.toc, layers.tar_split, layers.toc_walk) are not read
whole: their table of contents, fetched by range and checked against the checksum the manifest gives
it, says where each file's compressed bytes lie. The index is built from the layer's tar-split when
the TOC names one (zstd:chunked from containers/storage 1.47 on: the tar headers without the data,
fetched by range, verified by the TOC's digest; no walk), else from the layer's tar stream walked by
range (every header and small file, decompressed; the largest files' data skipped); the TOC must match
it member for member (else the layer is read whole), and a file's bytes are fetched by range when
they are needed (_fill_data), checked against the length found and the TOC's sha256.
Other layers are read whole, since a later member of a layer can replace an earlier one. A second pass over a layer verified earlier in this
run (or, with a cache directory, in an earlier run) whose file is unchanged (same device, inode,
size, mtime and ctime) does not hash again; it seeks straight to the member in an uncompressed
blob, and stops after the member in a compressed one.

The shared cache (cache.layers), when given: a layer read whole leaves its index there, under the
digest it was verified against, and the bytes of the target files read leave them in its store.
A later read of a layer with that digest (any image, transport or path) takes the index instead of
scanning, after hashing the local blob unless it is known verified, and takes file bytes from the
store; only a file the store lacks costs a second pass over its layer.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
import threading
from dataclasses import dataclass, field
from typing import Callable, Collection, Sequence

from ..cache.layers import LayerCache
from ..errors import BadImage, BadInput, UsageError
from ..fs.content import copy_to_spool, spool_at
from ..fs.paths import check_member_path
from ..fs.resolve import KnownDirs, remember_dirs, resolve
from ..fs.types import DirListing, DirMeta, ImageInfo, Located, Node, TargetFile
from ..util.reader import Wrapper
from ..util.threads import mark_ahead
from .digests import mismatch, sha256_digest
from .mediatypes import compression_of
from .layers.blob_layer import BlobLayer
from .layers.blobio import FileRange, HashingRange, VerifiedBlobs, fingerprint
from .layers.index_codec import dump_index, load_index
from .layers.layer_index import DIR, FILE, HARDLINK, OTHER, SYMLINK, LayerIndex, Rec, scan_layer
from .layers.merged_view import UNKNOWN, Absent, Deletion, Found, MergedView, _ancestors, hider
from .layers.tarwalk import TarWalker, member_path
from .layers.tar_split import read_tar_split, tar_split_index
from .layers.toc import TocRef, TocUnusable, read_toc, toc_ref
from .layers.toc_walk import HOLE_MIN, LOCAL_HOLE_MIN, LOCAL_MAX_HOLES, MAX_HOLES, run_bytes, walk_index, walk_locally

LAYER_READS_ENV = "IMGQUILT_LAYER_READS"
LOCAL_TOC_ENV = "IMGQUILT_LOCAL_TOC"
LAYER_READS = 3  # layers read at once: the one being decided and the next ones down, ahead
KEEP_LIKELY_MAX = 8 << 20  # a same-named file up to this size is kept in case a symlink leads to it
KEEP_LIKELY_BUDGET = 256 << 20
MAX_HARDLINK_HOPS = 16
_PROVISIONAL_DIR = Node("dir", 0o755)


def layer_reads() -> int:
    """How many layers a cold read fetches and decompresses at once (IMGQUILT_LAYER_READS, default 3; 1
    reads one layer at a time). Every one is read top-down in order of need; those ahead still running
    are cancelled once the targets are decided without them (those ended are kept for a later read)."""
    from ..settings import current

    raw = (current().of(LAYER_READS_ENV) or "").strip()
    if not raw:
        return LAYER_READS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{LAYER_READS_ENV}={raw!r} is not a positive number of layers.")
    return value


def local_toc() -> bool | None:
    """How a local zstd:chunked layer with no tar-split is read (IMGQUILT_LOCAL_TOC): walked with its TOC
    (True, `walk`), read whole (False, `whole`), or whichever costs less for it (None, `auto`, the
    default: toc_walk.walk_locally). The index is the same either way."""
    from ..settings import current

    raw = (current().of(LOCAL_TOC_ENV) or "auto").strip()
    choices = {"auto": None, "walk": True, "whole": False}
    if raw not in choices:
        raise UsageError(f"{LOCAL_TOC_ENV}={raw!r} is not one of auto, walk, whole.")
    return choices[raw]


@dataclass
class ScanStats:
    """What reading cost: which layers were scanned, and re-read for a second pass."""

    layers_scanned: list[str] = field(default_factory=list)  # layer digests, top first
    second_passes: list[str] = field(default_factory=list)
    layers_from_cache: list[str] = field(default_factory=list)  # indexes taken from the shared cache
    files_from_cache: int = 0
    members_seen: int = 0
    layers_from_toc: list[str] = field(default_factory=list)  # seekable layers decided from their TOC
    toc_unusable: list[tuple[str, str]] = field(default_factory=list)  # (layer, why): read whole instead
    files_by_range: int = 0
    range_bytes: int = 0  # compressed bytes fetched by range (TOCs, the walks of the tar streams, file frames)
    runs_skipped: int = 0  # the largest files' data runs the walks skipped
    layers_by_tar_split: int = 0  # seekable layers whose TOC was checked against their tar-split (no walk)
    read_whole_locally: list[str] = field(default_factory=list)  # local seekable layers cheaper read whole


@dataclass(frozen=True)
class _Open:
    """A target not yet decided: where it may be."""

    wanted: frozenset[str]


@dataclass(frozen=True)
class _Decided:
    target: TargetFile  # without data yet
    source: tuple[int, Rec] | None  # (layer position, file member) that holds the bytes
    deletion: Deletion | None


class _Tracker:
    """The lookup handed to fs.resolve: records what was unknown, found and hidden."""

    def __init__(self, view: MergedView, digest_of, nodes: dict[int, tuple[Found, Node]] | None = None) -> None:
        self.view = view
        self.digest_of = digest_of
        self.nodes = nodes if nodes is not None else {}  # id(Found) -> (it, its Node): the view repeats its answers
        self.definite = True
        self.unknown: list[str] = []
        self.found: dict[str, Found] = {}
        self.hidden: dict[str, Deletion | None] = {}
        self.last_absent: str | None = None

    def __call__(self, path: str) -> Node | None:
        result = self.view.lookup(path)
        if result is UNKNOWN:
            self.definite = False
            self.unknown.append(path)
            return _PROVISIONAL_DIR  # go on as if it were a directory: the rest is "wanted"
        if isinstance(result, Absent):
            self.hidden[path] = result.hidden
            self.last_absent = path
            return None
        assert isinstance(result, Found)
        self.found[path] = result
        known = self.nodes.get(id(result))
        if known is not None and known[0] is result:
            return known[1]
        node = result.rec.node(self.digest_of(result.layer))
        self.nodes[id(result)] = (result, node)
        return node


class ImageSource:
    """A filesystem Source over an image's layers (or a flat tar's single "layer")."""

    def __init__(self, image, *, kind: str = "image", verified: VerifiedBlobs | None = None,
                 ref: str | None = None, layer_cache: LayerCache | None = None, use_tocs: bool = True,
                 walk_local: bool | None = None) -> None:
        self.image = image
        # a local seekable layer with no tar-split: walked (True), read whole (False), or whichever costs
        # less for it (None: IMGQUILT_LOCAL_TOC, by default toc_walk.walk_locally); the tests of the walk force it
        self._walk_local = walk_local if walk_local is not None else local_toc()
        self.kind = kind
        self.ref = ref or image.ref
        self._layers: list[BlobLayer] = list(reversed(image.layers))  # top first
        self._view = MergedView(len(self._layers), whiteouts=(kind == "image"))
        self._nodes: dict[int, tuple[Found, Node]] = {}  # the Node of each answer of the view, made once
        # directories resolved definitely (every layer that could say otherwise was read): final answers
        self._known_dirs: KnownDirs = {}
        self._metas: dict[str, tuple[Node, DirMeta]] = {}  # _dir_metas' memo
        self._verified = verified if verified is not None else VerifiedBlobs(None)
        for layer in self._layers:
            if hasattr(layer, "verified_by"):
                layer.verified_by = self._verified
        self._deletions: dict[str, Deletion] = {}
        self._likely_kept = 0
        self._cache = layer_cache
        self._dirty: set[int] = set()  # layers whose index the shared cache lacks or must extend
        self._kept_lock = threading.Lock()
        self._ahead: dict[int, _Prefetch] = {}  # layers below the current one, scanned ahead by threads
        self.stats = ScanStats()
        # use_tocs=False reads seekable layers whole too (the tests compare both ways)
        self._tocs: list[TocRef | None] = [None] * len(self._layers)
        if use_tocs:
            self._tocs = [self._toc_of(i) for i in range(len(self._layers))]
        self._keys: dict[int, str] = {}  # layer position -> the shared cache's key of its index
        # keep_also(): more members whose bytes are kept when a layer is read (the Python check's modules)
        self._also: Callable[[str], bool] | None = None
        self._also_budget = 0
        # called with (layer position from the top, layer count, layer digest) before a layer is read;
        # it may return a callback that is given the count of tar bytes read as they pass (progress)
        self.on_layer: Callable[[int, int, str], Callable[[int], None] | None] | None = None
        # the CLI's progress: called as a layer starts to be read (a scan ahead included, so layers read
        # at once show at once) with (position, count, digest, stored size: the manifest's); it may
        # return a callback given the stored bytes read as they pass, with a close() called at the end
        self.on_layer_sized: Callable[[int, int, str, int | None], Callable[[int], None] | None] | None = None

    def watch_downloads(self, on_download) -> None:
        """Progress of the layers downloaded from a registry (image.sources.OnDownload)."""
        for layer in self._layers:
            if hasattr(layer, "on_download"):
                layer.on_download = on_download

    # --- Source protocol ---
    def info(self) -> ImageInfo:
        if self.kind == "tar":
            return ImageInfo(self.ref, None, None, kind="tar")
        return ImageInfo(self.ref, self.image.manifest_digest, self.image.platform, kind="image")

    def read_targets(self, paths: Sequence[str], *, links: Collection[str] = ()) -> dict[str, TargetFile]:
        named = {p: check_member_path(p, what="target path") for p in paths}
        as_link = set(links)
        attempts: dict[str, _Open | _Decided] = {}
        try:
            while True:
                # a target decided by the layers read so far stays decided (what lies below cannot change
                # it): only the open ones are resolved again after each layer
                attempts.update({p: self._attempt(n, p in as_link) for p, n in named.items()
                                 if not isinstance(attempts.get(p), _Decided)})
                open_ = [a for a in attempts.values() if isinstance(a, _Open)]
                if not open_:
                    break
                if self._view.complete:  # pragma: no cover - every lookup is decided once all is read
                    raise AssertionError("targets undecided after reading every layer")
                wanted: set[str] = set()
                for a in open_:
                    wanted |= a.wanted
                self._scan_next(wanted, ahead=True)
        finally:
            self._stop_prefetch()  # decided without the next layer: it is never used
        return self._finish(attempts)  # type: ignore[arg-type]

    def read_first(self, paths: Sequence[str]) -> dict[str, TargetFile]:
        """Like read_targets, but the read stops going down once one of `paths` is a file (or all are
        decided); paths still undecided then are left out (fs.types.ReadsFirst)."""
        named = {p: check_member_path(p, what="target path") for p in paths}
        attempts = self._descend(named, first=True, keep=named)
        return self._finish({p: a for p, a in attempts.items() if isinstance(a, _Decided)})

    def locate(self, paths: Sequence[str], *, first: bool, read: Collection[str] = ()) -> dict[str, TargetFile | Located]:
        """fs.types.LocatesFiles: the paths in `read` read (as read_first when `first`, else as
        read_targets), every other one resolved over the layer index only: a Located that says whether
        a regular file is there. The same resolution as a read (symlinks followed inside the root,
        whiteouts and opaque directories of upper layers, hard links), but its bytes are never kept as
        a layer is scanned, fetched by range, read in a second pass, spooled or stored in the cache."""
        named = {p: check_member_path(p, what="target path") for p in paths}
        reading = set(read)
        attempts = self._descend(named, first=first, keep={p: n for p, n in named.items() if p in reading})
        decided = {p: a for p, a in attempts.items() if isinstance(a, _Decided)}
        out: dict[str, TargetFile | Located] = dict(self._finish({p: a for p, a in decided.items() if p in reading}))
        for p, d in decided.items():
            if p in reading:
                continue
            if d.deletion is not None:
                self._deletions[p] = d.deletion
            else:
                self._deletions.pop(p, None)
            t = d.target
            out[p] = Located(t.path, t.resolved, d.source is not None, t.parents)
        return out

    def _descend(self, named: dict[str, str], *, first: bool, keep: dict[str, str]) -> dict[str, _Open | _Decided]:
        """Resolve every path over the layers read so far, reading the next layer down while some is
        open (and, `first`, none is a file yet). Only the paths in `keep` have their bytes kept as a
        layer is scanned; the others are only resolved."""
        try:
            while True:
                attempts = {p: self._attempt(n) for p, n in named.items()}
                open_ = [(p, a) for p, a in attempts.items() if isinstance(a, _Open)]
                found = first and any(isinstance(a, _Decided) and a.source is not None for a in attempts.values())
                if not open_ or found:
                    return attempts
                wanted: set[str] = set()
                kept: set[str] = set()
                for p, a in open_:
                    wanted |= a.wanted
                    if p in keep:
                        kept |= a.wanted
                self._scan_next(wanted, ahead=True, kept=kept)
        finally:
            self._stop_prefetch()

    def keep_also(self, wanted: Callable[[str], bool], budget: int) -> None:
        """From now on, whenever a layer is read (or read again for a file not kept), also keep the
        bytes of the members `wanted` names, up to `budget` bytes in all (each at most
        KEEP_LIKELY_MAX): the Python check reads module after module of one package, and every file
        not kept would cost another pass over its layer."""
        self._also, self._also_budget = wanted, budget

    def _also_keep(self, path: str, size: int) -> bool:
        if self._also is None or size > KEEP_LIKELY_MAX or not self._also(path):
            return False
        with self._kept_lock:
            if size > self._also_budget:
                return False
            self._also_budget -= size
            return True

    def peek_targets(self, paths: Sequence[str]) -> dict[str, TargetFile]:
        """Like read_targets, over the layers already scanned only: a path they leave undecided is
        left out. For the apply record, which must not make a read go deeper than the targets did."""
        named = {p: check_member_path(p, what="target path") for p in paths}
        attempts = {p: self._attempt(n) for p, n in named.items()}
        return self._finish({p: a for p, a in attempts.items() if isinstance(a, _Decided)})

    def _finish(self, decided: dict[str, _Decided]) -> dict[str, TargetFile]:
        sources = [d.source for d in decided.values() if d.source is not None]
        self._fill_data(sources)
        self._remember(sources)
        out: dict[str, TargetFile] = {}
        for p, d in decided.items():
            if d.deletion is not None:
                self._deletions[p] = d.deletion
            else:
                self._deletions.pop(p, None)
            if d.source is None:
                out[p] = d.target
                continue
            _, rec = d.source
            t = d.target
            out[p] = TargetFile(t.path, t.resolved, rec.data, t.mode, t.uid, t.gid, t.layer, t.parents, t.mtime, via=t.via)
        return out

    def peek_dir(self, path: str) -> DirListing | None:
        """The directory at `path` ("" = the root) over the layers scanned so far (see
        fs.types.ListsDirs): every entry some scanned layer holds in it and no scanned layer hides.
        Reads nothing."""
        parents: tuple[DirMeta, ...] = ()
        resolved = ""
        if path:
            tracker = _Tracker(self._view, self.layer_digest, self._nodes)
            try:
                res = resolve(check_member_path(path, what="directory path"), tracker, known=self._known_dirs)
            except BadInput:
                return None
            if not tracker.definite or res.node is None or res.node.kind != "dir":
                return None
            remember_dirs(self._known_dirs, res)
            resolved = res.resolved
            parents = self._dir_metas(res.parents)
            parents += (DirMeta(resolved, res.node.mode, res.node.uid, res.node.gid),)
        names: set[str] = set()
        above = _ancestors(resolved) if resolved else []
        for layer in self._view.layers:
            names.update(layer.children(resolved))
            if layer.opaque.get(resolved) is not None or (resolved and hider(layer, resolved, above) is not None):
                break  # nothing below this layer shows through
            rec = layer.entries.get(resolved) if resolved else None
            if rec is not None and rec.kind != DIR:
                break
        entries: dict[str, Node] = {}
        for child in sorted(names):
            found = self._view.lookup(child)
            if isinstance(found, Found):
                entries[child.rpartition("/")[2]] = found.rec.node(self.layer_digest(found.layer))
        return DirListing(resolved, parents, entries)

    def list_paths(self) -> list[str]:
        """Every non-directory path of the merged filesystem, from tar headers only.

        For rebase's search for moved targets; unlike read_targets it scans every layer.
        """
        while not self._view.complete:
            self._scan_next(set())
        is_dir: dict[str, bool] = {"": True}

        def visible_dir(path: str) -> bool:
            # every ancestor must be a real directory at the top: a symlink or whiteout above hides it
            if path not in is_dir:
                parent = path.rpartition("/")[0]
                found = self._view.lookup(path) if visible_dir(parent) else None
                is_dir[path] = isinstance(found, Found) and found.rec.kind == DIR
            return is_dir[path]

        out: set[str] = set()
        for layer in self._view.layers:
            for path, rec in layer.entries.items():
                if rec.kind == DIR or path in out or not visible_dir(path.rpartition("/")[0]):
                    continue
                found = self._view.lookup(path)
                if isinstance(found, Found) and found.rec.kind != DIR:
                    out.add(path)
        self._remember([])
        return sorted(out)

    # --- whiteouts, for error messages ---
    def deletion(self, path: str) -> Deletion | None:
        """How the last read_targets found `path` (as named) hidden, if it was."""
        return self._deletions.get(path)

    def deleted_by(self, path: str) -> str | None:
        """The digest of the layer whose whiteout (or opaque directory) hides `path`, if any."""
        d = self._deletions.get(path)
        return None if d is None else self.layer_digest(d.layer)

    def describe_deletion(self, path: str) -> str | None:
        """One sentence for an error message: "whited out by layer sha256:… (usr/lib/.wh.foo)"."""
        d = self._deletions.get(path)
        if d is None:
            return None
        layer = self.layer_digest(d.layer) or f"layer {len(self._layers) - d.layer} (from the bottom)"
        if d.how == "whiteout":
            return f"whited out by layer {layer} ({d.marker})"
        if d.how == "opaque":
            return f"hidden by the opaque directory marker {d.marker} in layer {layer}"
        return f"hidden because {d.marker} is not a directory in layer {layer}"

    def layer_digest(self, position: int) -> str | None:
        if self.kind != "image" or position < 0:
            return None
        return self._layers[position].descriptor.digest

    def _dir_metas(self, parents: tuple[tuple[str, Node], ...]) -> tuple[DirMeta, ...]:
        """The DirMeta of each directory on a definite way, made once per directory (1000 targets under
        one tree: 20,000 otherwise); a directory's Node is the view's one answer for it."""
        out = []
        for path, node in parents:
            meta = self._metas.get(path)
            if meta is None or meta[0] is not node:
                meta = self._metas[path] = (node, DirMeta(path, node.mode, node.uid, node.gid))
            out.append(meta[1])
        return tuple(out)

    # --- resolution ---
    def _attempt(self, named: str, as_link: bool = False) -> _Open | _Decided:
        tracker = _Tracker(self._view, self.layer_digest, self._nodes)
        try:
            res = resolve(named, tracker, follow_final=not as_link, known=self._known_dirs)
        except BadInput:
            if tracker.definite:
                raise
            return _Open(frozenset(tracker.unknown) | {named})
        if not tracker.definite:
            return _Open(frozenset(tracker.unknown) | {res.resolved})
        remember_dirs(self._known_dirs, res)
        parents = self._dir_metas(res.parents)
        if res.node is None:
            deletion = tracker.hidden.get(tracker.last_absent) if tracker.last_absent else None
            return _Decided(TargetFile(named, res.resolved, None, parents=parents, via=res.via), None, deletion)
        found = tracker.found[res.resolved]
        rec = found.rec
        if rec.kind == SYMLINK:  # read as itself (as_link): its target is its bytes
            target = rec.linkname.encode("utf-8", "surrogateescape")
            return _Decided(TargetFile(named, res.resolved, target, 0o777, rec.uid, rec.gid, self.layer_digest(found.layer),
                                       parents, rec.mtime, link=True, via=res.via), None, None)
        if rec.kind == DIR:
            raise BadInput(f"Target {named!r} is a directory in the image (at {res.resolved!r}), not a file.")
        if rec.kind == OTHER:
            raise BadInput(f"Target {named!r} is not a regular file in the image (at {res.resolved!r}).")
        source = self._data_source(named, res.resolved, found)
        if isinstance(source, _Open):
            return source
        target = TargetFile(named, res.resolved, None, rec.mode, rec.uid, rec.gid,
                            self.layer_digest(found.layer), parents, rec.mtime, via=res.via)
        return _Decided(target, source, None)

    def _data_source(self, named: str, resolved: str, found: Found) -> tuple[int, Rec] | _Open:
        """The member holding the bytes: the file itself, or what its hard link(s) point to."""
        layer, rec = found.layer, found.rec
        for _ in range(MAX_HARDLINK_HOPS):
            if rec.kind == FILE:
                if rec.sparse:
                    raise BadImage(f"Target {named!r} ({resolved}) is a sparse file in the image; "
                                   "imgquilt does not read sparse tar members.")
                return (layer, rec)
            if rec.kind != HARDLINK:
                kind = "a symlink" if rec.kind == SYMLINK else "a directory" if rec.kind == DIR else "not a file"
                raise BadImage(f"Target {named!r} ({resolved}) is a hard link to {kind}.")
            link = rec.linkname
            result = self._view.lookup(link, start=layer, before=rec.ordinal)
            if result is UNKNOWN:
                return _Open(frozenset({link}))
            if isinstance(result, Absent):
                raise BadImage(f"Target {named!r} ({resolved}) is a hard link to {link!r}, which the "
                               "image does not hold at that point: the layer is broken.")
            assert isinstance(result, Found)
            layer, rec = result.layer, result.rec
        raise BadImage(f"Target {named!r} ({resolved}): too many hard links in a row.")

    # --- reading layers ---
    def _scan_next(self, wanted: set[str], *, ahead: bool = False, kept: set[str] | None = None) -> None:
        """Scan the next layer down (or take its index from the shared cache). `ahead`: meanwhile
        start scanning the one below it in another thread (see the module docstring). `kept`: the
        wanted paths whose bytes are kept (default: all; a path only located keeps none)."""
        wanted = wanted if kept is None else kept
        position = self._view.scanned
        layer = self._layers[position]
        digest = layer.check_digest
        key = self._index_key(position)
        pre = self._ahead.pop(position, None)
        if pre is None and self._cache is not None and key is not None and self._from_cache(position, key):
            return
        if ahead:
            for below in range(position + 1, min(position + layer_reads(), len(self._layers))):
                if below not in self._ahead:
                    self._start_prefetch(below, wanted)
        if pre is not None:
            if self.on_layer is not None and self.on_layer_sized is None:
                pre.counter.attach(self.on_layer(position, len(self._layers), self._label(position)))
            index, verified, seen, key = pre.result()
        elif self.on_layer_sized is not None:
            index, verified, seen, key = self._scan_layer(position, self._keeper(wanted), self._sized_bar(position), None, stored=True)
        else:
            on_bytes = self.on_layer(position, len(self._layers), self._label(position)) if self.on_layer else None
            index, verified, seen, key = self._scan_layer(position, self._keeper(wanted), on_bytes, None)
        if verified and digest is not None:
            self._verified.mark(digest, layer.location, seen)
        if self._cache is not None and key is not None:
            self._dirty.add(position)  # read whole and verified, or from a verified TOC: worth an index
        self._keys[position] = key  # type: ignore[assignment]
        self._view.add(index)
        if key != digest:
            self.stats.layers_from_toc.append(self._label(position))
        self.stats.layers_scanned.append(self._label(position))
        self.stats.members_seen += index.members

    def _keeper(self, wanted: set[str]) -> Callable[[str, int], bool]:
        basenames = {posixpath.basename(w) for w in wanted}
        # the bytecode beside a wanted source (dir/__pycache__/NAME.*.pyc, dir/NAME.pyc): an audit
        # reads it next, and keeping it now spares a second pass over the layer
        pyc_dirs: dict[str, set[str]] = {}
        for w in wanted:
            if w.endswith(".py"):
                d, _, name = w.rpartition("/")
                pyc_dirs.setdefault(f"{d}/__pycache__" if d else "__pycache__", set()).add(name[:-3] + ".")
                pyc_dirs.setdefault(d, set()).add(name[:-3] + ".")

        def likely(path: str) -> bool:
            d, _, name = path.rpartition("/")
            if name in basenames:
                return True
            stems = pyc_dirs.get(d)
            return stems is not None and name.endswith(".pyc") and name[: name.find(".") + 1] in stems

        def keep(path: str, size: int) -> bool:
            if path in wanted:
                return True
            if self._also is not None and self._also_keep(path, size):
                return True
            if size <= KEEP_LIKELY_MAX and likely(path):
                with self._kept_lock:  # two scans may share the budget
                    if self._likely_kept + size <= KEEP_LIKELY_BUDGET:
                        self._likely_kept += size
                        return True
            return False

        return keep

    def _sized_bar(self, position: int) -> Callable[[int], None] | None:
        assert self.on_layer_sized is not None
        layer = self._layers[position]
        size = layer.location.size if layer.location is not None else getattr(layer.descriptor, "size", None)
        return self.on_layer_sized(position, len(self._layers), self._label(position), size)

    def _scan_layer(self, position: int, keep: Callable[[str, int], bool], on_bytes: Callable[[int], None] | None,
                    cancel: threading.Event | None, *, stored: bool = False):
        """(index, verified, fingerprint, cache key) of one layer: from its TOC when it is a seekable
        layer whose TOC can be used, else read whole; safe to run in another thread. `stored`: `on_bytes`
        counts the blob's stored bytes (a progress bar whose total is the manifest's size), and is closed
        at the end."""
        try:
            return self._scan(position, keep, on_bytes, cancel, stored)
        finally:
            close = getattr(on_bytes, "close", None) if stored else None
            if close is not None:
                close()

    def _scan(self, position: int, keep: Callable[[str, int], bool], on_bytes: Callable[[int], None] | None,
              cancel: threading.Event | None, stored: bool):
        layer = self._layers[position]
        ref = self._tocs[position]
        if ref is not None:
            try:
                return self._toc_index(position, ref, cancel), False, None, self._index_key(position)
            except TocUnusable as exc:
                self._unusable(position, str(exc))
        digest = layer.check_digest
        trusted = digest is None or self._verified.is_verified(digest, layer.location)
        with layer.open_stream(trusted=trusted) as stream:
            tar = stream if on_bytes is None else _Counted(stream, on_bytes, stored=stored)
            if cancel is not None:
                tar = _Cancellable(tar, cancel)
            index = scan_layer(tar, position=position, whiteouts=self._view.whiteouts, keep=keep,
                               what=self._what(position))
            return index, stream.verified, stream.fingerprint, digest

    # --- seekable layers (zstd:chunked, eStargz): decided from their TOC, files fetched by range ---
    def _toc_of(self, position: int) -> TocRef | None:
        """The TOC the manifest announces for the layer, when it is one imgquilt can read by range."""
        layer = self._layers[position]
        if self.kind != "image" or getattr(layer, "verify", None) != "blob" or not hasattr(layer, "read_range"):
            return None
        try:
            ref = toc_ref(layer.descriptor.annotations, layer.descriptor.size, compression_of(layer.descriptor.media_type))
        except TocUnusable as exc:
            self._unusable(position, str(exc))
            return None
        if ref is not None and getattr(layer, "location", None) is not None \
                and not walk_locally(ref, layer.descriptor.size, self._walk_local):
            self.stats.read_whole_locally.append(self._label(position))
            return None  # decided from the descriptor alone: the same every run, so its index's cache key too
        return ref

    def _unusable(self, position: int, why: str) -> None:
        self._tocs[position] = None
        self.stats.toc_unusable.append((self._label(position), why))

    def _index_key(self, position: int) -> str | None:
        """The shared cache's key of the layer's index: its digest when read whole; when decided from
        its TOC, the digest and the TOC's checksum together (a TOC only vouches for what the manifest
        naming it says: another manifest may name other bytes under the same layer digest)."""
        digest = self._layers[position].check_digest
        ref = self._tocs[position]
        if ref is None or digest is None:
            return digest
        return sha256_digest(f"imgquilt-toc-index\n{digest}\n{ref.kind}\n{ref.digest}".encode())

    def _toc_index(self, position: int, ref: TocRef, cancel: threading.Event | None = None) -> LayerIndex:
        """The layer's index from its tar-split (layers.tar_split) when its TOC names one, else from its
        tar stream walked by range with its TOC's help (layers.toc_walk); a walk ahead stops at its next
        range request once `cancel` is set."""
        layer = self._layers[position]
        size = layer.descriptor.size
        fetched = [0]

        def read_range(offset: int, length: int) -> bytes | None:
            if cancel is not None and cancel.is_set():
                raise _Cancelled()
            data = layer.read_range(offset, length)
            fetched[0] += len(data or b"")
            return data

        try:
            toc = read_toc(ref, size, read_range, what=self._what(position))
            split = read_tar_split(toc, read_range, what=self._what(position))
            if split is not None:  # checked against the tar-split, as containers/storage does: no walk
                index = tar_split_index(toc, split, position=position, whiteouts=self._view.whiteouts,
                                        what=self._what(position))
                with self._kept_lock:
                    self.stats.layers_by_tar_split += 1
                return index
            local = getattr(layer, "location", None) is not None  # a positioned read, not a round trip
            walked = walk_index(toc, size, read_range, position=position, whiteouts=self._view.whiteouts,
                                what=self._what(position), hole_min=LOCAL_HOLE_MIN if local else HOLE_MIN,
                                max_holes=LOCAL_MAX_HOLES if local else MAX_HOLES)
        finally:
            with self._kept_lock:  # scans ahead walk in threads of their own
                self.stats.range_bytes += fetched[0]
        with self._kept_lock:
            self.stats.runs_skipped += walked.holes
        return walked.index

    def _fetch_by_range(self, wanted: list[tuple[int, Rec]]) -> dict[int, list[Rec]]:
        """Fill the data of files of seekable layers: each one's run of frames by one range read (up to
        layer_reads() at once), decompressed whole: it must give the length the walk of the layer
        found (else the layer is not what the walk read: DigestMismatch, nothing of it is used). Bytes
        that do not hash to the TOC's sha256 are not used either: those files are returned (by layer)
        for a full read of their layer, which checks the blob's digest and says what the stream holds."""
        def fetch(position: int, rec: Rec) -> tuple[Rec, bytes]:
            assert rec.extent is not None
            if not rec.extent[1]:
                return rec, b""
            at, end = rec.extent[1][0][:2]
            got = self._layers[position].read_range(at, end - at)
            if got is None or len(got) != end - at:
                raise BadImage(f"Bytes {at}-{end - 1} of the {self._what(position)} could not be read: the blob is "
                               "truncated, or the registry stopped serving byte ranges.", hint="Run again.")
            return rec, got

        if len(wanted) == 1:
            done = [fetch(*wanted[0])]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=layer_reads(), thread_name_prefix="imgquilt-range") as pool:
                done = list(pool.map(lambda item: fetch(*item), wanted))
        whole: dict[int, list[Rec]] = {}
        for (position, _), (rec, fetched) in zip(wanted, done):
            ref = self._tocs[position]
            assert ref is not None and rec.extent is not None
            self.stats.range_bytes += len(fetched)
            self.stats.files_by_range += 1
            data = run_bytes(rec.extent[1][0], fetched, ref.compression) if rec.extent[1] else b""
            if data is None:
                raise mismatch(
                    f"The bytes of member {rec.ordinal} of the {self._what(position)} (fetched by range) do not "
                    "decompress to the length its tar-split or the walk of its tar stream gives.",
                    hint="The blob was altered, the registry served other bytes, or the layer's TOC says a run of "
                         "its frames holds less than it does.")
            if hashlib.sha256(data).hexdigest() != rec.extent[0]:
                whole.setdefault(position, []).append(rec)  # the stream and the TOC disagree: the full read decides
                self.stats.toc_unusable.append((self._label(position), f"member {rec.ordinal}'s bytes do not hash "
                                                                       "to the TOC's sha256"))
                continue
            rec.data = data
        return whole

    def _start_prefetch(self, position: int, wanted: set[str]) -> None:
        """Scan layer `position` ahead (a thread of its own) when it has no index in the shared cache, on
        a machine with a core to spare: a local blob, a seekable layer's TOC, or a download."""
        if (os.cpu_count() or 1) < 2:
            return
        key = self._index_key(position)
        if self._cache is not None and key is not None and self._cache.has(key):
            return
        keep = self._keeper(set(wanted))
        counter = _LateCounter()
        if self.on_layer_sized is not None:  # shown from now on, beside the layer read at the same time
            bar = self._sized_bar(position)
            self._ahead[position] = _Prefetch(position, lambda cancel: self._scan_layer(position, keep, bar, cancel, stored=True),
                                              counter)
            return
        self._ahead[position] = _Prefetch(position, lambda cancel: self._scan_layer(position, keep, counter, cancel),
                                          counter)

    def _stop_prefetch(self) -> None:
        """Cancel every scan ahead still running (the targets were decided without those layers): a
        download stops after what was in flight, nothing of it is used. A scan ahead that has already
        ended whole is kept for the next read that goes down to its layer (the Python check looking up
        a module below the targets): reading that layer again would redo what is done (measured: the
        lower two layers of vLLM, 1.5 s of a 4.7 s cold `lock` of 8 patches)."""
        ahead, self._ahead = self._ahead, {}
        running = []
        for position, pre in ahead.items():
            if pre.ended_whole():
                self._ahead[position] = pre
            else:
                pre.cancel()  # all of them first: none goes on reading while another is waited for
                running.append(pre)
        for pre in running:
            pre.stop()

    # --- the shared cache: layer indexes and file bytes ---
    def _from_cache(self, position: int, key: str) -> bool:
        """Take the layer's index from the shared cache, if it holds a sound one."""
        assert self._cache is not None
        payload = self._cache.load(key)
        if payload is None:
            return False
        index = load_index(payload, layer_digest=key, whiteouts=self._view.whiteouts, position=position)
        if index is None:
            self._cache.forget(key)  # not this layer's index: read the layer again, index it anew
            return False
        if self._tocs[position] is None and not self._check_blob(position, key):
            return False
        self._keys[position] = key
        self._view.add(index)
        self.stats.layers_from_cache.append(self._label(position))
        return True

    def _check_blob(self, position: int, digest: str) -> bool:
        """The local blob must be the one the index describes: hashed (never decompressed) unless this
        file, unchanged, was verified before. False: only decompressing can check it (a compressed
        layer named by its diff_id), so the layer is read as if there were no index."""
        layer = self._layers[position]
        if layer.location is None:
            # a registry blob: the index was built from bytes checked against this very digest when
            # they were downloaded, and a digest names one content
            return True
        if self._verified.is_verified(digest, layer.location):
            return True
        if layer.verify != "blob" and layer.compression != "none":
            return False
        seen = fingerprint(layer.location.path)
        with HashingRange(layer.location, digest, what=self._what(position)) as blob:
            blob.drain()  # DigestMismatch (exit 6) on a damaged blob
        self._verified.mark(digest, layer.location, seen)
        return True

    def _remember(self, sources: list[tuple[int, Rec]]) -> None:
        """Store the bytes of files read (by sha256) and write the indexes that are new or grew."""
        if self._cache is None:
            return
        for position, rec in sources:
            if rec.data is not None and rec.sha is None and self._layers[position].check_digest is not None:
                rec.sha = self._cache.files.put(rec.data)
                self._dirty.add(position)
        for position in sorted(self._dirty):
            key = self._keys.get(position)
            if key is not None and position < self._view.scanned:
                self._cache.save(key, dump_index(self._view.layers[position], key, self._view.whiteouts))
        self._dirty.clear()

    def _fill_data(self, sources: list[tuple[int, Rec]]) -> None:
        missing: dict[int, list[Rec]] = {}
        cached = {}
        if self._cache is not None:  # each checked against its sha256, read in one pass over the cache's directories
            cached = self._cache.files.get_many([rec.sha for _, rec in sources if rec.data is None and rec.sha is not None])
        for position, rec in sources:
            if rec.data is None and rec.sha is not None and self._cache is not None:
                rec.data = cached.get(rec.sha)
                if rec.data is None:
                    rec.sha = None  # gone or damaged: read the layer, store it again
                else:
                    self.stats.files_from_cache += 1
            if rec.data is None and rec not in missing.get(position, []):
                missing.setdefault(position, []).append(rec)
        by_range = [(position, r) for position, recs in sorted(missing.items()) for r in recs if r.extent is not None]
        whole = self._fetch_by_range(by_range) if by_range else {}
        for position, recs in sorted(missing.items()):
            rest = [r for r in recs if r.extent is None] + whole.get(position, [])
            if rest:
                self._second_pass(position, rest)

    def _second_pass(self, position: int, recs: list[Rec]) -> None:
        layer = self._layers[position]
        what = self._what(position)
        digest = layer.check_digest
        trusted = digest is None or self._verified.is_verified(digest, layer.location)
        self.stats.second_passes.append(self._label(position))
        found: dict[int, object] = {}
        if trusted and layer.compression == "none":
            with FileRange(layer.location, what=what) as f:
                for rec in recs:
                    if rec.size > spool_at():  # copied to a spooled temp file: never held
                        if rec.offset + rec.size > layer.location.size:
                            raise BadImage(f"The {what} is truncated.")
                        found[rec.ordinal] = copy_to_spool(f.fileno(), shown=what, offset=layer.location.offset + rec.offset,
                                                           size=rec.size)
                        continue
                    data = f.pread(rec.size, rec.offset)
                    if len(data) != rec.size:
                        raise BadImage(f"The {what} is truncated.")
                    found[rec.ordinal] = data
        else:
            wanted = {rec.ordinal for rec in recs}
            last = max(wanted)
            index = self._view.layers[position] if position < len(self._view.layers) else None
            # keep_also(): a pass for one module keeps its package's other modules too, reading the layer
            # to its end (one more pass instead of one per module)
            also = self._also is not None and index is not None and self._also_budget > 0
            # shown like the first read: a second pass for modules the Python check asks for, or a file
            # not kept, may take as long as the first (issue 37: no silent waits)
            on_bytes = self._sized_bar(position) if self.on_layer_sized is not None else \
                (self.on_layer(position, len(self._layers), self._label(position)) if self.on_layer else None)
            try:
                self._walk_again(layer, trusted, what, recs, wanted, last, also, index, digest, found, on_bytes)
            finally:
                close = getattr(on_bytes, "close", None) if self.on_layer_sized is not None else None
                if close is not None:
                    close()
        for rec in recs:
            if rec.ordinal not in found:
                raise BadImage(f"The {what} changed while imgquilt read it (member {rec.ordinal} is gone).")
            rec.data = found[rec.ordinal]

    def _walk_again(self, layer, trusted: bool, what: str, recs: list[Rec], wanted: set[int], last: int, also: bool,
                    index, digest: str | None, found: dict[int, object], on_bytes: Callable[[int], None] | None) -> None:
        """The second pass's walk of a compressed layer (see _second_pass)."""
        with layer.open_stream(trusted=trusted) as raw_stream:
            stream = raw_stream if on_bytes is None else _Counted(raw_stream, on_bytes, stored=self.on_layer_sized is not None)
            walker = TarWalker(stream, what=what)
            by_ordinal = {rec.ordinal: rec for rec in recs}
            for entry in walker:
                if entry.ordinal in wanted:
                    rec = by_ordinal[entry.ordinal]
                    if (entry.offset, entry.size) != (rec.offset, rec.size):
                        # the index was not made from this stream (a seekable layer's walk skipped data that
                        # held more than its TOC said): nothing from it is used
                        raise mismatch(f"Member {rec.ordinal} of the {what} is not where the walk of the layer "
                                       "by its TOC found it.",
                                       hint="The layer's TOC says a run of its frames holds less than it does.")
                    found[entry.ordinal] = walker.read_content()
                elif also and entry.type in ("0", "\0") and not entry.sparse and index is not None:
                    path = _member_path_or_none(entry.name)
                    rec = index.entries.get(path) if path else None
                    if rec is not None and rec.ordinal == entry.ordinal and rec.data is None and rec.kind == FILE \
                            and self._also_keep(path, entry.size):
                        rec.data = walker.read_data()  # a module kept for the Python check: small
                if trusted and entry.ordinal >= last and not also:
                    break
            if not trusted:
                walker.finish()  # verify before using anything
                if raw_stream.verified and digest is not None:
                    self._verified.mark(digest, layer.location, raw_stream.fingerprint)

    def _label(self, position: int) -> str:
        return self.layer_digest(position) or f"tar:{self._layers[position].location.path}"

    def _what(self, position: int) -> str:
        if self.kind != "image":
            return f"tar file {self._layers[position].location.path}"
        return f"layer {self.layer_digest(position)}"


def _member_path_or_none(name: str) -> str | None:
    try:
        return member_path(name)
    except BadInput:
        return None


class _Cancelled(Exception):
    """A scan ahead that is no longer wanted."""


class _Cancellable(Wrapper):
    """A layer's tar stream that stops (raises _Cancelled) once `cancel` is set."""

    def __init__(self, stream, cancel: threading.Event) -> None:
        super().__init__(stream)
        self._cancel = cancel

    def _read_some(self, n: int) -> bytes:
        if self._cancel.is_set():
            raise _Cancelled()
        return self._inner.read(n)

    def _skip_some(self, n: int) -> int:
        if self._cancel.is_set():
            raise _Cancelled()
        return self._inner.skip(n)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


class _LateCounter:
    """Byte counts of a scan ahead, held until a progress bar exists for it (when it is used)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = 0
        self._sink: Callable[[int], None] | None = None

    def __call__(self, n: int) -> None:
        with self._lock:
            if self._sink is None:
                self._pending += n
                return
            sink = self._sink
        sink(n)

    def attach(self, sink: Callable[[int], None] | None) -> None:
        if sink is None:
            return
        with self._lock:
            self._sink, pending, self._pending = sink, self._pending, 0
        sink(pending)


class _Prefetch:
    """One layer scanned by a thread of its own; `result()` waits for it (and raises its error),
    `stop()` cancels it and waits, using nothing."""

    def __init__(self, position: int, run: Callable[[threading.Event], tuple], counter: _LateCounter) -> None:
        self.position = position
        self.counter = counter
        self._cancel = threading.Event()
        self._result: tuple | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._go, args=(run,), name="imgquilt-scan-ahead", daemon=True)
        self._thread.start()

    def _go(self, run: Callable[[threading.Event], tuple]) -> None:
        mark_ahead()  # its decompression yields the CPU to the read the command waits on (util.threads)
        try:
            self._result = run(self._cancel)
        except BaseException as exc:  # handed to whoever uses the scan; dropped if nobody does
            self._error = exc

    def result(self) -> tuple:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        self._cancel.set()

    def ended_whole(self) -> bool:
        """Whether the scan has ended with its layer read to the end (not cancelled, no error)."""
        return not self._thread.is_alive() and self._error is None and self._result is not None and not self._cancel.is_set()

    def stop(self) -> None:
        self._cancel.set()
        self._thread.join()


class _Counted(Wrapper):
    """A layer's tar stream that reports the bytes read or skipped through it (for a progress bar):
    the tar's, or (`stored`) the stored blob's, read by the decompressor so far, in the manifest's unit
    (a download reports its own: ImageSource.watch_downloads)."""

    def __init__(self, stream, on_bytes: Callable[[int], None], *, stored: bool = False) -> None:
        super().__init__(stream)
        self._on_bytes = on_bytes
        self._stored = stored
        self._last = 0

    def _report(self, n: int) -> None:
        if not self._stored:
            self._on_bytes(n)
            return
        now = getattr(self._inner, "stored_read", None)
        if isinstance(now, int) and now > self._last:
            self._on_bytes(now - self._last)
            self._last = now

    def _read_some(self, n: int) -> bytes:
        data = self._inner.read(n)
        self._report(len(data))
        return data

    def _skip_some(self, n: int) -> int:
        done = self._inner.skip(n)
        self._report(done)
        return done

    def __getattr__(self, name: str):
        return getattr(self._inner, name)
