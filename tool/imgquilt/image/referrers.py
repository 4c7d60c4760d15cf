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

Found referrers are read one at a time (a generator: only the candidate being checked is held),
each listed digest once, every blob checked against its digest, within caps: MAX_MANIFEST and
MAX_PAYLOAD bytes a candidate, MAX_REFERRERS candidates and MAX_BUDGET payload bytes a subject (a
candidate past the budget is reported unread, not fetched). A listing or manifest of any other JSON
shape or depth is reported as the candidate's problem, never an internal error.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..errors import BadImage
from ..util.jsonin import loads_or_none
from .digests import check_digest, sha256_digest
from .mediatypes import OCI_INDEX, OCI_MANIFEST

EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_CONFIG = b"{}"
EMPTY_DESCRIPTOR = {"mediaType": EMPTY_MEDIA_TYPE, "digest": sha256_digest(EMPTY_CONFIG), "size": 2, "data": "e30="}
MAX_PAYLOAD = 16 << 20
MAX_MANIFEST = 4 << 20
MAX_REFERRERS = 256  # read at most this many candidates of one subject
MAX_BUDGET = 64 << 20  # payload bytes read across the candidates of one subject (each at most MAX_PAYLOAD)


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
    doc = loads_or_none(data)
    if not isinstance(doc, dict):
        raise BadImage(f"The {what} is not a JSON object.")
    return doc


def _listing(doc: dict, what: str) -> list[dict]:
    """The descriptors an index lists; BadImage when its `manifests` is not a list."""
    manifests = doc.get("manifests")
    if manifests is None:
        return []
    if not isinstance(manifests, list):
        raise BadImage(f"The {what} is not an image index: its `manifests` is a {type(manifests).__name__}, not a list.")
    return [m for m in manifests if isinstance(m, dict)]


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _payload_descriptor(manifest: dict, media_types: frozenset[str]) -> dict | None:
    layers = manifest.get("layers")
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and _str(layer.get("mediaType")) in media_types:
            return layer
    return None


def _wanted(desc: dict, artifact_types: frozenset[str]) -> bool:
    return isinstance(desc, dict) and _str(desc.get("artifactType")) in artifact_types


class _Budget:
    """The payload bytes left for the candidates of one subject."""

    def __init__(self, total: int = MAX_BUDGET) -> None:
        self.left = total
        self.total = total

    def refusal(self, size: int) -> str | None:
        if size > self.left:
            return (f"not read: its payload of {size} bytes is past what imgquilt reads for one image's attestations "
                    f"({self.total >> 20} MiB, spent on the candidates before it)")
        return None

    def spend(self, size: int) -> None:
        self.left -= size


def _found(digest: str, where: str, manifest_bytes: bytes, read_payload: Callable[[str, int], bytes],
           media_types: frozenset[str], budget: _Budget) -> Found:
    """A referrer from its manifest bytes; the payload read with `read_payload(digest, size)`."""
    try:
        manifest = _parse(manifest_bytes, f"referrer manifest {digest}")
        subject_doc = manifest.get("subject")
        subject = _str(subject_doc.get("digest")) if isinstance(subject_doc, dict) else None
        annotations = manifest.get("annotations")
        annotations = {k: v for k, v in annotations.items() if isinstance(v, str)} if isinstance(annotations, dict) else {}
        artifact_type = _str(manifest.get("artifactType"))
        layer = _payload_descriptor(manifest, media_types)
        if layer is None:
            return Found(digest, where, artifact_type, annotations, subject, None,
                         "the referrer has no layer of type " + " or ".join(sorted(media_types)))
        size = layer.get("size")
        if type(size) is not int or not 0 <= size <= MAX_PAYLOAD:
            return Found(digest, where, artifact_type, annotations, subject, None, f"its payload's size {size!r} is not accepted")
        refusal = budget.refusal(size)
        if refusal is not None:
            return Found(digest, where, artifact_type, annotations, subject, None, refusal)
        budget.spend(size)
        payload = read_payload(check_digest(_str(layer.get("digest")), what=f"payload of referrer {digest}"), size)
        return Found(digest, where, artifact_type, annotations, subject, payload)
    except BadImage as exc:
        return Found(digest, where, None, {}, None, None, exc.message)


def _candidates(listed: list[dict], where: str, artifact_types: frozenset[str], media_types: frozenset[str],
                read_manifest: Callable[[str, dict], bytes], read_payload: Callable[[str, int], bytes],
                keep: Callable[[Found], bool] = lambda f: True) -> Iterator[Found]:
    """Each wanted descriptor of `listed` once (by digest), read and yielded one at a time, within the caps."""
    seen: set[str] = set()
    budget = _Budget()
    count = 0
    for desc in listed:
        if not _wanted(desc, artifact_types):
            continue
        raw = desc.get("digest")
        key = raw if isinstance(raw, str) else repr(raw)
        if key in seen:
            continue  # listed again: the same manifest, read once
        seen.add(key)
        try:
            digest = check_digest(_str(raw), what=f"referrer listed in {where}")
            data = read_manifest(digest, desc)
        except BadImage as exc:
            found = Found(key, where, _str(desc.get("artifactType")), {}, None, None, exc.message)
        else:
            found = _found(digest, where, data, read_payload, media_types, budget)
        if keep(found):
            yield found
            count += 1
            if count >= MAX_REFERRERS:
                return


def registry_referrers(raw: str, subject: str, artifact_types: frozenset[str],
                       media_types: frozenset[str]) -> Iterator[Found]:
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
        try:
            listed = [] if index is None else _listing(_parse(index.data, f"referrers index {tag}"), f"referrers index {tag}")
        except BadImage as exc:
            yield Found(tag, where, None, {}, None, None, exc.message)
            return
    yield from _candidates(
        listed, where, artifact_types, media_types,
        lambda digest, _desc: client.get_manifest(ref.repository, digest).data,
        lambda d, size: client.read_blob(ref.repository, d, size=size, what="referrer payload", limit=MAX_PAYLOAD))


def store_referrers(store, index_bytes: bytes, subject: str, artifact_types: frozenset[str],
                    media_types: frozenset[str]) -> Iterator[Found]:
    """The subject's referrers listed in a layout's (or archive's) index.json, read from `store`."""
    from .model import Descriptor
    from .sources.oci_reader import read_blob

    where = f"index.json of {store.where}"
    listed = _listing(_parse(index_bytes, where), where)

    def manifest(digest: str, desc: dict) -> bytes:
        size = desc.get("size")
        return read_blob(store, Descriptor(OCI_MANIFEST, digest, size if type(size) is int and size >= 0 else 0),
                         "referrer manifest", MAX_MANIFEST)

    yield from _candidates(
        listed, where, artifact_types, media_types, manifest,
        lambda d, size: read_blob(store, Descriptor("", d, size), "referrer payload", MAX_PAYLOAD),
        keep=lambda f: f.subject == subject or (f.subject is None and bool(f.problem)))


def find_referrers(raw: str, subject: str, artifact_types: frozenset[str], media_types: frozenset[str]) -> Iterator[Found]:
    """The referrers of `subject` (a manifest digest) where the image reference `raw` lives (a
    registry, an OCI layout, an oci-archive; other transports hold none), one at a time."""
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
    return iter(())


def holds_referrers(raw: str) -> bool:
    """Whether the transport of `raw` can hold referrers at all (a registry, oci:, oci-archive:)."""
    from .reference import resolve_ref

    return resolve_ref(raw).transport in ("docker", "oci", "oci-archive")
