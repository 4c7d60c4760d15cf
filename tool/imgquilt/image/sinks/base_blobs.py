"""The base image's blobs as a sink copies them: found where they lie, verified on the way."""
from __future__ import annotations

import os
from pathlib import Path

from ..digests import CopyCheck
from ..layers.blobio import BlobLocation, FileRange, Fingerprint, HashingRange, HashingStream
from ..model import BlobAtLocation, BlobInFile, Image, Layer

WHAT = "base layer blob"
HINT = "The base image is corrupt: fetch it again; nothing was written."


def blob_location(layer: Layer) -> BlobLocation | None:
    """Where the layer's stored bytes lie, when its reader says so."""
    size = layer.descriptor.size
    if isinstance(layer, BlobAtLocation) and isinstance(layer.location, BlobLocation):
        return BlobLocation(layer.location.path, layer.location.offset, size)
    if isinstance(layer, BlobInFile):
        return BlobLocation(Path(layer.blob_path), 0, size)
    return None


def verified_fingerprint(layer: Layer) -> Fingerprint | None:
    """The blob file's fingerprint when the source that read it knows it verified (this process, or its
    marker for this very file: device, inode, size, mtime, ctime); None: it must be hashed."""
    verifier = getattr(layer, "verified_by", None)
    loc = blob_location(layer)
    if verifier is None or loc is None:
        return None
    return verifier.trusted_now(layer.descriptor.digest, loc)


def open_checked(layer: Layer) -> HashingRange | HashingStream | FileRange:
    """The blob's bytes, hashed as they are read: the end (and `drain()`) raise DigestMismatch on a bad blob.

    Read straight from the file when the reader says where the blob lies (one hash, not two), else
    through the layer's own `open_blob()`; a blob file known verified is read without hashing it
    again. A caller reads to the end (`drain()`) before it keeps a copy.
    """
    d = layer.descriptor
    loc = blob_location(layer)
    check = CopyCheck(d.size, HINT)
    if loc is not None:
        if verified_fingerprint(layer) is not None and os.stat(loc.path).st_size >= loc.offset + d.size:
            return FileRange(loc, what=WHAT)
        return HashingRange(loc, d.digest, what=WHAT, copy=check)
    return HashingStream(layer.open_blob(), d.digest, what=WHAT, copy=check)


def check_file(path: Path, layer: Layer) -> None:
    """Verify a whole file (a hard link to a base blob) against the layer's descriptor."""
    d = layer.descriptor
    with HashingRange(BlobLocation(path, 0, d.size), d.digest, what=WHAT, copy=CopyCheck(d.size, HINT)) as r:
        r.drain()


def unique_layers(base: Image) -> list[Layer]:
    """The base layers, each blob once (an image may repeat a layer)."""
    seen: set[str] = set()
    out = []
    for l in base.layers:
        if l.descriptor.digest not in seen:
            seen.add(l.descriptor.digest)
            out.append(l)
    return out
