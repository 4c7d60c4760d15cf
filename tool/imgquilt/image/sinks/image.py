"""Where a new image goes, as skopeo spells it, and the writer for each: `oci:`, `oci-archive:`, `docker-archive:`,
`docker://` (pushed to a registry, sinks/registry.py), and `containers-storage:` and `dir:` (through
skopeo, sinks/skopeo_out.py).

The image itself is a value (mutate.append); this module parses and checks the destination and
hands the value to the layout writer or an archive writer. Base blobs are carried over byte for
byte, never recompressed, and each is checked against its digest on the way.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from ...errors import AttestationNotStored, ImgquiltError, UsageError
from ..mediatypes import Compression
from ..referrers import Referrer
from .archive import write_docker_archive, write_oci_archive
from .layout import check_layout_destination, write_layout, write_layout_index
from .mutate import NewImage
from .output_file import check_output_path

Transport = Literal["oci", "oci-archive", "docker-archive", "docker", "containers-storage", "dir"]
DESTINATIONS = ("oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE[:REPO:TAG], docker://HOST/REPO[:TAG], "
                "containers-storage:NAME[:TAG] (podman's and buildah's store) or dir:DIR")

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DOCKER_REF = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"  # optional registry host[:port]/
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"  # path
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$"  # optional tag
)


@dataclass(frozen=True)
class OutputRef:
    """Where an image goes: transport, path, and the tag (oci) or REPO:TAG (docker-archive), the NAME of
    containers-storage; a registry and containers-storage have no path."""

    transport: Transport
    path: Path | None
    tag: str | None

    @property
    def default_compression(self) -> Compression:
        """The new layer's compression unless asked otherwise: as `docker save` for docker-archive."""
        return "none" if self.transport == "docker-archive" else "gzip"


@dataclass(frozen=True)
class WrittenImage:
    """What write_new_image wrote."""

    ref: str
    transport: Transport
    path: Path | None
    tag: str | None
    digest: str  # the manifest digest (a registry's: as it answered the push); for docker-archive (no manifest) the image ID, = config_digest
    config_digest: str  # also the image ID podman and docker show
    layer_digest: str | None  # the new layer's blob (None: the base written as it is, no layer added)
    diff_id: str | None
    layer_size: int
    referrers: tuple[tuple[str, str], ...] = ()  # (manifest digest, where it is listed) of each attestation stored
    store: dict[str, Any] | None = None  # containers-storage: the store written (containers_store.Store.json)


def parse_output_ref(ref: str) -> OutputRef:
    """`oci:DIR[:TAG]`, `oci-archive:FILE[:TAG]`, `docker-archive:FILE[:REPO:TAG]`, `containers-storage:NAME`
    or `dir:DIR` (docker:// is the registry's: check_image_destination)."""
    transport, sep, rest = ref.partition(":")
    if not sep or transport not in ("oci", "oci-archive", "docker-archive", "containers-storage", "dir"):
        raise UsageError(f"Cannot write an image to {ref!r}.", hint=f"Write to {DESTINATIONS}.")
    if transport == "containers-storage":
        return OutputRef("containers-storage", None, rest or None)
    if transport == "dir":
        if "@" in rest:
            raise UsageError(f"An output image cannot be named by digest ({ref!r}): the digest is what gets written.")
        return OutputRef("dir", Path(rest), None)
    path, _, name = rest.partition(":")  # as skopeo: the path holds no colon
    if not path:
        raise UsageError(f"The image reference {ref!r} names no path.")
    if "@" in name or re.search(r"@[a-z0-9]+:[0-9a-f]+$", rest):
        raise UsageError(f"An output image cannot be named by digest ({ref!r}): the digest is what gets written.")
    tag: str | None = name or None
    if transport == "docker-archive":
        if tag is not None:
            if not _DOCKER_REF.match(tag):
                raise UsageError(f"{tag!r} is not a valid REPO:TAG reference for docker-archive.")
            last = tag.rsplit("/", 1)[-1]
            if ":" not in last:
                tag += ":latest"
    elif tag is not None and not _TAG.match(tag):
        raise UsageError(f"{tag!r} is not a valid tag (letters, digits, `_`, `.`, `-`; at most 128).")
    return OutputRef(transport, Path(path), tag)  # type: ignore[arg-type]


def check_image_destination(ref: str) -> OutputRef:
    """Refuse a bad `--output-image` before anything is computed or written."""
    if ref.startswith("docker://"):
        from .registry import check_push_destination

        dest = check_push_destination(ref)
        return OutputRef("docker", None, dest.tag)
    out = parse_output_ref(ref)
    if out.transport in ("containers-storage", "dir"):
        from .skopeo_out import check_skopeo_destination

        check_skopeo_destination(out.transport, ref.partition(":")[2])
    elif out.transport == "oci":
        check_layout_destination(out.path, out.tag)
    else:
        check_output_path(out.path, what="image archive")
    return out


