"""Build a layered OCI image from real directories of this machine (for bench_apply.py).

Each layer is `tar -C ROOT --sort=name` of some paths (their parent directories included, as a
build tool writes them), gzipped with isal while the uncompressed tar is hashed for the diff_id.
The image is a plain OCI layout with one tag, as skopeo and umoci write it.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from isal import isal_zlib

CHUNK = 4 << 20
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class LayerPlan:
    """A layer: a name for the history, and paths relative to the root to put in it."""

    name: str
    paths: tuple[str, ...]


@dataclass(frozen=True)
class BuiltLayer:
    name: str
    digest: str
    diff_id: str
    size: int  # compressed
    tar_size: int  # uncompressed
    blob: Path
    paths: tuple[str, ...]


@dataclass(frozen=True)
class BuiltImage:
    layout: Path
    tag: str
    manifest_digest: str
    layers: tuple[BuiltLayer, ...]

    @property
    def ref(self) -> str:
        return f"oci:{self.layout}:{self.tag}"

    @property
    def size(self) -> int:
        return sum(l.size for l in self.layers)

    @property
    def tar_size(self) -> int:
        return sum(l.tar_size for l in self.layers)


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _parents(paths: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for p in paths:
        parts = p.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in out:
                out.append(d)
    return out


def build_layer(root: Path, plan: LayerPlan, blobs: Path, *, level: int = 2) -> BuiltLayer | None:
    """tar | (sha256 of the tar) | isal gzip | (sha256 of the blob) > blobs/sha256/<digest>."""
    present = tuple(p for p in plan.paths if (root / p).exists())
    if not present:
        return None
    cmd = ["tar", "-C", str(root), "--sort=name", "--numeric-owner", "--ignore-failed-read",
           "--warning=no-file-changed", "--warning=no-file-ignored", "-cf", "-",
           "--no-recursion", *_parents(present), "--recursion", *present]
    tar_hash, blob_hash = hashlib.sha256(), hashlib.sha256()
    tar_size = size = 0
    comp = isal_zlib.compressobj(level, isal_zlib.DEFLATED, 31)
    fd, tmp = tempfile.mkstemp(dir=blobs, prefix=".layer.")
    try:
        with os.fdopen(fd, "wb") as out, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None
            while chunk := proc.stdout.read(CHUNK):
                tar_hash.update(chunk)
                tar_size += len(chunk)
                data = comp.compress(chunk)
                blob_hash.update(data)
                size += len(data)
                out.write(data)
            data = comp.flush()
            blob_hash.update(data)
            size += len(data)
            out.write(data)
        if proc.returncode not in (0, 1):  # 1: some file changed or vanished while read
            raise RuntimeError(f"tar exited {proc.returncode} for layer {plan.name}")
        digest = "sha256:" + blob_hash.hexdigest()
        final = blobs / digest.split(":", 1)[1]
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return BuiltLayer(plan.name, digest, "sha256:" + tar_hash.hexdigest(), size, tar_size, final, present)


def build_image(dest: Path, plans: list[LayerPlan], *, root: Path = Path("/"), tag: str = "bench",
                level: int = 2, progress=None) -> BuiltImage:
    """Write an OCI layout at `dest` (must not exist) with one layer per plan that has any path."""
    dest = Path(dest)
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layers: list[BuiltLayer] = []
    for plan in plans:
        if progress:
            progress(f"building layer {plan.name}: {', '.join(plan.paths)}")
        built = build_layer(root, plan, blobs, level=level)
        if built is not None:
            layers.append(built)
            if progress:
                progress(f"  {built.tar_size / 1e6:,.0f} MB tar -> {built.size / 1e6:,.0f} MB gzip")
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [l.diff_id for l in layers]},
        "history": [{"created_by": f"bench layer {l.name}"} for l in layers],
    }
    config_bytes = _json(config)
    (blobs / _sha(config_bytes).split(":", 1)[1]).write_bytes(config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": l.digest, "size": l.size} for l in layers],
    }
    manifest_bytes = _json(manifest)
    (blobs / _sha(manifest_bytes).split(":", 1)[1]).write_bytes(manifest_bytes)
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _sha(manifest_bytes),
            "size": len(manifest_bytes),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    }
    (dest / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    (dest / "index.json").write_bytes(_json(index))
    return BuiltImage(dest, tag, _sha(manifest_bytes), tuple(layers))
