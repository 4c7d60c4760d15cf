"""Reading an OCI/Docker image from any blob store: index → (platform) → manifest → config → layers.

Shared by the `oci:` layout, `oci-archive:`, the Docker 25+ OCI-in-tar `docker-archive:` and the
`dir:` copies skopeo makes. A store only has to say where a digest's bytes are. Every manifest,
index and config read here is checked against its digest before it is parsed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar

from ...errors import BadImage
from ..layers.blob_layer import BlobLayer
from ..layers.blobio import BlobLocation, read_verified
from ..digests import check_digest
from ..mediatypes import (
    CONFIGS,
    DOCKER_MANIFEST_V1,
    DOCKER_MANIFEST_V1_SIGNED,
    INDEXES,
    LAYERS,
    MANIFESTS,
)
from ..model import Descriptor
from .platforms import Platform, choose
from .stored_image import StoredImage

REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"
MAX_MANIFEST = 4 << 20
MAX_CONFIG = 64 << 20


class BlobStore(Protocol):
    where: str  # how messages name the layout or archive

    def locate(self, digest: str) -> BlobLocation | None: ...


def parse_json(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BadImage(f"The {what} is not valid JSON ({exc}).") from None
    if not isinstance(obj, dict):
        raise BadImage(f"The {what} is not a JSON object.")
    return obj


def parse_descriptor(obj: object, what: str) -> Descriptor:
    if not isinstance(obj, dict):
        raise BadImage(f"The {what} is not a descriptor object.")
    digest = check_digest(obj.get("digest"), what=what)
    size = obj.get("size")
    media = obj.get("mediaType", "")
    annotations = obj.get("annotations") or {}
    if not isinstance(size, int) or size < 0 or not isinstance(media, str) or not isinstance(annotations, dict):
        raise BadImage(f"The {what} ({digest}) is malformed: bad size, media type or annotations.")
    return Descriptor(media, digest, size, {str(k): str(v) for k, v in annotations.items()})


@dataclass(frozen=True)
class IndexEntry:
    """A descriptor listed in an index, with the platform the index gives it."""

    descriptor: Descriptor
    platform: Platform | None
    artifact_type: str | None = None  # an OCI 1.1 artifact (an attestation), not an image

    @property
    def digest(self) -> str:
        return self.descriptor.digest

    @property
    def names(self) -> list[str]:
        names = []
        for key in (REF_NAME, CONTAINERD_NAME):
            value = self.descriptor.annotations.get(key)
            if value and value not in names:
                names.append(value)
        return names

    def label(self) -> str:
        names = self.names
        label = names[0] if names else self.digest
        return f"{label} ({self.platform})" if self.platform else label


def normalize_name(name: str) -> str:
    """docker.io/library/busybox:latest, busybox:latest and busybox all name the same image."""
    name = name.strip()
    if "@" in name:
        return name
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        name += ":latest"
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = "docker.io/" + name
    host, _, path = name.partition("/")
    if host == "docker.io" and "/" not in path:
        name = f"docker.io/library/{path}"
    return name


T = TypeVar("T")


def name_matches(names: list[str], wanted: str) -> bool:
    if wanted in names:
        return True
    try:
        target = normalize_name(wanted)
    except Exception:  # noqa: BLE001 - any odd name simply does not match
        return False
    return any(normalize_name(n) == target for n in names if ":" in n or "/" in n)


def tagged(items: list[T], names_of: Callable[[T], list[str]], tag: str, *, where: str, hint: str) -> list[T]:
    """The items named `tag`; none is a BadImage that lists the tags there are."""
    matching = [i for i in items if name_matches(names_of(i), tag)]
    if not matching:
        tags = sorted({n for i in items for n in names_of(i)})
        raise BadImage(f"{where} has no image tagged {tag!r}; available tags: {', '.join(tags) or 'none (untagged)'}.",
                       hint=hint)
    return matching


def index_entries(index: dict[str, Any], what: str) -> list[IndexEntry]:
    manifests = index.get("manifests")
    if not isinstance(manifests, list):
        raise BadImage(f"The {what} has no \"manifests\" list.")
    return [
        IndexEntry(parse_descriptor(m, f"entry {i} of the {what}"), Platform.from_json(m.get("platform")),
                   m.get("artifactType") if isinstance(m, dict) and isinstance(m.get("artifactType"), str) else None)
        for i, m in enumerate(manifests)
    ]


def select_top(descs: list[IndexEntry], *, tag: str | None, digest: str | None, platform: str | None,
               where: str, store: BlobStore, extra_names: Callable[[IndexEntry], list[str]] | None = None
               ) -> Descriptor:
    """Pick the descriptor a reference names from an index.json's manifests."""
    def names_of(d: IndexEntry) -> list[str]:
        return d.names + (extra_names(d) if extra_names else [])

    if digest is not None:
        for d in descs:
            if d.digest == digest:
                return d.descriptor
        loc = store.locate(digest)
        if loc is None:
            raise BadImage(
                f"{where} has no manifest {digest}.",
                hint="Available: " + ", ".join(d.label() for d in descs) + "." if descs else None,
            )
        return Descriptor("", digest, loc.size)
    descs = [d for d in descs if d.artifact_type is None]  # referrers (attestations) are no image to pick
    if not descs:
        raise BadImage(f"{where} holds no image.")
    if tag is not None:
        matching = tagged(descs, names_of, tag, where=where, hint="Name one of them after the path, e.g. oci:DIR:TAG.")
    else:
        matching = descs
    if len(matching) == 1:
        return matching[0].descriptor
    # one image split per platform (no shared index blob): choose by platform
    if all(d.platform for d in matching) and len({tuple(names_of(d)) for d in matching}) == 1:
        return choose([(d.platform, d.descriptor) for d in matching], platform, where=where)[1]
    raise BadImage(
        f"{where} holds {len(matching)} images and the reference names none of them: "
        + "; ".join(d.label() for d in matching) + ".",
        hint="Add a tag (oci:DIR:TAG, oci-archive:FILE:TAG, docker-archive:FILE:REPO:TAG) or @DIGEST.",
    )


