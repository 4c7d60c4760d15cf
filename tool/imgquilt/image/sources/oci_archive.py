"""`oci-archive:FILE[:TAG]`: a tar of an OCI layout, read in place through a member index."""
from __future__ import annotations

from pathlib import Path

from ...errors import BadImage
from .archive_index import ArchiveIndex
from ..layers.blobio import BlobLocation
from ..digests import split_digest
from .oci_layout import check_layout_marker
from .oci_reader import index_entries, load_image, parse_json, select_top
from .stored_image import StoredImage


class ArchiveStore:
    """Blobs that are members blobs/<algo>/<hex> of an archive."""

    def __init__(self, index: ArchiveIndex, where: str) -> None:
        self.index = index
        self.where = where

    def locate(self, digest: str) -> BlobLocation | None:
        algo, hexpart = split_digest(digest)
        return self.index.location(f"blobs/{algo}/{hexpart}")


def open_oci_archive(path: Path, *, ref: str, tag: str | None, digest: str | None,
                     platform: str | None, index: ArchiveIndex | None = None) -> StoredImage:
    where = f"OCI archive {path}"
    if index is None:
        index = ArchiveIndex.build(path, what="OCI archive")
    check_layout_marker(index.read("oci-layout", limit=1 << 16), where)
    index_bytes = index.read("index.json", limit=16 << 20)
    if index_bytes is None:
        raise BadImage(f"{where} has no index.json.")
    store = ArchiveStore(index, where)
    entries = index_entries(parse_json(index_bytes, f"index.json of {where}"), f"index.json of {where}")
    desc = select_top(entries, tag=tag, digest=digest, platform=platform, where=where, store=store)
    names = tuple(n for e in entries if e.digest == desc.digest for n in e.names)
    return load_image(store, desc, ref=ref, platform=platform, transport="oci-archive", names=names)
