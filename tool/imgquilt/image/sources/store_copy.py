"""`containers-storage:` (podman's and buildah's store), copied once per image into the shared cache.

The reference is first resolved to its image ID (the sha256 of the image's config): by `podman image
inspect` when podman is installed and the reference names no store (the image podman shows, in one
quick call: an image copied before is then opened without `podman info` or skopeo, and a new one is
copied by that ID), else by skopeo reading the config from the store (`skopeo inspect --config
--raw`, no layer touched) in the store podman uses (image.containers_store). The image is copied (`skopeo copy`) into one OCI layout in the shared cache
(`store-images/`), tagged by that ID:

- an image whose ID has a complete copy there is not copied again (a tag that moved, or a new image,
  has another ID);
- skopeo copies into a layout only the blobs it does not hold yet: a store keeps layers uncompressed,
  so each layer's blob is its diff_id, and layers shared with an image copied before are not copied;
- nothing is written below the queue directory; the blobs are cache entries like any other, counted,
  trimmed (least recently used first) to `IMGQUILT_CACHE_MAX` and removed by `cache prune`. With the
  shared cache off (`IMGQUILT_NO_CACHE=1`), the copy goes to a temporary directory removed at exit.

A copy is believed only as far as the store vouches for it: the manifest used must name the config
whose sha256 is the ID the store gave, and as its layers exactly the config's diff_ids, uncompressed;
every blob is then checked against its digest as it is read. So a copy damaged, planted or left from
another image is not used (it is copied again), and what is read is what the store holds.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from ...errors import BadImage
from ..skopeo_text import skopeo_message
from .platforms import Platform

PART = "store-images"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_UNCOMPRESSED = ("application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar")
_OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'


def image_id(skopeo: str, src: str, want: Platform, *, ref: str, store: str) -> str:
    """The image ID (config sha256, hex) of `src` as the store holds it."""
    cmd = [skopeo, "--override-os", want.os, "--override-arch", want.arch]
    if want.variant:
        cmd += ["--override-variant", want.variant]
    proc = subprocess.run([*cmd, "inspect", "--config", "--raw", src], stdin=subprocess.DEVNULL, capture_output=True)
    if proc.returncode != 0 or not proc.stdout:
        said = skopeo_message(proc.stderr.decode(errors="replace")) or f"exit status {proc.returncode}"
        raise BadImage(f"skopeo could not read {ref!r}{store}: {said}.",
                       hint=f"Check the reference: `skopeo inspect {src}` shows what skopeo sees.")
    return hashlib.sha256(proc.stdout).hexdigest()


def _read_json(path: Path) -> object:
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as f:
            return json.loads(f.read(4 << 20))
    except (OSError, ValueError, RecursionError):
        return None


def _blob(layout: Path, digest: object) -> Path | None:
    if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71 \
            or digest[7:].strip("0123456789abcdef"):
        return None
    path = layout / "blobs" / "sha256" / digest[7:]
    return path if path.is_file() and not path.is_symlink() else None


TOUCH_AFTER = 24 * 3600  # seconds: a blob used is marked used (its mtime) at most once a day


def _touch(paths: list[Path]) -> None:
    """Mark the blobs used for the cache's least-recently-used eviction, but only those not marked for a
    day: touching a file changes its ctime, which makes the layer's verified marker (device, inode,
    size, mtime, ctime) stale, and the next read would hash the 2 GB again."""
    import time

    now = time.time()
    for p in paths:
        try:
            if now - p.stat().st_mtime > TOUCH_AFTER:
                os.utime(p)
        except OSError:
            pass


def _tagged(layout: Path, config_hex: str) -> tuple[dict, dict, Path | None] | None:
    """index.json of `layout`, its first manifest descriptor tagged `config_hex` and the blob that
    descriptor names (None when it names none there); None when no descriptor is so tagged."""
    index = _read_json(layout / "index.json")
    if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
        return None
    for desc in index["manifests"]:
        if isinstance(desc, dict) and (desc.get("annotations") or {}).get("org.opencontainers.image.ref.name") == config_hex:
            return index, desc, _blob(layout, desc.get("digest"))
    return None


def complete_copy(layout: Path, config_hex: str) -> str | None:
    """The digest of the manifest in `layout` tagged `config_hex` when it is a complete copy of the image
    with that ID (see the module docstring), else None. Its blobs are marked used (_touch)."""
    found = _tagged(layout, config_hex)
    if found is None:
        return None
    _, desc, path = found
    data = path.read_bytes() if path is not None else b""
    if path is None or "sha256:" + hashlib.sha256(data).hexdigest() != desc["digest"]:
        return None
    try:
        m = json.loads(data)
        config_desc, layers = m["config"], m["layers"]
        config_path = _blob(layout, config_desc["digest"])
        if config_desc["digest"] != "sha256:" + config_hex or config_path is None:
            return None
        config = config_path.read_bytes()
        if hashlib.sha256(config).hexdigest() != config_hex:
            return None
        diff_ids = json.loads(config)["rootfs"]["diff_ids"]
        if [layer["digest"] for layer in layers] != diff_ids \
                or any(layer.get("mediaType") not in _UNCOMPRESSED or layer.get("annotations") for layer in layers):
            return None
        blobs = [_blob(layout, layer["digest"]) for layer in layers]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    if any(b is None for b in blobs):
        return None
    _touch([path, config_path, *blobs])  # type: ignore[list-item]
    return desc["digest"]


def store_layout(cache: Path) -> Path:
    """The shared cache's layout for store images (made, and checked as every part is)."""
    from ...cache.trust import CacheDir

    part = CacheDir(cache, PART).path
    if not (part / "oci-layout").exists():
        (part / "oci-layout").write_bytes(_OCI_LAYOUT)
    if not (part / "index.json").exists():
        (part / "index.json").write_text('{"schemaVersion":2,"manifests":[]}')
    return part