def load_image(store: BlobStore, desc: Descriptor, *, ref: str, platform: str | None,
               transport: str, names: tuple[str, ...] = (), read_manifest=None) -> StoredImage:
    """Load the image `desc` points to (resolving an index by platform), verifying every blob."""
    reader = read_manifest or (lambda d: read_blob(store, d, "manifest", MAX_MANIFEST))
    for _depth in range(4):
        data = reader(desc)
        manifest = parse_json(data, f"manifest {desc.digest}")
        media = manifest.get("mediaType") or desc.media_type
        if not media:  # OCI makes mediaType optional: tell by the content
            media = "index" if "manifests" in manifest else "manifest" if "layers" in manifest else ""
        if media in INDEXES or media == "index":
            subs = index_entries(manifest, f"image index {desc.digest}")
            candidates = [(d.platform, d.descriptor) for d in subs]
            desc = choose(candidates, platform, where=f"The image index {desc.digest} in {store.where}")[1]
            continue
        if media in (DOCKER_MANIFEST_V1, DOCKER_MANIFEST_V1_SIGNED):
            raise BadImage(
                f"{store.where}: manifest {desc.digest} is Docker schema 1, which imgquilt does not read.",
                hint="Convert the image with `skopeo copy` (it writes schema 2 / OCI).",
            )
        if media not in MANIFESTS and media != "manifest":
            raise BadImage(f"{store.where}: manifest {desc.digest} has unknown media type {media!r}.")
        return _image_from_manifest(store, desc, data, manifest, ref=ref, platform=platform,
                                    transport=transport, names=names)
    raise BadImage(f"{store.where}: image indexes are nested too deeply.")


