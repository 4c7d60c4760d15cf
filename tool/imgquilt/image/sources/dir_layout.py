"""`dir:DIR`: skopeo's directory transport (manifest.json, version, blobs named by hex digest).

imgquilt copies other transports (docker://, containers-storage:, ...) through `skopeo copy` into
this form because it keeps the source's manifest byte for byte, so the digest imgquilt pins is the
registry's, not that of a converted copy.
"""
from __future__ import annotations

from pathlib import Path

from ...errors import BadImage
from ..layers.blobio import BlobLocation, file_location, read_verified
from ..digests import sha256_digest, split_digest
from ..model import Descriptor
from .oci_reader import MAX_MANIFEST, load_image
from .stored_image import StoredImage

VERSION_PREFIX = b"Directory Transport Version"


def is_dir_layout(root: Path) -> bool:
    try:
        return (root / "version").read_bytes().startswith(VERSION_PREFIX) and (root / "manifest.json").is_file()
    except OSError:
        return False


class DirStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = f"directory image {root}"

    def locate(self, digest: str) -> BlobLocation | None:
        algo, hexpart = split_digest(digest)
        return file_location(self.root / (hexpart if algo == "sha256" else f"{algo}-{hexpart}"))


def open_dir_layout(root: Path, *, ref: str, platform: str | None) -> StoredImage:
    store = DirStore(root)
    if not is_dir_layout(root):
        raise BadImage(f"{root} is not a skopeo directory image (no version and manifest.json files).")
    top = (root / "manifest.json").read_bytes()
    if len(top) > MAX_MANIFEST:
        raise BadImage(f"{store.where}: manifest.json is too large.")
    top_digest = sha256_digest(top)

    def read_manifest(desc: Descriptor) -> bytes:
        if desc.digest == top_digest:
            return top
        _, hexpart = split_digest(desc.digest)
        instance = root / f"{hexpart}.manifest.json"
        loc = file_location(instance) or store.locate(desc.digest)
        if loc is None:
            raise BadImage(f"{store.where} lacks manifest {desc.digest}.")
        return read_verified(loc, desc.digest, what="manifest", limit=MAX_MANIFEST)

    return load_image(store, Descriptor("", top_digest, len(top)), ref=ref, platform=platform,
                      transport="dir", read_manifest=read_manifest)
