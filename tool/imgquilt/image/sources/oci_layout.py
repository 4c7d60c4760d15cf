"""`oci:DIR[:TAG|@DIGEST]`: an OCI image layout directory (oci-layout, index.json, blobs/)."""
from __future__ import annotations

from pathlib import Path

from ...errors import BadImage
from ...util.jsonin import member_or_none
from ..layers.blobio import BlobLocation, file_location
from ..digests import split_digest
from .oci_reader import index_entries, load_image, parse_json, select_top
from .stored_image import StoredImage


class LayoutStore:
    """Blobs of a layout directory: blobs/<algo>/<hex>."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = f"OCI layout {root}"

    def locate(self, digest: str) -> BlobLocation | None:
        algo, hexpart = split_digest(digest)
        return file_location(self.root / "blobs" / algo / hexpart)


def check_layout_marker(data: bytes | None, where: str) -> None:
    if data is None:
        raise BadImage(f"{where} is not an OCI image layout: it has no oci-layout file.")
    version = member_or_none(data, "imageLayoutVersion")
    if not isinstance(version, str):
        raise BadImage(f"{where} has an unreadable oci-layout file.")


def open_oci_layout(root: Path, *, ref: str, tag: str | None, digest: str | None,
                    platform: str | None) -> StoredImage:
    store = LayoutStore(root)
    if not root.is_dir():
        raise BadImage(f"{store.where} does not exist or is not a directory.")
    try:
        marker = (root / "oci-layout").read_bytes()
    except OSError:
        marker = None
    check_layout_marker(marker, store.where)
    try:
        index_bytes = (root / "index.json").read_bytes()
    except OSError as exc:
        raise BadImage(f"{store.where} has no readable index.json ({exc.strerror}).") from None
    entries = index_entries(parse_json(index_bytes, f"index.json of {store.where}"), f"index.json of {store.where}")
    desc = select_top(entries, tag=tag, digest=digest, platform=platform, where=store.where, store=store)
    names = tuple(n for e in entries if e.digest == desc.digest for n in e.names)
    return load_image(store, desc, ref=ref, platform=platform, transport="oci", names=names)
