"""OCI 1.1 referrers: small artifact manifests that point at an image manifest through `subject`.

A referrer is an OCI image manifest with an `artifactType`, the empty config
(`application/vnd.oci.empty.v1+json`, the two bytes `{}`, as image-spec 1.1 says an artifact without
a config carries) and one layer, its payload. Where one is stored and found:

- a registry: the manifest is pushed under its digest; a registry with the referrers API lists it at
  `GET /v2/<name>/referrers/<digest>` (it says so with the `OCI-Subject` header of the PUT); else the
  distribution spec's fallback tag `sha256-<hex>` holds an OCI index of the subject's referrers,
  read, added to and written back (never clobbered);
- an OCI layout (`oci:`) or an oci-archive: an entry of its `index.json` (a descriptor with the
  `artifactType`, no tag), the blobs beside the image's.

Found referrers are read whole (they are small, capped) and every blob checked against its digest.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadImage
from .digests import check_digest, sha256_digest
from .mediatypes import OCI_INDEX, OCI_MANIFEST

EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
EMPTY_DESCRIPTOR = {"mediaType": EMPTY_MEDIA_TYPE, "digest": sha256_digest(EMPTY_CONFIG), "size": 2, "data": "e30="}
MAX_PAYLOAD = 16 << 20
MAX_MANIFEST = 4 << 20
MAX_REFERRERS = 256  # read at most this many candidates of one subject


@dataclass(frozen=True)
class Subject:
    """The manifest a referrer points at."""

    media_type: str
    digest: str
    size: int

    def json(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Referrer:
    """An artifact manifest over one payload blob, referring to `subject`."""

    subject: Subject
    artifact_type: str
    payload_media_type: str
    payload: bytes
    annotations: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def payload_digest(self) -> str:
        return sha256_digest(self.payload)

    @property
    def manifest(self) -> bytes:
        doc = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": self.artifact_type,
            "config": EMPTY_DESCRIPTOR,
            "layers": [{"mediaType": self.payload_media_type, "digest": self.payload_digest, "size": len(self.payload)}],
            "subject": self.subject.json(),
            "annotations": dict(sorted(self.annotations.items())),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        return sha256_digest(self.manifest)

    @property
    def blobs(self) -> list[tuple[str, bytes]]:
        """(digest, bytes) of the config and the payload: what must be stored before the manifest."""
        return [(EMPTY_DESCRIPTOR["digest"], EMPTY_CONFIG), (self.payload_digest, self.payload)]

    def descriptor(self) -> dict:
        """Its entry in an index (index.json, the fallback tag's index, a referrers answer)."""
        manifest = self.manifest
        return {"mediaType": OCI_MANIFEST, "digest": sha256_digest(manifest), "size": len(manifest),
                "artifactType": self.artifact_type, "annotations": dict(sorted(self.annotations.items()))}


def fallback_tag(digest: str) -> str:
    """The distribution spec's referrers tag of a subject: `<alg>-<hex>`."""
    algo, _, hexpart = check_digest(digest, what="subject").partition(":")
    return f"{algo}-{hexpart}"[:128]


def add_to_index(index: dict | None, descriptor: dict) -> bytes:
    """The fallback tag's index with `descriptor` added (kept once; every other entry kept as it was)."""
    doc = dict(index or {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []})
    doc.setdefault("schemaVersion", 2)
    doc.setdefault("mediaType", OCI_INDEX)
    manifests = [m for m in doc.get("manifests") or [] if isinstance(m, dict) and m.get("digest") != descriptor["digest"]]
    doc["manifests"] = manifests + [descriptor]
    return json.dumps(doc, separators=(",", ":")).encode()


# --- finding them ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Found:
    """A referrer of the subject: where it was listed, its manifest digest and artifact type, and the
    payload (its first layer of `payload_media_type`), or why it could not be read."""

    digest: str
    where: str  # "referrers API", "tag sha256-...", "index.json of ..."
    artifact_type: str | None
    annotations: dict[str, str]
    subject: str | None  # the subject digest the manifest itself names
    payload: bytes | None
    problem: str = ""


def _parse(data: bytes, what: str) -> dict:
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise BadImage(f"The {what} is not a JSON object.")
    return doc


def _payload_descriptor(manifest: dict, media_types: frozenset[str]) -> dict | None:
    for layer in manifest.get("layers") or []:
        if isinstance(layer, dict) and layer.get("mediaType") in media_types:
            return layer
    return None


def _wanted(desc: dict, artifact_types: frozenset[str]) -> bool:
    return isinstance(desc, dict) and desc.get("artifactType") in artifact_types


def _found(digest: str, where: str, manifest_bytes: bytes, read_payload, media_types: frozenset[str]) -> Found:
    """A referrer from its manifest bytes; the payload read with `read_payload(descriptor)`."""
    try:
        manifest = _parse(manifest_bytes, f"referrer manifest {digest}")
        subject = (manifest.get("subject") or {}).get("digest") if isinstance(manifest.get("subject"), dict) else None
        annotations = manifest.get("annotations") if isinstance(manifest.get("annotations"), dict) else {}
        artifact_type = manifest.get("artifactType")
        layer = _payload_descriptor(manifest, media_types)
        if layer is None:
            return Found(digest, where, artifact_type, annotations, subject, None,
                         "the referrer has no layer of type " + " or ".join(sorted(media_types)))
        size = layer.get("size")
        if not isinstance(size, int) or not 0 <= size <= MAX_PAYLOAD:
            return Found(digest, where, artifact_type, annotations, subject, None, f"its payload's size {size!r} is not accepted")
        payload = read_payload(check_digest(layer.get("digest"), what=f"payload of referrer {digest}"), size)
        return Found(digest, where, artifact_type, annotations, subject, payload)
    except BadImage as exc:
        return Found(digest, where, None, {}, None, None, exc.message)


def registry_referrers(raw: str, subject: str, artifact_types: frozenset[str],
                       media_types: frozenset[str]) -> list[Found]:
    """The subject's referrers of those artifact types in the registry `raw` (docker://...) names:
    through the referrers API, else the fallback tag."""
    from .registry import parse_registry_ref
    from .sources.registry import registries

    ref = parse_registry_ref(raw)
    client = registries().client(ref)
    listed = client.referrers(ref.repository, subject)
    where = "referrers API"
    if listed is None:
        tag = fallback_tag(subject)
        where = f"tag {tag}"
        index = client.find_manifest(ref.repository, tag)
        listed = [] if index is None else (_parse(index.data, f"referrers index {tag}").get("manifests") or [])
    out = []
    for desc in [d for d in listed if _wanted(d, artifact_types)][:MAX_REFERRERS]:
        try:
            digest = check_digest(desc.get("digest"), what=f"referrer listed in {where}")
            data = client.get_manifest(ref.repository, digest).data
        except BadImage as exc:
            out.append(Found(str(desc.get("digest")), where, desc.get("artifactType"), {}, None, None, exc.message))
            continue
        out.append(_found(digest, where, data, lambda d, size: client.read_blob(
            ref.repository, d, size=size, what="referrer payload", limit=MAX_PAYLOAD), media_types))
    return out


def store_referrers(store, index_bytes: bytes, subject: str, artifact_types: frozenset[str],
                    media_types: frozenset[str]) -> list[Found]:
    """The subject's referrers listed in a layout's (or archive's) index.json, read from `store`."""
    from .model import Descriptor
    from .sources.oci_reader import read_blob

    where = f"index.json of {store.where}"
    listed = _parse(index_bytes, where).get("manifests") or []
    out = []
    for desc in [d for d in listed if _wanted(d, artifact_types)]:
        try:
            digest = check_digest(desc.get("digest"), what=f"entry of {where}")
            data = read_blob(store, Descriptor(OCI_MANIFEST, digest, int(desc.get("size") or 0)), "referrer manifest", MAX_MANIFEST)
        except (BadImage, ValueError, TypeError) as exc:
            out.append(Found(str(desc.get("digest")), where, desc.get("artifactType"), {}, None, None, getattr(exc, "message", str(exc))))
            continue
        found = _found(digest, where, data, lambda d, size: read_blob(store, Descriptor("", d, size), "referrer payload", MAX_PAYLOAD),
                       media_types)
        if found.subject == subject or (found.subject is None and found.problem):
            out.append(found)
        if len(out) >= MAX_REFERRERS:
            break
    return out


def find_referrers(raw: str, subject: str, artifact_types: frozenset[str], media_types: frozenset[str]) -> list[Found]:
    """The referrers of `subject` (a manifest digest) where the image reference `raw` lives:
    a registry, an OCI layout, an oci-archive. Other transports hold none."""
    from .reference import resolve_ref

    parsed = resolve_ref(raw)
    if parsed.transport == "docker":
        return registry_referrers(raw, subject, artifact_types, media_types)
    if parsed.transport == "oci":
        from .sources.oci_layout import LayoutStore

        root = Path(parsed.path)
        try:
            index_bytes = (root / "index.json").read_bytes()
        except OSError as exc:
            raise BadImage(f"OCI layout {root} has no readable index.json ({exc.strerror}).") from None
        return store_referrers(LayoutStore(root), index_bytes, subject, artifact_types, media_types)
    if parsed.transport == "oci-archive":
        from .sources.archive_index import ArchiveIndex
        from .sources.oci_archive import ArchiveStore

        path = Path(parsed.path)
        index = ArchiveIndex.build(path, what="OCI archive")
        index_bytes = index.read("index.json", limit=16 << 20)
        if index_bytes is None:
            raise BadImage(f"OCI archive {path} has no index.json.")
        return store_referrers(ArchiveStore(index, f"OCI archive {path}"), index_bytes, subject, artifact_types, media_types)
    return []


def holds_referrers(raw: str) -> bool:
    """Whether the transport of `raw` can hold referrers at all (a registry, oci:, oci-archive:)."""
    from .reference import resolve_ref

    return resolve_ref(raw).transport in ("docker", "oci", "oci-archive")
