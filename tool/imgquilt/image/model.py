"""The small interface every image transport implements (after go-containerregistry's v1.Image).

An image is: a platform, a config, ordered layers (bottom first). A layer is: a descriptor as the
manifest names it (compressed digest, media type, size), a diff_id, and streams of its blob and its
uncompressed tar. Transports (oci layout, oci-archive, docker-archive, ...) implement these;
sinks build new images from them without recompressing base blobs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .layers.blobio import BlobLocation


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor."""

    media_type: str
    digest: str  # "sha256:<hex>"
    size: int
    annotations: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


class Layer(Protocol):
    """One layer of an image."""

    @property
    def descriptor(self) -> Descriptor: ...

    @property
    def diff_id(self) -> str: ...

    def open_blob(self) -> BinaryIO:
        """The blob's bytes as stored (compressed or not); the digest is verified as it is read."""
        ...

    def open_tar(self) -> BinaryIO:
        """The uncompressed tar stream of the layer."""
        ...


class Image(Protocol):
    """One platform's image: manifest, config and layers."""

    @property
    def ref(self) -> str: ...

    @property
    def manifest_digest(self) -> str: ...

    @property
    def manifest_bytes(self) -> bytes: ...

    @property
    def config_bytes(self) -> bytes: ...

    @property
    def platform(self) -> str: ...

    @property
    def layers(self) -> list[Layer]: ...


# Optional abilities of a layer: where its blob lies, so a sink can link it or read it in place.
@runtime_checkable
class BlobAtLocation(Protocol):
    """A layer whose blob is a byte range of a file (a layout blob, an archive member)."""

    @property
    def location(self) -> "BlobLocation": ...


@runtime_checkable
class BlobInFile(Protocol):
    """A layer whose blob is a whole file."""

    @property
    def blob_path(self) -> Path: ...
