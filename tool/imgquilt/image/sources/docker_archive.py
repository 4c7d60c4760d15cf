"""`docker-archive:FILE[:REPO:TAG|:@N]`: what `docker save` writes, in both of its layouts.

- Docker 25+ writes an OCI layout inside the tar (oci-layout, index.json, blobs/) plus the legacy
  manifest.json: read as an OCI layout, so the manifest digest is the real one.
- Older Docker (and skopeo) write only manifest.json, the config as <id>.json and each layer as an
  uncompressed tar (<id>/layer.tar, or <diff_id>.tar). There is no manifest blob; as skopeo does, a
  Docker schema 2 manifest is made up from the config and layers, and its digest identifies the
  image (it equals `skopeo inspect docker-archive:FILE`'s Digest). Layers are checked against the
  config's diff_ids, the config against its file name when that is its digest.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...errors import BadImage
from .archive_index import ArchiveIndex
from ..layers.blob_layer import BlobLayer
from ..layers.blobio import read_verified
from ..digests import check_digest, sha256_digest
from ..mediatypes import DOCKER_CONFIG, DOCKER_LAYER_GZIP, DOCKER_MANIFEST, LAYER_MEDIA_TYPES
from ..model import Descriptor
from .oci_archive import ArchiveStore
from .oci_layout import check_layout_marker
from .oci_reader import IndexEntry, index_entries, load_image, parse_json, select_top, tagged
from .platforms import Platform
from .stored_image import StoredImage

_HEX_NAME = re.compile(r"^(?:blobs/sha256/)?([0-9a-f]{64})(?:\.json)?$")
MAX_CONFIG = 64 << 20


def open_docker_archive(path: Path, *, ref: str, tag: str | None, platform: str | None,
                        index: ArchiveIndex | None = None) -> StoredImage:
    where = f"docker archive {path}"
    if index is None:
        index = ArchiveIndex.build(path, what="docker archive")
    entries = _legacy_entries(index, where)
    source_index = None
    if tag is not None and tag.startswith("@"):
        try:
            source_index = int(tag[1:])
        except ValueError:
            raise BadImage(f"Bad image index {tag!r} in {ref!r}; write @0, @1, ...") from None
    if "index.json" in index.members and "oci-layout" in index.members:
        return _open_oci_in_tar(index, entries, where=where, ref=ref, tag=tag,
                                source_index=source_index, platform=platform)
    if entries is None:
        raise BadImage(f"{where} is not a docker archive: it has neither manifest.json nor index.json.")
    return _open_legacy(index, entries, where=where, ref=ref, tag=tag, source_index=source_index,
                        platform=platform)


def _legacy_entries(index: ArchiveIndex, where: str) -> list[dict[str, Any]] | None:
    data = index.read("manifest.json", limit=16 << 20)
    if data is None:
        return None
    try:
        entries = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BadImage(f"manifest.json of {where} is not valid JSON ({exc}).") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadImage(f"manifest.json of {where} is not a list of image entries.")
    return entries


def _repo_tags(entry: dict[str, Any]) -> list[str]:
    tags = entry.get("RepoTags") or []
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def _pick_entry(entries: list[dict[str, Any]], *, tag: str | None, source_index: int | None,
                where: str) -> dict[str, Any]:
    if source_index is not None:
        if not 0 <= source_index < len(entries):
            raise BadImage(f"{where} holds {len(entries)} image(s); there is no image @{source_index}.")
        return entries[source_index]
    if tag is not None:
        return tagged(entries, _repo_tags, tag, where=where,
                      hint="Write docker-archive:FILE:REPO:TAG with one of them, or docker-archive:FILE:@N.")[0]
    if len(entries) == 1:
        return entries[0]
    if not entries:
        raise BadImage(f"{where} holds no image.")
    labels = [", ".join(_repo_tags(e)) or f"@{i} (untagged)" for i, e in enumerate(entries)]
    raise BadImage(
        f"{where} holds {len(entries)} images and the reference names none of them: {'; '.join(labels)}.",
        hint="Write docker-archive:FILE:REPO:TAG or docker-archive:FILE:@N.",
    )


def _open_legacy(index: ArchiveIndex, entries: list[dict[str, Any]], *, where: str, ref: str,
                 tag: str | None, source_index: int | None, platform: str | None) -> StoredImage:
    entry = _pick_entry(entries, tag=tag, source_index=source_index, where=where)
    config_name = entry.get("Config")
    layer_names = entry.get("Layers")
    if not isinstance(config_name, str) or not isinstance(layer_names, list):
        raise BadImage(f"manifest.json of {where} has an entry without Config or Layers.")
    loc = index.location(config_name)
    if loc is None:
        raise BadImage(f"{where} lacks the config {config_name!r} its manifest.json names.")
    named = _HEX_NAME.match(config_name)
    if named:  # the config file is named by its digest: check it
        config_digest = "sha256:" + named.group(1)
        config_bytes = read_verified(loc, config_digest, what="config", limit=MAX_CONFIG)
    else:
        config_bytes = index.read(config_name, limit=MAX_CONFIG) or b""
        config_digest = sha256_digest(config_bytes)
    config = parse_json(config_bytes, f"config {config_name} of {where}")
    rootfs = config.get("rootfs") or {}
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or len(diff_ids) != len(layer_names):
        raise BadImage(f"{where}: the config's rootfs.diff_ids do not match the Layers of manifest.json.")
    layers: list[BlobLayer] = []
    manifest_layers = []
    for i, (name, diff_id) in enumerate(zip(layer_names, diff_ids)):
        check_digest(diff_id, what=f"diff_id {i} of config {config_name}")
        lloc = index.location(name) if isinstance(name, str) else None
        if lloc is None:
            raise BadImage(f"{where} lacks layer {name!r} that its manifest.json names.",
                           hint="The archive is incomplete; save or copy it again.")
        layer = BlobLayer(None, diff_id, lloc, verify="diff_id", what=f"layer {name} ({diff_id})")
        if layer.compression == "none":  # the usual case: the blob is the tar, its digest the diff_id
            layer = BlobLayer(Descriptor(LAYER_MEDIA_TYPES["none"], diff_id, lloc.size), diff_id, lloc,
                              verify="diff_id", what=layer.what)
        layers.append(layer)
        manifest_layers.append({"mediaType": DOCKER_LAYER_GZIP, "size": lloc.size, "digest": diff_id})
    # the manifest skopeo makes up for this archive (Go's json.Marshal: compact, this key order)
    manifest = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG, "size": len(config_bytes), "digest": config_digest},
        "layers": manifest_layers,
    }
    manifest_bytes = json.dumps(manifest, separators=(",", ":")).encode()
    actual = Platform.from_json(config)
    if platform is not None and actual is not None and not Platform.parse(platform).matches(actual):
        raise BadImage(f"{where}: the image is for platform {actual}, not {platform}.")
    return StoredImage(
        ref=ref,
        manifest_digest=sha256_digest(manifest_bytes),
        manifest_bytes=manifest_bytes,
        config_bytes=config_bytes,
        platform=str(actual) if actual else "unknown",
        layers=layers,
        transport="docker-archive",
        names=tuple(_repo_tags(entry)),
    )


def _open_oci_in_tar(index: ArchiveIndex, entries: list[dict[str, Any]] | None, *, where: str, ref: str,
                     tag: str | None, source_index: int | None, platform: str | None) -> StoredImage:
    check_layout_marker(index.read("oci-layout", limit=1 << 16), where)
    index_bytes = index.read("index.json", limit=16 << 20) or b""
    store = ArchiveStore(index, where)
    top = index_entries(parse_json(index_bytes, f"index.json of {where}"), f"index.json of {where}")
    legacy = entries or []

    def extra_names(e: IndexEntry) -> list[str]:
        # manifest.json's RepoTags belong to the image whose config it names
        if len(top) == 1 and len(legacy) == 1:
            return _repo_tags(legacy[0])
        names: list[str] = []
        for item in legacy:
            config = item.get("Config")
            m = _HEX_NAME.match(config) if isinstance(config, str) else None
            if m and _manifest_config(store, e) == "sha256:" + m.group(1):
                names += _repo_tags(item)
        return names

    if source_index is not None:
        if not 0 <= source_index < len(top):
            raise BadImage(f"{where} holds {len(top)} image(s); there is no image @{source_index}.")
        desc = top[source_index].descriptor
    else:
        desc = select_top(top, tag=tag, digest=None, platform=platform, where=where, store=store,
                          extra_names=extra_names)
    chosen = [e for e in top if e.digest == desc.digest]
    names = tuple(n for e in chosen for n in e.names + extra_names(e))
    return load_image(store, desc, ref=ref, platform=platform, transport="docker-archive", names=names)


def _manifest_config(store: ArchiveStore, entry: IndexEntry) -> str | None:
    loc = store.locate(entry.digest)
    if loc is None:
        return None
    try:
        manifest = json.loads(read_verified(loc, entry.digest, what="manifest", limit=4 << 20))
        digest = manifest.get("config", {}).get("digest")
    except (ValueError, AttributeError, RecursionError, BadImage):
        return None
    return digest if isinstance(digest, str) else None
