"""A new image = a base image plus one layer, built purely (after go-containerregistry's mutate.Append).

`append(base, Addendum(layer, history, labels))` returns the new image as a value: the base's
layers untouched, the config with the new diff_id, history entry, labels and created time, and an
OCI manifest naming the base (annotations `org.opencontainers.image.base.digest` / `.base.name`,
image.base_image).
JSON keeps the base config's key order and is written compactly, so the same inputs give the same
image digest, run after run. Nothing is read from disk or written here: the writers (layout,
archive) put the value somewhere.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ...errors import BadImage
from ...util.jsonin import member_or_none
from ..base_image import BASE_DIGEST, BASE_NAME, annotation_name
from ..mediatypes import OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, oci_media_type
from ..model import Descriptor, Image
from .layer import LayerBlob

ANNOTATION_BASE_DIGEST = BASE_DIGEST
ANNOTATION_BASE_NAME = BASE_NAME
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class History:
    """The config history entry of a new layer."""

    created: int  # seconds since 1970: the tar entries' time in an archive
    created_by: str
    comment: str
    created_text: str | None = None  # the config's `created` and the entry's, as written (None: `created` as RFC 3339)


@dataclass(frozen=True)
class Addendum:
    """What goes on top of a base: a layer, its history entry, and labels for the config."""

    layer: LayerBlob
    history: History
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    env: tuple[tuple[str, str], ...] = ()  # KEY, VALUE set in the config's Env (merged over the base's)


@dataclass(frozen=True, eq=False)
class NewImage:
    """The base plus an addendum: config and manifest bytes, ready to be written."""

    base: Image
    layer: LayerBlob | None  # None: the base as it is (an apply that changes nothing adds no layer)
    config: bytes
    manifest: bytes
    created: int

    @property
    def config_digest(self) -> str:
        return sha256(self.config)

    @property
    def manifest_digest(self) -> str:
        return sha256(self.manifest)

    @property
    def diff_ids(self) -> list[str]:
        return json.loads(self.config)["rootfs"]["diff_ids"]


def json_bytes(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_config(base_config: bytes, add: Addendum) -> bytes:
    """The base config plus the layer: diff_id, history entry, labels, created time."""
    try:
        cfg = json.loads(base_config)
    except ValueError as exc:
        raise BadImage(f"The base image's config is not JSON: {exc}.") from None
    if not isinstance(cfg, dict):
        raise BadImage("The base image's config is not a JSON object.")
    when = add.history.created_text or _iso(add.history.created)
    cfg["created"] = when
    rootfs = cfg.get("rootfs") or {"type": "layers", "diff_ids": []}
    rootfs["diff_ids"] = list(rootfs.get("diff_ids") or []) + [add.layer.diff_id]
    cfg["rootfs"] = rootfs
    history = list(cfg.get("history") or [])
    history.append({"created": when, "created_by": add.history.created_by, "comment": add.history.comment})
    cfg["history"] = history
    run = cfg.get("config") or {}
    labels = dict(run.get("Labels") or {})
    labels.update(add.labels)
    run["Labels"] = labels
    if add.env:
        run["Env"] = merge_env(run.get("Env"), add.env)[0]
    cfg["config"] = run
    return json_bytes(cfg)


def created_of(config: bytes) -> str | None:
    """The base config's `created`, as written (None: none, or not a date-time string)."""
    value = member_or_none(config, "created")
    if not isinstance(value, str):
        return None
    try:  # RFC 3339 as Go writes it (fractions up to nanoseconds, Z or an offset)
        datetime.fromisoformat(value.replace("Z", "+00:00")[:19])
    except ValueError:
        return None
    return value


def merge_env(base: object, env: tuple[tuple[str, str], ...]) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """The Env list with each KEY=VALUE of `env` set: a key the base sets is replaced in its place,
    a new one appended (in `env`'s order); and (KEY, the base's value) of each replaced key whose
    value differs."""
    out = [e for e in (base if isinstance(base, list) else []) if isinstance(e, str)]
    replaced: list[tuple[str, str]] = []
    for key, value in env:
        at = next((i for i, e in enumerate(out) if e.partition("=")[0] == key), None)
        if at is None:
            out.append(f"{key}={value}")
            continue
        old = out[at].partition("=")[2]
        if old != value:
            replaced.append((key, old))
        out[at] = f"{key}={value}"
        out = out[: at + 1] + [e for e in out[at + 1:] if e.partition("=")[0] != key]  # a key listed twice: once
    return out, tuple(replaced)