def write_new_image(img: NewImage, ref: str, referrers: Sequence[Referrer] = ()) -> WrittenImage:
    """Write `img` to `ref`, with its `referrers` (attestations); whole or not at all, except that a
    registry that refuses a referrer after the image was pushed is AttestationNotStored (exit 6)."""
    out = check_image_destination(ref)
    if referrers:
        check_referrer_destination(ref)
    digest = img.config_digest if out.transport == "docker-archive" else img.manifest_digest
    stored: list[str] = []
    store = None
    if out.transport == "docker":
        from .registry import push_image

        digest = push_image(img, ref).digest
        stored = push_referrers(ref, referrers, f"The image was pushed to {ref} ({digest})")
    elif out.transport == "oci":
        write_layout(img, out.path, out.tag, referrers)
    elif out.transport == "oci-archive":
        write_oci_archive(img, out.path, out.tag, referrers)
    elif out.transport in ("containers-storage", "dir"):
        from .skopeo_out import write_through_skopeo

        written = write_through_skopeo(img, out.transport, ref.partition(":")[2])
        store = written.json() if written is not None else None
    else:
        from ..base_image import archive_tag

        # a docker-archive names what `podman load` / `docker load` load: the name given, else the base's
        out = OutputRef(out.transport, out.path, out.tag or archive_tag(img.base))
        write_docker_archive(img, out.path, out.tag)
    if referrers and not stored:
        stored = ["index.json"] * len(referrers)
    return WrittenImage(
        ref=ref,
        transport=out.transport,
        path=out.path,
        tag=out.tag,
        digest=digest,
        config_digest=img.config_digest,
        layer_digest=img.layer.digest if img.layer is not None else None,
        diff_id=img.layer.diff_id if img.layer is not None else None,
        layer_size=img.layer.size if img.layer is not None else 0,
        referrers=tuple((r.digest, w) for r, w in zip(referrers, stored)),
        store=store,
    )


def check_referrer_destination(ref: str) -> None:
    """Refuse, up front, a destination that cannot hold a referrer: a docker-archive has no index."""
    out = check_image_destination(ref)
    if out.transport not in ("oci", "oci-archive", "docker"):
        raise UsageError(f"{ref!r} cannot hold an attestation: only an OCI layout (oci:, oci-archive:) or a registry lists "
                         "the referrers of an image.",
                         hint="Write to oci:DIR:TAG, oci-archive:FILE:TAG or push to docker://HOST/REPO:TAG "
                              "(`skopeo copy` it to docker-archive: afterwards if you need one).")


def push_referrers(ref: str, referrers: Sequence[Referrer], written: str) -> list[str]:
    """Push each referrer after its image; a refusal is AttestationNotStored, naming what was written."""
    from .registry import push_referrer

    stored = []
    for r in referrers:
        try:
            stored.append(push_referrer(ref, r))
        except ImgquiltError as exc:
            raise AttestationNotStored(
                f"{written}, but its attestation was not stored: {exc.message}",
                hint="The image is complete and usable; attach the attestation again with "
                     "`imgquilt apply --attest KEY --output-image` once the registry takes it.") from None
    return stored


def write_new_index(images: list[NewImage], ref: str, referrers: Sequence[Referrer] = ()) -> tuple[str, list[str]]:
    """Write the images as one multi-platform image (an OCI index over their manifests) to `ref`
    (`oci:` or `docker://`), with `referrers` (one attestation per platform manifest); whole or not at
    all (a registry refusing a referrer after the push: AttestationNotStored). Returns the index digest
    (a registry's: as it answered) and where each referrer is listed."""
    from .mutate import index_bytes, sha256

    out = check_image_destination(ref)
    index = index_bytes(images)
    if out.transport == "docker":
        from .registry import push_index

        digest = push_index(images, index, ref).digest
        return digest, push_referrers(ref, referrers, f"The image index was pushed to {ref} ({digest})")
    if out.transport != "oci":
        raise UsageError(f"--platform all writes an image index; {ref!r} cannot hold one.",
                         hint="Write to oci:DIR:TAG or push to docker://HOST/REPO:TAG.")
    write_layout_index(images, index, out.path, out.tag, referrers)  # type: ignore[arg-type]
    return sha256(index), ["index.json"] * len(referrers)


def check_index_destination(ref: str) -> None:
    """Refuse, up front, a destination that cannot hold an index."""
    out = check_image_destination(ref)
    if out.transport not in ("oci", "docker"):
        raise UsageError(f"--platform all writes an image index; {ref!r} cannot hold one.",
                         hint="Write to oci:DIR:TAG or push to docker://HOST/REPO:TAG.")
