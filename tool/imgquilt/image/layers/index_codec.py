"""A LayerIndex to bytes and back, for the shared cache (cache.layers).

marshal, because loading is what a warm run pays for: it reads a 100,000-member index several times
faster than JSON. Its bytes are only ever read after their sha256 matched (cache.DigestStore), and
carry the format, the layer digest and the whiteout mode, which are checked again on load.
"""
from __future__ import annotations

import marshal

from .layer_index import LayerIndex, Rec

FORMAT = "imgquilt-layer-index-1"


def dump_index(index: LayerIndex, layer_digest: str, whiteouts: bool) -> bytes:
    """The index as bytes; the `sha` of each file member whose bytes are stored is kept, data is not."""
    entries = tuple((path, r.kind, r.mode, r.uid, r.gid, r.size, r.linkname, r.ordinal, r.offset, r.sparse,
                     r.sha or "") for path, r in index.entries.items())
    return marshal.dumps((FORMAT, layer_digest, whiteouts, index.members, entries,
                          tuple(index.whiteouts.items()), tuple(index.opaque.items()), tuple(index.implicit)), 4)


def load_index(payload: bytes, *, layer_digest: str, whiteouts: bool, position: int) -> LayerIndex | None:
    """The index, or None when `payload` is not one of this layer's (any mismatch: rebuild, never trust)."""
    try:
        fmt, digest, wh_mode, members, entries, wh, opq, implicit = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if fmt != FORMAT or digest != layer_digest or wh_mode != whiteouts:
        return None
    recs: dict[str, Rec] = {}
    try:
        for path, kind, mode, uid, gid, size, link, ordinal, offset, sparse, sha in entries:
            rec = Rec(kind, mode, uid, gid, size, link, ordinal, offset, sparse)
            if sha:
                rec.sha = sha
            recs[path] = rec
        return LayerIndex(position, recs, dict(wh), dict(opq), set(implicit), members, 0)
    except (TypeError, ValueError):
        return None