def config_env(config: bytes) -> dict[str, str] | None:
    """The Env a config sets (KEY -> VALUE; the last of a key listed twice), None when it is not JSON."""
    try:
        cfg = json.loads(config)
        env = (cfg.get("config") or {}).get("Env") or []
    except (ValueError, AttributeError):
        return None
    if not isinstance(env, list):
        return {}
    return dict(e.partition("=")[::2] for e in env if isinstance(e, str))


def _descriptor_json(d: Descriptor, media_type: str | None = None) -> dict:
    out: dict = {"mediaType": media_type or d.media_type, "digest": d.digest, "size": d.size}
    if d.annotations:
        out["annotations"] = dict(sorted(d.annotations.items()))
    return out


def new_manifest(base: Image, config: bytes, layer: LayerBlob | None) -> bytes:
    """An OCI manifest: the base layers (media types in their OCI names), then the new layer (if any)."""
    try:
        base_manifest = json.loads(base.manifest_bytes)
    except ValueError:
        base_manifest = {}
    annotations = dict((base_manifest.get("annotations") or {}) if isinstance(base_manifest, dict) else {})
    annotations[ANNOTATION_BASE_DIGEST] = base.manifest_digest
    annotations[ANNOTATION_BASE_NAME] = annotation_name(base)  # image.base_image: the spec's form for a registry's
    layers = [_descriptor_json(l.descriptor, oci_media_type(l.descriptor.media_type)) for l in base.layers]
    if layer is not None:
        new_layer: dict = {"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}
        if layer.annotations:
            new_layer["annotations"] = dict(sorted(layer.annotations.items()))
        layers.append(new_layer)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": sha256(config), "size": len(config)},
        "layers": layers,
        "annotations": dict(sorted(annotations.items())),
    }
    return json_bytes(manifest)


def append(base: Image, add: Addendum) -> NewImage:
    """The base image with `add.layer` on top."""
    config = new_config(base.config_bytes, add)
    return NewImage(base, add.layer, config, new_manifest(base, config, add.layer), add.history.created)


def unchanged(base: Image, created: int) -> NewImage:
    """The base as it is, for an output that would add nothing: its config and layers, no new layer.
    An OCI manifest is kept byte for byte (the same digest); another is written in OCI terms."""
    try:
        doc = json.loads(base.manifest_bytes)
    except ValueError:
        doc = None
    oci = (isinstance(doc, dict) and doc.get("mediaType", OCI_MANIFEST) == OCI_MANIFEST
           and isinstance(doc.get("config"), dict) and doc["config"].get("mediaType") == OCI_CONFIG)
    manifest = base.manifest_bytes if oci else new_manifest(base, base.config_bytes, None)
    return NewImage(base, None, base.config_bytes, manifest, created)


def platform_of(config: bytes) -> dict | None:
    """The index entry's platform, from the config."""
    cfg = json.loads(config)
    if not cfg.get("os") or not cfg.get("architecture"):
        return None
    plat = {"architecture": cfg["architecture"], "os": cfg["os"]}
    if cfg.get("variant"):
        plat["variant"] = cfg["variant"]
    return plat


def index_entry(img: NewImage, tag: str | None) -> dict:
    """The image's entry in an OCI index.json."""
    entry: dict = {"mediaType": OCI_MANIFEST, "digest": img.manifest_digest, "size": len(img.manifest)}
    if tag:
        entry["annotations"] = {ANNOTATION_REF_NAME: tag}
    plat = platform_of(img.config)
    if plat:
        entry["platform"] = plat
    return entry


def chain_id(diff_ids: list[str]) -> str:
    """The OCI ChainID of a layer stack (used as the top layer's ID in `repositories`)."""
    chain = diff_ids[0]
    for d in diff_ids[1:]:
        chain = sha256(f"{chain} {d}".encode())
    return chain


def index_bytes(images: list[NewImage]) -> bytes:
    """An OCI image index over the images' manifests, each with its platform (in the order given)."""
    return json_bytes({"schemaVersion": 2, "mediaType": OCI_INDEX,
                       "manifests": [index_entry(img, None) for img in images]})