def read_blob(store: BlobStore, desc: Descriptor, what: str, limit: int) -> bytes:
    loc = store.locate(desc.digest)
    if loc is None:
        raise BadImage(f"{store.where} lacks the {what} blob {desc.digest}.",
                       hint="The layout or archive is incomplete; copy it again.")
    if desc.size and loc.size != desc.size:
        raise BadImage(
            f"The {what} blob {desc.digest} in {store.where} is {loc.size} bytes but its descriptor "
            f"says {desc.size}.",
            hint="The layout or archive is corrupt; copy it again.",
        )
    return read_verified(loc, desc.digest, what=f"{what} blob", limit=limit)


def config_and_layers(manifest: dict[str, Any], where: str, read_config: Callable[[Descriptor], bytes]
                      ) -> tuple[bytes, dict[str, Any], list[tuple[Descriptor, str, object]]]:
    """The config (bytes and parsed) and each layer's (descriptor, diff_id, raw entry), all checked."""
    config_desc = parse_descriptor(manifest.get("config"), f"config descriptor of {where}")
    if config_desc.media_type not in CONFIGS:
        raise BadImage(
            f"{where} is not a container image: its config has media type {config_desc.media_type!r}.",
        )
    config_bytes = read_config(config_desc)
    config = parse_json(config_bytes, f"config {config_desc.digest}")
    rootfs = config.get("rootfs") or {}
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    raw_layers = manifest.get("layers")
    if not isinstance(raw_layers, list) or not isinstance(diff_ids, list) or len(diff_ids) != len(raw_layers):
        raise BadImage(f"{where} and its config disagree on the layers (the config's rootfs.diff_ids "
                       f"must list one diff_id per manifest layer).")
    layers = []
    for i, (obj, diff_id) in enumerate(zip(raw_layers, diff_ids)):
        ldesc = parse_descriptor(obj, f"layer {i} of {where}")
        check_digest(diff_id, what=f"diff_id {i} of config {config_desc.digest}")
        if ldesc.media_type not in LAYERS:
            raise BadImage(
                f"Layer {i} ({ldesc.digest}) of {where} has unknown media type {ldesc.media_type!r}; "
                "imgquilt reads tar layers, uncompressed, gzip or zstd.",
            )
        layers.append((ldesc, diff_id, obj))
    return config_bytes, config, layers


def image_platform(config: dict[str, Any], platform: str | None, where: str) -> str:
    """The platform the config states ("unknown" if none); refused if it is not the one asked for."""
    actual = Platform.from_json(config)
    if platform is not None and actual is not None and not Platform.parse(platform).matches(actual):
        raise BadImage(f"{where} is for platform {actual}, not {platform}.",
                       hint="Drop --platform or name the image for that platform.")
    return str(actual) if actual else "unknown"


def _image_from_manifest(store: BlobStore, desc: Descriptor, data: bytes, manifest: dict[str, Any], *,
                         ref: str, platform: str | None, transport: str, names: tuple[str, ...]) -> StoredImage:
    where = f"{store.where}: manifest {desc.digest}"
    config_bytes, config, found = config_and_layers(
        manifest, where, lambda d: read_blob(store, d, "config", MAX_CONFIG))
    layers: list[BlobLayer] = []
    for ldesc, diff_id, obj in found:
        loc = store.locate(ldesc.digest)
        if loc is None:
            urls = "; it is a foreign layer fetched from its URLs" if isinstance(obj, dict) and obj.get("urls") else ""
            raise BadImage(f"{store.where} lacks layer blob {ldesc.digest}{urls}.",
                           hint="The layout or archive is incomplete; copy it again with skopeo.")
        if loc.size != ldesc.size:
            raise BadImage(
                f"Layer blob {ldesc.digest} in {store.where} is {loc.size} bytes but the manifest "
                f"says {ldesc.size}: it is truncated or corrupt.",
                hint="Copy the image again.",
            )
        layers.append(BlobLayer(ldesc, diff_id, loc, verify="blob", what=f"layer {ldesc.digest}"))
    return StoredImage(
        ref=ref,
        manifest_digest=desc.digest,
        manifest_bytes=data,
        config_bytes=config_bytes,
        platform=image_platform(config, platform, where),
        layers=layers,
        transport=transport,
        names=names,
    )
