"""The media types imgquilt understands (OCI and Docker), grouped by what they describe."""
from __future__ import annotations

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
OCI_LAYER_BY_COMPRESSION = {None: OCI_LAYER, "gzip": OCI_LAYER_GZIP, "zstd": OCI_LAYER_ZSTD}
