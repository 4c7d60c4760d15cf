"""Image references as skopeo and podman spell them: parsed, detected, and opened as an Image.

    oci:DIR[:TAG|@DIGEST]            an OCI image layout
    oci-archive:FILE[:TAG]           a tar of an OCI layout
    docker-archive:FILE[:REPO:TAG]   `docker save` output (legacy, or Docker 25+ OCI-in-tar); :@N too
    dir:DIR                          skopeo's directory transport
    tar:FILE                         a flat filesystem tar (`docker export`)
    rootfs:DIR                       an extracted filesystem, or /proc/PID/root of a container
    PATH                             detected: a layout, a skopeo dir, a rootfs, an archive or a tar
    docker://HOST/REPO[:TAG|@DIGEST] read in the registry (image.sources.registry), nothing copied
    containers-storage:..., docker-daemon:..., ...                copied with skopeo first

rootfs: is parsed here but opened by the verbs (imgquilt.sources): an image package knows no rootfs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadImage
from .sources.archive_index import ArchiveIndex
from .layers.compression import detect
from .digests import check_digest

OWN_TRANSPORTS = ("oci", "oci-archive", "docker-archive", "dir", "tar", "rootfs")
_SCHEME = re.compile(r"^([a-z][a-z0-9-]*):(.*)$", re.S)
_ARCHIVE_MEMBER = re.compile(r"^(?:[0-9a-f]{64}(?:\.json|\.tar|/.*)?|blobs(?:/.*)?|repositories|manifest\.json|"
                             r"index\.json|oci-layout)$")


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference: transport, path, and the tag or digest naming one image in it."""

    raw: str
    transport: str  # one of OWN_TRANSPORTS, "docker" (a registry), or "skopeo"
    path: str
    tag: str | None = None
    digest: str | None = None


def _split_name(rest: str, *, allow_digest: bool) -> tuple[str, str | None, str | None]:
    """PATH[:TAG|@DIGEST] -> (path, tag, digest); the path ends at the first ':' as in skopeo."""
    if allow_digest:
        m = re.match(r"^(.*?):?@(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$", rest)
        if m:
            return m.group(1), None, m.group(2)
        m = re.match(r"^(.*?):?@((?:sha256|sha512):.*)$", rest)
        if m:  # a digest cut short or mistyped: not a directory named DIR@sha256
            raise BadImage(f"Image reference digest {m.group(2)!r} is not a whole digest (sha256: and 64 lowercase hex digits).",
                           hint=f"Copy the whole digest (e.g. from `skopeo inspect oci:{m.group(1)}`), or name a tag instead.")
    path, sep, name = rest.partition(":")
    return path, (name if sep and name else None), None


def parse_ref(ref: str) -> ImageRef:
    """Parse an image reference; a bare path is kept for `detect` to look at."""
    if not ref:
        raise BadImage("Empty image reference.")
    m = _SCHEME.match(ref)
    if m and m.group(1) in OWN_TRANSPORTS:
        transport, rest = m.group(1), m.group(2)
        if not rest:
            raise BadImage(f"Image reference {ref!r} names no path.")
        if transport in ("rootfs", "tar", "dir"):
            return ImageRef(ref, transport, rest)
        path, tag, digest = _split_name(rest, allow_digest=transport == "oci")
        return ImageRef(ref, transport, path, tag, digest)
    if ref.startswith("docker://"):
        return ImageRef(ref, "docker", ref)
    if m and not Path(ref).exists() and len(m.group(1)) > 1 and not Path(m.group(1)).exists():
        if m.group(1) not in SKOPEO_TRANSPORTS:
            raise unknown_reference(ref, m.group(1))
        return ImageRef(ref, "skopeo", ref)  # containers-storage:, docker-daemon:, ...
    return ImageRef(ref, "path", ref)


# what skopeo itself reads besides imgquilt's own transports (copied through it; see skopeo_copy)
SKOPEO_TRANSPORTS = ("containers-storage", "docker-daemon", "ostree", "sif", "tarball")
REFERENCE_FORMS = ("oci:DIR[:TAG|@DIGEST], oci-archive:FILE[:TAG], docker-archive:FILE[:REPO:TAG], dir:DIR, tar:FILE, "
                   "rootfs:DIR, docker://HOST/REPO[:TAG|@DIGEST], containers-storage:NAME[:TAG], docker-daemon:NAME:TAG, or a path")


def unknown_reference(ref: str, scheme: str | None) -> BadImage:
    """`python:3.11`, `img:v1`, `ubuntu`: a name that is neither a transport nor a path here."""
    what = f"names no transport imgquilt knows ({scheme + ':'!r} is none) and no file or directory {scheme!r} here" \
        if scheme else "is no transport and no file or directory here"
    return BadImage(
        f"Image reference {ref!r} {what}. A reference is one of {REFERENCE_FORMS}.",
        hint=f"For an image in a registry: --image docker://{ref} (Docker Hub's official images: docker://docker.io/library/{ref}).",
    )