def copy_store_image(skopeo: str, src: str, want: Platform, *, ref: str, store: str, layout: Path) -> str:
    """`src` copied into `layout`, tagged by its image ID; returns the manifest digest to open."""
    config_hex = image_id(skopeo, src, want, ref=ref, store=store)
    found = complete_copy(layout, config_hex)
    if found is not None:
        return found
    cmd = [skopeo, "--override-os", want.os, "--override-arch", want.arch]
    if want.variant:
        cmd += ["--override-variant", want.variant]
    # uncompressed, as the store keeps them: no CPU spent compressing, and each layer's blob is its diff_id
    proc = subprocess.run([*cmd, "copy", "--quiet", "--dest-oci-accept-uncompressed-layers", src, f"oci:{layout}:{config_hex}"],
                          stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadImage(f"skopeo could not read {ref!r}{store}: {skopeo_message(proc.stderr) or f'exit status {proc.returncode}'}.",
                       hint=f"Check the reference: `skopeo inspect {src}` shows what skopeo sees.")
    found = _normalize(layout, config_hex)
    if found is None:
        raise BadImage(f"The copy of {ref!r}{store} is not the image the store names (config {config_hex[:12]}): the "
                       "image changed while it was copied, or the store gave compressed layers.",
                       hint="Run again; if it repeats, save the image (`podman save --format oci-archive`) and read that.")
    from ...cache.usage import trim

    trim(layout.parent, keep=frozenset(_blobs_of(layout, found)))
    return found


def _normalize(layout: Path, config_hex: str) -> str | None:
    """The manifest skopeo wrote for `config_hex`, rewritten as what it is: every layer an uncompressed
    tar (skopeo 1.9 keeps the source's `+gzip` media type on the uncompressed diffs it copies from a
    store) with no annotations (a zstd:chunked TOC the store's manifest named is not in these bytes);
    tagged in place of skopeo's. None when skopeo's copy is not the image (config, diff_ids)."""
    from ...util.atomic import atomic_write

    found = _tagged(layout, config_hex)
    if found is None:
        return None
    index, desc, path = found
    m = _read_json(path) if path is not None else None
    try:
        layers = [{"mediaType": _UNCOMPRESSED[0], "digest": x["digest"], "size": x["size"]} for x in m["layers"]]  # type: ignore[index]
        clean = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                 "config": m["config"], "layers": layers}  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    data = json.dumps(clean, separators=(",", ":")).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    atomic_write(layout / "blobs" / "sha256" / digest[7:], data)
    desc.update(digest=digest, size=len(data), mediaType=clean["mediaType"])
    atomic_write(layout / "index.json", json.dumps(index).encode())
    return complete_copy(layout, config_hex)


def _blobs_of(layout: Path, manifest_digest: str) -> list[Path]:
    """The blobs of the manifest (itself, its config, its layers): what the read about to start needs."""
    m = _read_json(layout / "blobs" / "sha256" / manifest_digest[7:])
    paths = [layout / "blobs" / "sha256" / manifest_digest[7:]]
    if isinstance(m, dict):
        for desc in [m.get("config"), *(m.get("layers") or [])]:
            if isinstance(desc, dict) and isinstance(desc.get("digest"), str):
                paths.append(layout / "blobs" / "sha256" / desc["digest"][7:])
    return paths


def drop_temp(layout: Path) -> None:
    shutil.rmtree(layout, ignore_errors=True)
