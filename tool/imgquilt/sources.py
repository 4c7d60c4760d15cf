"""Open a reference: the one way the verbs and the CLI turn `--image REF` into a Source or an Image.

Image transports (oci:, oci-archive:, docker-archive:, dir:, tar:, skopeo's) are opened by
image.reference; a root filesystem (rootfs:DIR, or a bare directory that is no image) by rootfs.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, runtime_checkable

from .errors import BadImage, PathRefused, UsageError, os_error
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


def _refused(ref: str, exc: OSError) -> PathRefused:
    return os_error(exc, f"image reference {ref!r}", hint="Check the reference's path: its length, its links, its permissions.")


def open_source(ref: str, *, platform: str | None = None, cache_dir: Path | None = None) -> Source:
    """Open `ref` for reading targets: a RootfsSource for a directory tree, else an ImageSource. A path
    the system refuses (too long, a loop of links, no permission) is PathRefused (exit 6)."""
    try:
        return _open_source(ref, platform=platform, cache_dir=cache_dir)
    except OSError as exc:
        raise _refused(ref, exc) from None


def _open_source(ref: str, *, platform: str | None, cache_dir: Path | None) -> Source:
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
    try:
        parsed = resolve_ref(ref)
        if parsed.transport == "rootfs":
            raise BadImage(f"{ref!r} is a root filesystem, not an image: it has no layers to build on.",
                           hint="Use --root DIR to patch it in place, or pass an image reference.")
        return open_transport(parsed, platform=platform, cache_dir=cache_dir)
    except OSError as exc:
        raise _refused(ref, exc) from None


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


# --- references in targets.lock ------------------------------------------------------------------
_PATH_TRANSPORTS = ("oci", "oci-archive", "docker-archive", "dir", "tar", "rootfs")


def _split_local(ref: str) -> tuple[str, str, str] | None:
    """(transport prefix, path, suffix) of a reference that names a local path; None for any other."""
    from .image.reference import parse_ref

    parsed = parse_ref(ref)
    if parsed.transport in _PATH_TRANSPORTS:
        prefix = parsed.transport + ":"
        return prefix, parsed.path, ref[len(prefix) + len(parsed.path):]
    if parsed.transport != "path":
        return None
    head, sep, tail = ref.partition(":")
    if sep and not Path(ref).exists() and head and Path(head).exists():
        return "", head, sep + tail
    return "", ref, ""


def ref_for_lock(ref: str, queue_root: Path) -> str:
    """How targets.lock keeps `ref` (given from the current directory): a relative path, or one inside
    the queue, relative to the queue directory, so that every working directory, --queue and the API
    reach the same image; any other reference (a registry's, an absolute path elsewhere) as given."""
    split = _split_local(ref)
    if split is None:
        return ref
    prefix, path, suffix = split
    where = Path(os.path.abspath(path))
    queue = Path(os.path.abspath(queue_root))
    if Path(path).is_absolute() and not where.is_relative_to(queue):
        return ref
    return prefix + os.path.relpath(where, queue) + suffix


def ref_in_queue(ref: str, queue_root: Path, what: str = "targets.lock pins the image") -> str:
    """A reference the queue keeps (targets.lock's, a stopped rebase's), as one that opens from the
    current directory: a relative path is the queue directory's. One kept before imgquilt did so (a
    path relative to the directory it was given in) still works from that directory. A path that
    exists nowhere is an error saying where the reference came from."""
    split = _split_local(ref)
    if split is None:
        return ref
    prefix, path, suffix = split
    if Path(path).is_absolute():
        here = Path(path)
    else:
        here = Path(os.path.abspath(Path(queue_root) / path))
        if not here.exists() and Path(path).exists():
            return ref  # an older lock, relative to the directory it was made in (this one)
    if not here.exists():
        rel = "" if Path(path).is_absolute() else f" (its path is relative to the queue directory, {os.path.abspath(queue_root)})"
        raise BadImage(
            f"{what} {ref!r}{rel}, but {here} does not exist.",
            hint="Pass --image REF, or pin the image where it is now with `imgquilt lock --image REF`.",
        )
    return ref if Path(path).is_absolute() else prefix + os.path.relpath(here) + suffix