def _detect_path(ref: str) -> ImageRef:
    """What a bare path is: layout dir, skopeo dir, rootfs dir, image archive, or flat tar."""
    from .sources.dir_layout import is_dir_layout

    path = Path(ref)
    tag = None
    if not path.exists() and ":" in ref:
        # PATH:TAG with an existing PATH
        head, _, tail = ref.partition(":")
        if head and Path(head).exists():
            path, tag = Path(head), tail
    if path.is_dir():
        if (path / "oci-layout").exists():
            if tag is not None and tag.startswith("@"):
                return ImageRef(ref, "oci", str(path), None, tag[1:])
            return ImageRef(ref, "oci", str(path), tag)
        if is_dir_layout(path):
            return ImageRef(ref, "dir", str(path))
        return ImageRef(ref, "rootfs", str(path))
    if not path.exists():
        raise unknown_reference(ref, None)
    return ImageRef(ref, _archive_kind(path), str(path), tag)


def _archive_kind(path: Path) -> str:
    """oci-archive, docker-archive or tar, from the first members of the file."""
    with open(path, "rb") as f:
        head = f.read(8)
    kind = detect(head, what=f"file {path}")
    if kind != "none":
        # only flat tars are read compressed; say so if this is a compressed image archive
        first = _first_member(path, kind)
        if first is not None and _ARCHIVE_MEMBER.match(first):
            raise BadImage(
                f"{path} looks like a {kind}-compressed image archive; imgquilt reads image archives "
                "uncompressed, in place.",
                hint=f"Decompress it first (e.g. `{'gunzip -k' if kind == 'gzip' else 'zstd -d'} {path}`).",
            )
        return "tar"
    seen: set[str] = set()

    def stop(name: str) -> bool:
        seen.add(name)
        return not _ARCHIVE_MEMBER.match(name)  # a filesystem member: a flat tar

    try:
        index = ArchiveIndex.build(path, what="archive", stop_when=stop)
    except BadImage:
        return "tar"  # let the tar reader give the precise error
    names = set(index.members)
    if not all(_ARCHIVE_MEMBER.match(n) for n in names):
        return "tar"
    if "manifest.json" in names:
        return "docker-archive"
    if "oci-layout" in names:
        return "oci-archive"
    return "tar"


def _first_member(path: Path, kind: str) -> str | None:
    from .layers.blobio import BlobLocation, FileRange
    from .layers.compression import Decompressed
    from .layers.tarwalk import TarWalker, member_path

    try:
        with FileRange(BlobLocation(path, 0, path.stat().st_size)) as raw:
            stream = Decompressed(raw, kind, what=f"file {path}")
            for entry in TarWalker(stream, what=f"file {path}"):
                name = member_path(entry.name)
                if name is not None:
                    return name
    except (BadImage, OSError):
        return None
    return None


def resolve_ref(ref: str) -> ImageRef:
    parsed = parse_ref(ref)
    return _detect_path(ref) if parsed.transport == "path" else parsed


def open_transport(parsed: ImageRef, *, platform: str | None = None, cache_dir: Path | None = None):
    """Open an image reference (any transport but rootfs:) as a model.Image, every small blob verified."""
    ref = parsed.raw
    t = parsed.transport
    path = Path(parsed.path)
    if t == "oci":
        from .sources.oci_layout import open_oci_layout

        if parsed.digest:
            check_digest(parsed.digest, what=f"reference {ref!r}")
        return open_oci_layout(path, ref=ref, tag=parsed.tag, digest=parsed.digest, platform=platform)
    if t == "oci-archive":
        from .sources.oci_archive import open_oci_archive

        return open_oci_archive(_existing_file(path, ref), ref=ref, tag=parsed.tag, digest=parsed.digest,
                                platform=platform)
    if t == "docker-archive":
        from .sources.docker_archive import open_docker_archive

        return open_docker_archive(_existing_file(path, ref), ref=ref, tag=parsed.tag, platform=platform)
    if t == "dir":
        from .sources.dir_layout import open_dir_layout

        return open_dir_layout(path, ref=ref, platform=platform)
    if t == "tar":
        from .sources.flat_tar import FlatTarImage

        return FlatTarImage(_existing_file(path, ref), ref=ref)
    if t == "docker":
        from .sources.registry import open_registry_image

        return open_registry_image(ref, platform=platform)
    if t == "skopeo" and ref.startswith("containers-storage:"):
        from .sources.oci_layout import open_oci_layout
        from .sources.skopeo_copy import copy_from_store

        layout, digest = copy_from_store(ref, platform=platform)
        return open_oci_layout(layout, ref=ref, tag=None, digest=digest, platform=platform)
    if t == "skopeo":
        from .sources.dir_layout import open_dir_layout
        from .sources.skopeo_copy import copy_with_skopeo

        copied = copy_with_skopeo(ref, platform=platform, cache_dir=cache_dir)
        return open_dir_layout(copied, ref=ref, platform=platform)
    raise BadImage(f"Unsupported image reference {ref!r}.")  # rootfs: is opened by the verbs (sources.py)


def _existing_file(path: Path, ref: str) -> Path:
    if not path.is_file():
        raise BadImage(f"Image reference {ref!r}: {path} does not exist or is not a file.")
    return path
