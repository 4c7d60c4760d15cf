"""Write a new image as one tar file: `oci-archive:FILE[:TAG]` or `docker-archive:FILE[:REPO:TAG]`.

The archive is streamed into a temp file beside FILE and renamed over it (util.atomic). Members are
deterministic: PAX, one mtime (the image's created time), sorted. docker-archive is the `docker
save` layout (manifest.json, repositories, `<config hex>.json`, one file per layer); base layers
keep their compression (docker, podman and skopeo all load gzip or zstd layer files). Every base
blob is verified as it is copied.
"""
from __future__ import annotations

import tarfile
from contextlib import closing
from pathlib import Path
from typing import BinaryIO, Sequence

from ...fs.content import Data, open_reader
from ..mediatypes import OCI_INDEX, Compression, compression_of
from ..model import Layer
from ..referrers import Referrer
from .base_blobs import open_checked, unique_layers
from .layout import LAYOUT_MARKER
from .mutate import NewImage, chain_id, index_entry, json_bytes
from .output_file import output_file

LAYER_SUFFIX: dict[Compression, str] = {"none": ".tar", "gzip": ".tar.gz", "zstd": ".tar.zst"}


class _Tar:
    """Streams members into a deterministic tar (PAX, sorted by the caller, one mtime)."""

    def __init__(self, fh: BinaryIO, mtime: int) -> None:
        self.tar = tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8", copybufsize=1 << 20)
        self.mtime = mtime

    def _info(self, name: str, kind: bytes, size: int = 0) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.type = kind
        ti.size = size
        ti.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
        ti.mtime = self.mtime
        ti.uname = ti.gname = ""
        return ti

    def add_dir(self, name: str) -> None:
        self.tar.addfile(self._info(name, tarfile.DIRTYPE))

    def add_bytes(self, name: str, data: Data) -> None:
        self.tar.addfile(self._info(name, tarfile.REGTYPE, len(data)), open_reader(data))

    def add_layer(self, name: str, layer: Layer) -> None:
        with closing(open_checked(layer)) as src:
            try:
                self.tar.addfile(self._info(name, tarfile.REGTYPE, layer.descriptor.size), src)  # type: ignore[arg-type]
            except OSError as exc:  # tarfile: "unexpected end of data" on a short blob
                if "end of data" in str(exc):
                    src.drain()  # a short blob is a bad blob: say so
                raise
            src.drain()

    def close(self) -> None:
        self.tar.close()


def write_oci_archive(img: NewImage, path: Path, tag: str | None, referrers: Sequence[Referrer] = ()) -> None:
    """An OCI layout in a tar: blobs/sha256/*, index.json (the image, then its referrers), oci-layout."""
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX,
             "manifests": [index_entry(img, tag)] + [r.descriptor() for r in referrers]}
    small = {img.config_digest: img.config, img.manifest_digest: img.manifest}
    if img.layer is not None:
        small[img.layer.digest] = img.layer.data
    for r in referrers:
        small.update({**dict(r.blobs), r.digest: r.manifest})
    base_layers = {l.descriptor.digest: l for l in unique_layers(img.base)}
    with output_file(path, what="image archive") as fh:
        a = _Tar(fh, img.created)
        a.add_dir("blobs")
        a.add_dir("blobs/sha256")
        for digest in sorted(set(small) | set(base_layers)):
            name = "blobs/sha256/" + digest.split(":", 1)[1]
            if digest in base_layers:
                a.add_layer(name, base_layers[digest])
            else:
                a.add_bytes(name, small[digest])
        a.add_bytes("index.json", json_bytes(index))
        a.add_bytes("oci-layout", json_bytes(LAYOUT_MARKER))
        a.close()


def write_docker_archive(img: NewImage, path: Path, repo_tag: str | None) -> None:
    """The `docker save` layout: one file per layer, the config, manifest.json, repositories."""
    names: list[str] = []
    base_files: dict[str, Layer] = {}
    for l in img.base.layers:
        d = l.descriptor
        name = d.digest.split(":", 1)[1] + LAYER_SUFFIX[compression_of(d.media_type)]
        names.append(name)
        base_files.setdefault(name, l)
    new_name = None
    if img.layer is not None:
        new_name = img.layer.diff_id.split(":", 1)[1] + LAYER_SUFFIX[img.layer.compression]
        names.append(new_name)
    config_name = img.config_digest.split(":", 1)[1] + ".json"
    manifest = [{"Config": config_name, "RepoTags": [repo_tag] if repo_tag else [], "Layers": names}]
    repositories: dict = {}
    if repo_tag:
        repo, _, tag = repo_tag.rpartition(":")
        repositories = {repo: {tag: chain_id(img.diff_ids).split(":", 1)[1]}}
    with output_file(path, what="image archive") as fh:
        a = _Tar(fh, img.created)
        for name, l in base_files.items():
            a.add_layer(name, l)
        if new_name is not None and new_name not in base_files:
            a.add_bytes(new_name, img.layer.data)  # type: ignore[union-attr]
        a.add_bytes(config_name, img.config)
        a.add_bytes("manifest.json", json_bytes(manifest))
        if repositories:
            a.add_bytes("repositories", json_bytes(repositories))
        a.close()
