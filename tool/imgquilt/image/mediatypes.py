"""The media types imgquilt understands (OCI and Docker), grouped by what they describe."""
from __future__ import annotations

from typing import Literal

Compression = Literal["none", "gzip", "zstd"]  # of a layer blob, as read or as written
LayerFormat = Literal["none", "gzip", "zstd", "zstd:chunked"]  # what a new layer is written as (zstd:chunked is zstd)
LAYER_FORMATS: tuple[str, ...] = ("gzip", "zstd", "zstd:chunked", "none")

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = OCI_LAYER + "+gzip"
OCI_LAYER_ZSTD = OCI_LAYER + "+zstd"

DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_V1 = "application/vnd.docker.distribution.manifest.v1+json"
DOCKER_MANIFEST_V1_SIGNED = "application/vnd.docker.distribution.manifest.v1+prettyjws"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_LAYER_ZSTD = "application/vnd.docker.image.rootfs.diff.tar.zstd"
DOCKER_FOREIGN_GZIP = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"

INDEXES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFESTS = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
CONFIGS = frozenset({OCI_CONFIG, DOCKER_CONFIG})
LAYERS = frozenset(
    {
        OCI_LAYER,
        OCI_LAYER_GZIP,
        OCI_LAYER_ZSTD,
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        DOCKER_LAYER_GZIP,
        DOCKER_LAYER_ZSTD,
        DOCKER_FOREIGN_GZIP,
        # some tools write a docker "diff.tar" for uncompressed layers
        "application/vnd.docker.image.rootfs.diff.tar",
    }
)

# the OCI media type for a layer blob by its actual compression (used where no manifest names one)
LAYER_MEDIA_TYPES: dict[Compression, str] = {"none": OCI_LAYER, "gzip": OCI_LAYER_GZIP, "zstd": OCI_LAYER_ZSTD}

# docker media types and their OCI names (the blob bytes are the same)
OCI_NAME_OF_DOCKER = {
    "application/vnd.docker.image.rootfs.diff.tar": OCI_LAYER,
    DOCKER_LAYER_GZIP: OCI_LAYER_GZIP,
    DOCKER_LAYER_ZSTD: OCI_LAYER_ZSTD,
    DOCKER_FOREIGN_GZIP: "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
}


def oci_media_type(media_type: str) -> str:
    """A layer's media type under its OCI name."""
    return OCI_NAME_OF_DOCKER.get(media_type, media_type)


def compression_of(media_type: str) -> Compression:
    """What a layer media type says its blob is compressed with."""
    if media_type.endswith("gzip"):
        return "gzip"
    if media_type.endswith("zstd"):
        return "zstd"
    return "none"
