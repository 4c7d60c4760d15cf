"""A LayerIndex to bytes and back, for the shared cache (cache.layers).

marshal, because loading is what a warm run pays for, and members grouped per directory so that a
warm run decodes only the directories it looks into (see LazyRecs).
The bytes are only ever read after their sha256 matched (cache.DigestStore), and carry the format,
the layer digest and the whiteout mode, which are checked again on load.
"""
from __future__ import annotations

import marshal
from typing import Iterator, Mapping

from ...util.gcpause import collector_paused
from .layer_index import LayerIndex, Rec

FORMAT = "imgquilt-layer-index-6"  # 4: seekable layers' extents; 5: members carry their mtime; 6: extents are runs walked from the tar stream
_Raw = tuple  # (kind, mode, uid, gid, size, linkname, ordinal, offset, sparse, sha or "", extent or None, mtime)


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


class LazyRecs(Mapping[str, Rec]):
    """A layer's members by path, stored per directory as marshal bytes: a directory is decoded when
    something in it is looked up, and a member becomes a Rec (once) when it is asked for. A warm run
    looks up a few paths in a layer of 50,000 members, so it decodes a few directories."""

    __slots__ = ("_buckets", "_decoded", "_made", "_count")

    def __init__(self, buckets: dict[str, bytes], count: int) -> None:
        self._buckets = buckets
        self._decoded: dict[str, dict[str, _Raw]] = {}
        self._made: dict[str, Rec] = {}
        self._count = count

    @classmethod
    def of_raw(cls, grouped: dict[str, dict[str, _Raw]]) -> "LazyRecs":
        """Members already in their stored form, grouped per directory (a seekable layer's TOC gives
        them so): a Rec is made only for a member something asks for, as after loading."""
        recs = cls({}, sum(len(b) for b in grouped.values()))
        recs._decoded = grouped
        return recs

    def _bucket(self, directory: str) -> dict[str, _Raw]:
        got = self._decoded.get(directory)
        if got is None:
            blob = self._buckets.get(directory)
            got = marshal.loads(blob) if blob is not None else {}
            self._decoded[directory] = got
        return got

    def get(self, path: str, default=None):  # type: ignore[override]
        rec = self._made.get(path)
        if rec is not None:
            return rec
        t = self._bucket(_parent(path)).get(path)
        if t is None:
            return default
        rec = Rec(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[11])
        if t[9]:
            rec.sha = t[9]
        if t[10] is not None:
            rec.extent = t[10]
        self._made[path] = rec
        return rec

    def __getitem__(self, path: str) -> Rec:
        rec = self.get(path)
        if rec is None:
            raise KeyError(path)
        return rec

    def paths_in(self, directory: str) -> list[str]:
        """The member paths directly in `directory` (decodes that directory only)."""
        return list(self._bucket(directory))

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and path in self._bucket(_parent(path))

    def _directories(self) -> list[str]:
        return list(self._buckets) + [d for d in self._decoded if d not in self._buckets]

    def __iter__(self) -> Iterator[str]:
        for directory in self._directories():
            yield from self._bucket(directory)

    def __len__(self) -> int:
        return self._count

    def buckets(self) -> dict[str, bytes]:
        """The stored form, with what was learnt since loading (a stored file's sha)."""
        out = dict(self._buckets)
        for directory, bucket in self._decoded.items():
            if directory not in out:
                out[directory] = marshal.dumps(bucket, 4)
        for directory in {_parent(p) for p in self._made}:
            bucket = dict(self._bucket(directory))
            for path, t in bucket.items():
                rec = self._made.get(path)
                if rec is not None:
                    bucket[path] = _raw_of(rec)
            out[directory] = marshal.dumps(bucket, 4)
        return out


def _raw_of(r: Rec) -> _Raw:
    return (r.kind, r.mode, r.uid, r.gid, r.size, r.linkname, r.ordinal, r.offset, r.sparse, r.sha or "", r.extent,
            r.mtime)


def dump_index(index: LayerIndex, layer_digest: str, whiteouts: bool) -> bytes:
    """The index as bytes; the `sha` of each file member whose bytes are stored is kept, data is not."""
    entries = index.entries
    if isinstance(entries, LazyRecs):
        buckets = entries.buckets()
    else:
        grouped: dict[str, dict[str, _Raw]] = {}
        for path, r in entries.items():  # inlined: a cold run pays this for every member of every layer
            bucket = grouped.get(path.rpartition("/")[0])
            if bucket is None:
                bucket = grouped[path.rpartition("/")[0]] = {}
            bucket[path] = (r.kind, r.mode, r.uid, r.gid, r.size, r.linkname, r.ordinal, r.offset, r.sparse,
                            r.sha or "", r.extent, r.mtime)
        buckets = {d: marshal.dumps(b, 4) for d, b in grouped.items()}
    return marshal.dumps((FORMAT, layer_digest, whiteouts, index.members, len(entries), buckets,
                          index.whiteouts, index.opaque, tuple(index.implicit)), 4)


def load_index(payload: bytes, *, layer_digest: str, whiteouts: bool, position: int) -> LayerIndex | None:
    """The index, or None when `payload` is not one of this layer's (any mismatch: rebuild, never trust)."""
    try:
        with collector_paused():  # tens of thousands of new tuples would set off collections that find nothing to free
            fmt, digest, wh_mode, members, count, buckets, wh, opq, implicit = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if fmt != FORMAT or digest != layer_digest or wh_mode != whiteouts:
        return None
    if not (isinstance(buckets, dict) and isinstance(wh, dict) and isinstance(opq, dict)):
        return None
    return LayerIndex(position, LazyRecs(buckets, count), wh, opq, set(implicit), members, 0)  # type: ignore[arg-type]
