"""Open a reference: the one way the verbs and the CLI turn `--image REF` into a Source or an Image.

Image transports (oci:, oci-archive:, docker-archive:, dir:, tar:, skopeo's) are opened by
image.reference; a root filesystem (rootfs:DIR, or a bare directory that is no image) by rootfs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from .errors import BadImage, UsageError
from .fs.types import Source
from .image.image_source import ImageSource
from .cache import cache_root
from .cache.layers import LayerCache, cache_disabled
from .cache.trust import CacheDir
from .image.layers.blobio import VerifiedBlobs
from .image.model import Image
from .image.reference import open_transport, resolve_ref
from .image.sources.platforms import list_platforms
from .rootfs.source import RootfsSource


@runtime_checkable
class BackedByImage(Protocol):
    """A source read from an image (so writing on top of it need not open the image again)."""

    image: Image


def open_source(ref: str, *, platform: str | None = None, cache_dir: Path | None = None) -> Source:
    """Open `ref` for reading targets: a RootfsSource for a directory tree, else an ImageSource."""
    parsed = resolve_ref(ref)
    if parsed.transport == "rootfs":
        root = Path(parsed.path)
        if not root.is_dir():
            raise BadImage(f"Root filesystem {root} does not exist or is not a directory.")
        return RootfsSource(root, ref=ref)
    image = open_transport(parsed, platform=platform, cache_dir=cache_dir)
    kind = "tar" if parsed.transport == "tar" else "image"
    if cache_disabled():
        return ImageSource(image, kind=kind, verified=VerifiedBlobs(cache_dir), ref=ref)
    # blobs verified by any queue count for every queue: their markers live in the shared cache (its
    # `verified` part checked like every other: the user's alone, no link)
    shared = CacheDir(cache_root(), "verified").root
    return ImageSource(image, kind=kind, verified=VerifiedBlobs(shared), ref=ref, layer_cache=LayerCache())


def open_image(ref: str, *, platform: str | None = None, cache_dir: Path | None = None) -> Image:
    """Open `ref` as an image to build on (manifest, config, layers); a root filesystem has no layers."""
    parsed = resolve_ref(ref)
    if parsed.transport == "rootfs":
        raise BadImage(f"{ref!r} is a root filesystem, not an image: it has no layers to build on.",
                       hint="Use --root DIR to patch it in place, or pass an image reference.")
    return open_transport(parsed, platform=platform, cache_dir=cache_dir)


def base_image(source: Source, ref: str, *, platform: str | None = None, cache_dir: Path | None = None) -> Image:
    """The image `source` was read from, reused when it has one (a skopeo transport is not copied twice)."""
    if isinstance(source, BackedByImage):
        return source.image
    return open_image(ref, platform=platform, cache_dir=cache_dir)


def platforms_of(ref: str, *, cache_dir: Path | None = None) -> list[str]:
    """`--platform all`: every platform `ref` holds (an index's, in its order; a single image's own)."""
    parsed = resolve_ref(ref)
    if parsed.transport == "rootfs":
        raise UsageError(f"--platform all needs an image; {ref!r} is a root filesystem.")
    return list_platforms(lambda platform: open_transport(parsed, platform=platform, cache_dir=cache_dir))
