"""Write a new image to `oci:DIR[:TAG]`, an OCI image layout directory.

A new DIR is built in a temp directory beside it and renamed into place. An existing OCI layout is
added to: blobs are content-addressed (each written to a temp name and renamed; present ones are
kept), then index.json is replaced atomically under an flock on the layout directory, dropping any
earlier manifest with the same tag. Adding to an existing layout needs a TAG. On failure the blobs
this call created are removed again. Base blobs are hard-linked when they sit on the same
filesystem (and verified after linking), streamed and verified otherwise.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from ...errors import BadImage, LinkedState, UsageError
from ...fs.content import Data
from ...util.atomic import atomic_file, publish
from ...util.regular import read_regular_file
from ..mediatypes import OCI_INDEX
from ..layers.blobio import fingerprint
from ..model import Layer
from ..referrers import Referrer
from .base_blobs import blob_location, check_file, open_checked, unique_layers, verified_fingerprint
from .mutate import ANNOTATION_REF_NAME, NewImage, index_entry, json_bytes, sha256
from .output_file import output_dir, output_file, put_content

COPY_CHUNK = 1 << 20
LAYOUT_MARKER = {"imageLayoutVersion": "1.0.0"}


class _BlobDir:
    """Puts blobs into a layout's blobs/sha256; remembers the ones it created (to undo)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"
        self.created: list[Path] = []

    def path(self, digest: str) -> Path:
        algo, _, hexd = digest.partition(":")
        if algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexd):
            raise BadImage(f"Unsupported blob digest {digest!r} (only sha256 is supported).")
        return self.blobs / hexd

    def has(self, digest: str, size: int) -> bool:
        try:
            return self.path(digest).stat().st_size == size
        except FileNotFoundError:
            return False

    def put_bytes(self, digest: str, data: Data) -> None:
        if self.has(digest, len(data)):
            return
        dest = self.path(digest)
        put_content(dest, data)  # bytes written as atomic_write does, a Spooled linked where it can be
        self.created.append(dest)

    def put_layer(self, layer: Layer) -> None:
        d = layer.descriptor
        if self.has(d.digest, d.size):
            return
        loc = blob_location(layer)
        if loc is not None and loc.offset == 0 and self._link(loc.path, layer):
            return
        dest = self.path(d.digest)
        with closing(open_checked(layer)) as src, atomic_file(dest) as fh:
            while chunk := src.read(COPY_CHUNK):
                fh.write(chunk)
            src.drain()
        self.created.append(dest)

    def _link(self, src: Path, layer: Layer) -> bool:
        """Hard-link a base blob (same filesystem), then hash it, unless the source knows it verified that
        very file (its fingerprint): a bad blob is never kept. The link and its rename change the base
        file's ctime, nothing else: it stays known verified (device, inode, size and mtime checked)."""
        d = layer.descriptor
        dest = self.path(d.digest)
        tmp = dest.with_name(f".{dest.name}.link.{os.getpid()}")
        loc = blob_location(layer)
        verifier = getattr(layer, "verified_by", None)
        trusted = verified_fingerprint(layer)
        try:
            if os.stat(src).st_size != d.size:
                return False  # the blob is part of a larger file: copy it instead
            before = fingerprint(src)
            os.link(src, tmp)
        except OSError:
            return False
        try:
            if trusted is None or fingerprint(tmp)[:4] != trusted[:4]:
                check_file(tmp, layer)
            publish(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if verifier is not None and loc is not None:
            verifier.relinked(d.digest, loc, before)
        self.created.append(dest)
        return True

    def fill(self, img: NewImage) -> None:
        for l in unique_layers(img.base):
            self.put_layer(l)
        if img.layer is not None:
            self.put_bytes(img.layer.digest, img.layer.data)
        self.put_bytes(img.config_digest, img.config)
        self.put_bytes(img.manifest_digest, img.manifest)

    def undo(self) -> None:
        for p in self.created:
            p.unlink(missing_ok=True)
        self.created.clear()


@contextmanager
def _locked_dir(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_layout(path: Path) -> bool:
    return path.is_dir() and (path / "oci-layout").exists()


def check_layout_destination(path: Path, tag: str | None) -> None:
    """Refuse a bad `oci:` destination before anything is computed or written."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"Cannot write an OCI layout to {str(path)!r}: it is not a directory.")
    if is_layout(path):
        if not tag:
            raise UsageError(
                f"{str(path)!r} already holds an OCI layout: name a tag to add the image under.",
                hint=f"Write to oci:{path}:TAG.",
            )
        return
    if path.is_dir() and any(path.iterdir()):
        raise UsageError(f"Cannot write an OCI layout to {str(path)!r}: the directory is not empty and holds no OCI layout.")
    if not path.parent.is_dir():
        raise UsageError(f"Cannot write an OCI layout to {str(path)!r}: directory {str(path.parent)!r} does not exist.")


def write_layout(img: NewImage, root: Path, tag: str | None, referrers: Sequence[Referrer] = ()) -> None:
    """Write `img` (and its referrers: attestations) to the layout at `root` (a new one, or added to an
    existing one); whole or not at all."""
    _write(root, tag, index_entry(img, tag), lambda w: w.fill(img), referrers)


def write_layout_index(images: list[NewImage], index: bytes, root: Path, tag: str | None,
                       referrers: Sequence[Referrer] = ()) -> None:
    """Write every image and the image index `index` over them, tagged `tag`; whole or not at all."""
    entry: dict = {"mediaType": OCI_INDEX, "digest": sha256(index), "size": len(index)}
    if tag:
        entry["annotations"] = {ANNOTATION_REF_NAME: tag}

    def fill(w: _BlobDir) -> None:
        for img in images:
            w.fill(img)
        w.put_bytes(entry["digest"], index)

    _write(root, tag, entry, fill, referrers)


def _write(root: Path, tag: str | None, entry: dict, fill, referrers: Sequence[Referrer] = ()) -> None:
    check_layout_destination(root, tag)
    entries = [entry] + [r.descriptor() for r in referrers]

    def fill_all(w: _BlobDir) -> None:
        fill(w)
        for r in referrers:  # a referrer's blobs, then its manifest: index.json comes last
            for digest, data in r.blobs:
                w.put_bytes(digest, data)
            w.put_bytes(r.digest, r.manifest)

    if is_layout(root):
        _add_to_layout(root, entries, fill_all)
        return
    with output_dir(root, failure=f"Cannot write an OCI layout to {str(root)!r}") as tmp:
        (tmp / "blobs" / "sha256").mkdir(parents=True)
        fill_all(_BlobDir(tmp))
        (tmp / "oci-layout").write_bytes(json_bytes(LAYOUT_MARKER))
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        (tmp / "index.json").write_bytes(json_bytes(index))


def _no_links(root: Path) -> None:
    """An existing layout is untrusted: `blobs/` or `blobs/sha256` as a link (or not a directory), or
    index.json as a link, would put what imgquilt writes somewhere else."""
    for rel, want_dir in (("blobs", True), ("blobs/sha256", True), ("index.json", False)):
        try:
            st = os.lstat(root / rel)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise LinkedState(f"{root / rel} in the output layout is a symlink; imgquilt does not write through it.",
                              hint=f"Replace {root / rel} with a real {'directory' if want_dir else 'file'}, or write to a new layout.")
        if stat.S_ISDIR(st.st_mode) != want_dir or not (want_dir or stat.S_ISREG(st.st_mode)):
            raise BadImage(f"{root / rel} in the output layout is not a {'directory' if want_dir else 'regular file'}.")


def _read_index(root: Path) -> dict:
    """The layout's index.json, checked to be what imgquilt can add to (before any blob is written)."""
    path = root / "index.json"
    data = read_regular_file(path, cap=64 << 20, follow=False)
    if data is None:
        return {"schemaVersion": 2, "manifests": []}
    try:
        index = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BadImage(f"{path} is not valid JSON: {exc}.") from None
    manifests = index.get("manifests", []) if isinstance(index, dict) else None
    if not isinstance(manifests, list) or not all(isinstance(m, dict) and isinstance(m.get("annotations") or {}, dict) for m in manifests):
        raise BadImage(f"{path} is not an OCI image index: \"manifests\" must be a list of descriptors.",
                       hint="Repair the layout or write the image to a new one.")
    return index


def _add_to_layout(root: Path, entries: list[dict], fill) -> None:
    """Add the blobs, then `entries` to index.json: the first (the image) replaces one with its tag,
    the others (referrers) one with their digest."""
    w = _BlobDir(root)
    tag = (entries[0].get("annotations") or {}).get(ANNOTATION_REF_NAME)
    added = {e["digest"] for e in entries[1:]}
    _no_links(root)
    _read_index(root)  # refuse a damaged layout before a blob goes in
    try:
        w.blobs.mkdir(parents=True, exist_ok=True)
        with _locked_dir(root):
            _no_links(root)
            index = _read_index(root)  # again, under the lock: another writer may have changed it
            fill(w)
            kept = [m for m in index.get("manifests") or []
                    if (m.get("annotations") or {}).get(ANNOTATION_REF_NAME) != tag and m.get("digest") not in added]
            index["manifests"] = kept + entries
            with output_file(root / "index.json", what="index") as fh:
                fh.write(json_bytes(index))
    except BaseException as exc:
        w.undo()
        if isinstance(exc, OSError):
            raise UsageError(f"Cannot add the image to {str(root)!r}: {exc.strerror or exc}.") from None
        raise
