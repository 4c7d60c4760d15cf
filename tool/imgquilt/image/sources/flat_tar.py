"""`tar:FILE`: a flat filesystem tar (as `docker export` writes), possibly gzip or zstd compressed.

It is read as an image of one layer in which nothing is a whiteout and the last member of a path
wins. It has no digest to check. As an Image (for writers) it gets what `docker import` would
give it: an OCI manifest and a minimal config for linux/amd64, made up on first use (the tar is
hashed then, not before).
"""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from ...errors import BadImage
from ..layers.blob_layer import BlobLayer
from ..layers.blobio import BlobLocation, FileRange
from ..layers.compression import detect
from ..digests import sha256_digest
from ..mediatypes import OCI_CONFIG, OCI_MANIFEST
from .platforms import DEFAULT_PLATFORM, Platform
from ..layers.tarwalk import header_checksum_ok


class FlatTarImage:
    """A flat tar as a one-layer model.Image."""

    kind = "tar"
    transport = "tar"
    names: tuple[str, ...] = ()

    def __init__(self, path: Path, *, ref: str) -> None:
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise BadImage(f"Cannot read tar file {path}: {exc.strerror}.") from None
        loc = BlobLocation(path, 0, size)
        with FileRange(loc, what=f"tar file {path}") as f:
            head = f.peek(512)
        if detect(head, what=f"tar file {path}") == "none" and size and (len(head) < 512 or not (
                head.count(0) == 512 or header_checksum_ok(head))):
            raise BadImage(f"{path} is not a tar file (its first block is not a tar header).",
                           hint="Pass a filesystem tar such as `docker export` writes, or name the transport.")
        self.ref = ref
        self.path = path
        self.layers = [BlobLayer(None, None, loc, verify=None, what=f"tar file {path}")]

    @property
    def platform(self) -> str:
        return DEFAULT_PLATFORM

    @cached_property
    def config_bytes(self) -> bytes:
        p = Platform.parse(DEFAULT_PLATFORM)
        config = {"architecture": p.arch, "os": p.os, "config": {},
                  "rootfs": {"type": "layers", "diff_ids": [self.layers[0].diff_id]}}
        return json.dumps(config, separators=(",", ":"), sort_keys=True).encode()

    @cached_property
    def manifest_bytes(self) -> bytes:
        layer = self.layers[0].descriptor
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": sha256_digest(self.config_bytes),
                       "size": len(self.config_bytes)},
            "layers": [{"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}],
        }
        return json.dumps(manifest, separators=(",", ":")).encode()

    @property
    def manifest_digest(self) -> str:
        return sha256_digest(self.manifest_bytes)
