"""Write the base image plus the apply's layer as a new image: `oci:`, `oci-archive:`, `docker-archive:`.

The base blobs are carried over byte for byte (hard-linked into an `oci:` layout when they sit on
the same filesystem, streamed otherwise), never recompressed, and every one is checked against its
digest on the way. The config gains the new diff_id, a history entry and the labels
`org.imgquilt.series.sha256` / `org.imgquilt.patches`; the manifest gains the annotations
`org.opencontainers.image.base.digest` / `.base.name`. JSON keeps the base config's key order and
is written compactly, so the same inputs give the same image digest, run after run.

Where the output goes:
- `oci:DIR[:TAG]`: a new DIR is built in a temp directory beside it and renamed into place. An
  existing OCI layout is added to: blobs are content-addressed (each written to a temp name and
  renamed; present ones are kept), then index.json is replaced atomically under an flock on the
  layout directory, dropping any earlier manifest with the same tag. Adding to an existing layout
  needs a TAG. On failure the blobs this call created are removed again.
- `oci-archive:FILE[:TAG]`, `docker-archive:FILE[:REPO:TAG]`: the archive is streamed into a temp
  file beside FILE and renamed over it. docker-archive is the `docker save` layout (manifest.json,
  repositories, `<config hex>.json`, one file per layer); base layers keep their compression
  (docker, podman and skopeo all load gzip or zstd layer files), the new layer is uncompressed.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Iterator, Literal

from ...engine.result import ApplyResult
from ...errors import BadImage, DigestMismatch, UsageError
from ...util.atomic import fsync_dir
from .layer import Compression, LayerBlob, build_layer, check_output_path, output_file, resolve_epoch
from ..model import Descriptor, Image, Layer

Transport = Literal["oci", "oci-archive", "docker-archive"]

MEDIA_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
# docker media types and their OCI names (the blob bytes are the same)
DOCKER_TO_OCI = {
    "application/vnd.docker.image.rootfs.diff.tar": "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
}
LAYER_SUFFIX = {"none": ".tar", "gzip": ".tar.gz", "zstd": ".tar.zst"}

LABEL_SERIES = "org.imgquilt.series.sha256"
LABEL_PATCHES = "org.imgquilt.patches"
ANNOTATION_BASE_DIGEST = "org.opencontainers.image.base.digest"
ANNOTATION_BASE_NAME = "org.opencontainers.image.base.name"
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DOCKER_REF = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::[0-9]+)?/)?"  # optional registry host[:port]/
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"  # path
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$"  # optional tag
)
COPY_CHUNK = 1 << 20


@dataclass(frozen=True)
class OutputRef:
    """Where an image goes: transport, path, and the tag (oci) or REPO:TAG (docker-archive)."""

    transport: Transport
    path: Path
    tag: str | None


@dataclass(frozen=True)
class WrittenImage:
    """What write_image wrote."""

    ref: str
    transport: Transport
    path: Path
    tag: str | None
    digest: str  # the manifest digest; for docker-archive (no manifest) the image ID, = config_digest
    config_digest: str  # also the image ID podman and docker show
    layer_digest: str  # the new layer's blob
    diff_id: str
    layer_size: int


# --- references -------------------------------------------------------------------------------
def parse_output_ref(ref: str) -> OutputRef:
    """`oci:DIR[:TAG]`, `oci-archive:FILE[:TAG]` or `docker-archive:FILE[:REPO:TAG]`."""
    transport, sep, rest = ref.partition(":")
    if not sep or transport not in ("oci", "oci-archive", "docker-archive"):
        raise UsageError(
            f"Cannot write an image to {ref!r}.",
            hint="Write to oci:DIR[:TAG], oci-archive:FILE[:TAG] or docker-archive:FILE[:REPO:TAG].",
        )
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


# --- config and manifest ----------------------------------------------------------------------
def _json_bytes(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_config(base_config: bytes, result: ApplyResult, diff_id: str, epoch: int) -> bytes:
    """The base config plus the layer: diff_id, history entry, labels, created time."""
    try:
        cfg = json.loads(base_config)
    except ValueError as exc:
        raise BadImage(f"The base image's config is not JSON: {exc}.") from None
    if not isinstance(cfg, dict):
        raise BadImage("The base image's config is not a JSON object.")
    when = _iso(epoch)
    cfg["created"] = when
    rootfs = cfg.get("rootfs") or {"type": "layers", "diff_ids": []}
    rootfs["diff_ids"] = list(rootfs.get("diff_ids") or []) + [diff_id]
    cfg["rootfs"] = rootfs
    history = list(cfg.get("history") or [])
    history.append({
        "created": when,
        "created_by": f"imgquilt apply {result.series_sha256}",
        "comment": "imgquilt: " + (", ".join(result.patches) or "no patches"),
    })
    cfg["history"] = history
    run = cfg.get("config") or {}
    labels = dict(run.get("Labels") or {})
    labels[LABEL_SERIES] = result.series_sha256
    labels[LABEL_PATCHES] = ",".join(result.patches)
    run["Labels"] = labels
    cfg["config"] = run
    return _json_bytes(cfg)


def _oci_media_type(media_type: str) -> str:
    return DOCKER_TO_OCI.get(media_type, media_type)


def _descriptor_json(d: Descriptor, media_type: str | None = None) -> dict:
    out: dict = {"mediaType": media_type or d.media_type, "digest": d.digest, "size": d.size}
    if d.annotations:
        out["annotations"] = dict(sorted(d.annotations.items()))
    return out


def new_manifest(base: Image, config: bytes, layer: LayerBlob) -> bytes:
    """An OCI manifest: the base layers (media types in their OCI names), then the new layer."""
    try:
        base_manifest = json.loads(base.manifest_bytes)
    except ValueError:
        base_manifest = {}
    annotations = dict((base_manifest.get("annotations") or {}) if isinstance(base_manifest, dict) else {})
    annotations[ANNOTATION_BASE_DIGEST] = base.manifest_digest
    annotations[ANNOTATION_BASE_NAME] = base.ref
    layers = [_descriptor_json(l.descriptor, _oci_media_type(l.descriptor.media_type)) for l in base.layers]
    layers.append({"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size})
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_OCI_MANIFEST,
        "config": {"mediaType": MEDIA_OCI_CONFIG, "digest": _sha(config), "size": len(config)},
        "layers": layers,
        "annotations": dict(sorted(annotations.items())),
    }
    return _json_bytes(manifest)


def _platform(config: bytes) -> dict | None:
    cfg = json.loads(config)
    if not cfg.get("os") or not cfg.get("architecture"):
        return None
    plat = {"architecture": cfg["architecture"], "os": cfg["os"]}
    if cfg.get("variant"):
        plat["variant"] = cfg["variant"]
    return plat


# --- base blobs -------------------------------------------------------------------------------
def _blob_file(layer: Layer) -> tuple[Path, int] | None:
    """(file, offset) holding the layer's stored bytes, when the reader says where they are."""
    path = getattr(layer, "blob_path", None)
    if path is not None:
        return Path(path), 0
    loc = getattr(layer, "location", None)
    if loc is not None and isinstance(getattr(loc, "path", None), Path) and isinstance(getattr(loc, "offset", None), int):
        return loc.path, loc.offset
    return None


class _Verifier:
    """Reads a base blob while hashing it; `check()` raises DigestMismatch on a bad blob.

    Reads the file directly when the reader says where the blob lies (one hash, not two), else
    through the layer's own `open_blob()`.
    """

    def __init__(self, layer: Layer) -> None:
        self.desc = layer.descriptor
        where = _blob_file(layer)
        if where is not None:
            self._fh: BinaryIO = open(where[0], "rb")
            self._fh.seek(where[1])
            self._left: int | None = self.desc.size
        else:
            self._fh = layer.open_blob()
            self._left = None
        self._hash = hashlib.sha256()
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        if self._left is not None:
            n = self._left if n < 0 else min(n, self._left)
        data = self._fh.read(n)
        self._hash.update(data)
        self.count += len(data)
        if self._left is not None:
            self._left -= len(data)
        return data

    def check(self) -> None:
        actual = "sha256:" + self._hash.hexdigest()
        if actual != self.desc.digest or self.count != self.desc.size:
            raise DigestMismatch(
                f"The base layer blob {self.desc.digest} does not match its descriptor "
                f"(read {self.count} bytes with digest {actual}, expected {self.desc.size} bytes).",
                hint="The base image is corrupt: fetch it again; nothing was written.",
            )

    def close(self) -> None:
        self._fh.close()


def _hash_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(COPY_CHUNK):
            h.update(chunk)
            n += len(chunk)
    return "sha256:" + h.hexdigest(), n


def _unique_layers(base: Image) -> list[Layer]:
    seen: set[str] = set()
    out = []
    for l in base.layers:
        if l.descriptor.digest not in seen:
            seen.add(l.descriptor.digest)
            out.append(l)
    return out


def _prepare(base: Image, result: ApplyResult, compression: Compression, epoch: int | None) -> tuple[LayerBlob, bytes, bytes]:
    when = resolve_epoch(epoch)
    layer = build_layer(result, compression, epoch=when)
    config = new_config(base.config_bytes, result, layer.diff_id, when)
    manifest = new_manifest(base, config, layer)
    return layer, config, manifest


# --- oci: a layout directory ------------------------------------------------------------------
class _LayoutWriter:
    """Puts blobs into an OCI layout directory; remembers the ones it created (to undo)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs" / "sha256"
        self.created: list[Path] = []

    def path(self, digest: str) -> Path:
        algo, _, hexd = digest.partition(":")
        if algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexd):
            raise BadImage(f"Unsupported blob digest {digest!r} (only sha256 is supported).")
        return self.blobs / hexd

    def has(self, digest: str, size: int) -> bool:
        p = self.path(digest)
        try:
            return p.stat().st_size == size
        except FileNotFoundError:
            return False

    def put_bytes(self, digest: str, data: bytes) -> None:
        if self.has(digest, len(data)):
            return
        with self._temp(digest) as fh:
            fh.write(data)

    def put_layer(self, layer: Layer) -> None:
        d = layer.descriptor
        if self.has(d.digest, d.size):
            return
        where = _blob_file(layer)
        if where is not None and where[1] == 0 and self._link(where[0], d):
            return
        v = _Verifier(layer)
        try:
            with self._temp(d.digest) as fh:
                while chunk := v.read(COPY_CHUNK):
                    fh.write(chunk)
                v.check()
        finally:
            v.close()

    def _link(self, src: Path, d: Descriptor) -> bool:
        """Hard-link a base blob (same filesystem), then hash it: a bad blob is never kept."""
        dest = self.path(d.digest)
        tmp = dest.with_name(f".{dest.name}.link.{os.getpid()}")
        try:
            if os.stat(src).st_size != d.size:
                return False  # the blob is part of a larger file: copy it instead
            os.link(src, tmp)
        except OSError:
            return False
        try:
            digest, size = _hash_file(tmp)
            if digest != d.digest or size != d.size:
                raise DigestMismatch(
                    f"The base layer blob {d.digest} ({src}) does not match its descriptor "
                    f"(found {size} bytes with digest {digest}).",
                    hint="The base image is corrupt: fetch it again; nothing was written.",
                )
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.created.append(dest)
        return True

    @contextmanager
    def _temp(self, digest: str) -> Iterator[BinaryIO]:
        dest = self.path(digest)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=self.blobs)
        try:
            with os.fdopen(fd, "wb") as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.created.append(dest)

    def undo(self) -> None:
        for p in self.created:
            p.unlink(missing_ok=True)
        self.created.clear()


def _index_entry(manifest: bytes, config: bytes, tag: str | None) -> dict:
    entry: dict = {"mediaType": MEDIA_OCI_MANIFEST, "digest": _sha(manifest), "size": len(manifest)}
    if tag:
        entry["annotations"] = {ANNOTATION_REF_NAME: tag}
    plat = _platform(config)
    if plat:
        entry["platform"] = plat
    return entry


def _fill_layout(w: _LayoutWriter, base: Image, layer: LayerBlob, config: bytes, manifest: bytes) -> None:
    for l in _unique_layers(base):
        w.put_layer(l)
    w.put_bytes(layer.digest, layer.data)
    w.put_bytes(_sha(config), config)
    w.put_bytes(_sha(manifest), manifest)


@contextmanager
def _locked_dir(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_image_destination(ref: str) -> OutputRef:
    """Refuse a bad `--output-image` before anything is computed or written."""
    out = parse_output_ref(ref)
    _check_destination(out)
    return out


def _check_destination(out: OutputRef) -> None:
    path = out.path
    if out.transport != "oci":
        check_output_path(path, what="image archive")
        return
    if path.exists() and not path.is_dir():
        raise UsageError(f"Cannot write an OCI layout to {str(path)!r}: it is not a directory.")
    if path.is_dir() and (path / "oci-layout").exists():
        if not out.tag:
            raise UsageError(
                f"{str(path)!r} already holds an OCI layout: name a tag to add the image under.",
                hint=f"Write to oci:{path}:TAG.",
            )
        return
    if path.is_dir() and any(path.iterdir()):
        raise UsageError(f"Cannot write an OCI layout to {str(path)!r}: the directory is not empty and holds no OCI layout.")
    if not path.parent.is_dir():
        raise UsageError(f"Cannot write an OCI layout to {str(path)!r}: directory {str(path.parent)!r} does not exist.")


def _write_oci_dir(out: OutputRef, base: Image, layer: LayerBlob, config: bytes, manifest: bytes) -> None:
    root = out.path
    entry = _index_entry(manifest, config, out.tag)
    _check_destination(out)
    if root.is_dir() and (root / "oci-layout").exists():
        _add_to_layout(root, entry, base, layer, config, manifest)
        return
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
    except OSError as exc:
        raise UsageError(f"Cannot write an OCI layout to {str(root)!r}: {exc.strerror}.") from None
    try:
        os.chmod(tmp, 0o755)
        (tmp / "blobs" / "sha256").mkdir(parents=True)
        w = _LayoutWriter(tmp)
        _fill_layout(w, base, layer, config, manifest)
        (tmp / "oci-layout").write_bytes(_json_bytes({"imageLayoutVersion": "1.0.0"}))
        index = {"schemaVersion": 2, "mediaType": MEDIA_OCI_INDEX, "manifests": [entry]}
        (tmp / "index.json").write_bytes(_json_bytes(index))
        os.rename(tmp, root)  # replaces an empty directory too
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise UsageError(f"Cannot write an OCI layout to {str(root)!r}: {exc.strerror or exc}.") from None
        raise
    fsync_dir(root.parent)


def _add_to_layout(root: Path, entry: dict, base: Image, layer: LayerBlob, config: bytes, manifest: bytes) -> None:
    w = _LayoutWriter(root)
    try:
        w.blobs.mkdir(parents=True, exist_ok=True)
        with _locked_dir(root):
            _fill_layout(w, base, layer, config, manifest)
            try:
                index = json.loads((root / "index.json").read_bytes())
            except FileNotFoundError:
                index = {"schemaVersion": 2, "manifests": []}
            except ValueError as exc:
                raise BadImage(f"{root / 'index.json'} is not valid JSON: {exc}.") from None
            kept = [m for m in index.get("manifests") or [] if (m.get("annotations") or {}).get(ANNOTATION_REF_NAME) != _entry_tag(entry)]
            index["manifests"] = kept + [entry]
            with output_file(root / "index.json", what="index") as fh:
                fh.write(_json_bytes(index))
    except BaseException as exc:
        w.undo()
        if isinstance(exc, OSError):
            raise UsageError(f"Cannot add the image to {str(root)!r}: {exc.strerror or exc}.") from None
        raise


def _entry_tag(entry: dict) -> str | None:
    return (entry.get("annotations") or {}).get(ANNOTATION_REF_NAME)


# --- archives ---------------------------------------------------------------------------------
class _ArchiveWriter:
    """Streams members into a deterministic tar (PAX, sorted by the caller, one mtime)."""

    def __init__(self, fh: BinaryIO, mtime: int) -> None:
        self.tar = tarfile.open(fileobj=fh, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8")
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

    def add_bytes(self, name: str, data: bytes) -> None:
        self.tar.addfile(self._info(name, tarfile.REGTYPE, len(data)), io.BytesIO(data))

    def add_layer(self, name: str, layer: Layer) -> None:
        v = _Verifier(layer)
        try:
            self.tar.addfile(self._info(name, tarfile.REGTYPE, layer.descriptor.size), v)  # type: ignore[arg-type]
            v.check()
        except OSError as exc:  # tarfile: "unexpected end of data" on a short blob
            if "end of data" in str(exc):
                v.check()
            raise
        finally:
            v.close()

    def close(self) -> None:
        self.tar.close()


def _write_oci_archive(out: OutputRef, base: Image, layer: LayerBlob, config: bytes, manifest: bytes, mtime: int) -> None:
    entry = _index_entry(manifest, config, out.tag)
    index = {"schemaVersion": 2, "mediaType": MEDIA_OCI_INDEX, "manifests": [entry]}
    small = {layer.digest: layer.data, _sha(config): config, _sha(manifest): manifest}
    base_layers = {l.descriptor.digest: l for l in _unique_layers(base)}
    with output_file(out.path, what="image archive") as fh:
        a = _ArchiveWriter(fh, mtime)
        a.add_dir("blobs")
        a.add_dir("blobs/sha256")
        for digest in sorted(set(small) | set(base_layers)):
            name = "blobs/sha256/" + digest.split(":", 1)[1]
            if digest in base_layers:
                a.add_layer(name, base_layers[digest])
            else:
                a.add_bytes(name, small[digest])
        a.add_bytes("index.json", _json_bytes(index))
        a.add_bytes("oci-layout", _json_bytes({"imageLayoutVersion": "1.0.0"}))
        a.close()


def _compression_of(media_type: str) -> Compression:
    if media_type.endswith("gzip"):
        return "gzip"
    if media_type.endswith("zstd"):
        return "zstd"
    return "none"


def chain_id(diff_ids: list[str]) -> str:
    """The OCI ChainID of a layer stack (used as the top layer's ID in `repositories`)."""
    chain = diff_ids[0]
    for d in diff_ids[1:]:
        chain = _sha(f"{chain} {d}".encode())
    return chain


def _write_docker_archive(out: OutputRef, base: Image, layer: LayerBlob, config: bytes, mtime: int) -> None:
    names: list[str] = []
    base_files: dict[str, Layer] = {}
    for l in base.layers:
        d = l.descriptor
        name = d.digest.split(":", 1)[1] + LAYER_SUFFIX[_compression_of(d.media_type)]
        names.append(name)
        base_files.setdefault(name, l)
    new_name = layer.diff_id.split(":", 1)[1] + LAYER_SUFFIX[layer.compression]
    names.append(new_name)
    config_name = _sha(config).split(":", 1)[1] + ".json"
    repo_tags = [out.tag] if out.tag else []
    manifest = [{"Config": config_name, "RepoTags": repo_tags, "Layers": names}]
    repositories: dict = {}
    if out.tag:
        repo, _, tag = out.tag.rpartition(":")
        diff_ids = json.loads(config)["rootfs"]["diff_ids"]
        repositories = {repo: {tag: chain_id(diff_ids).split(":", 1)[1]}}
    with output_file(out.path, what="image archive") as fh:
        a = _ArchiveWriter(fh, mtime)
        for name, l in base_files.items():
            a.add_layer(name, l)
        if new_name not in base_files:
            a.add_bytes(new_name, layer.data)
        a.add_bytes(config_name, config)
        a.add_bytes("manifest.json", _json_bytes(manifest))
        if repositories:
            a.add_bytes("repositories", _json_bytes(repositories))
        a.close()


# --- entry point ------------------------------------------------------------------------------
def write_image(
    base: Image,
    result: ApplyResult,
    ref: str,
    *,
    epoch: int | None = None,
    compression: Compression | None = None,
) -> WrittenImage:
    """Write `base` plus the layer of `result` to `ref`; whole or not at all.

    `compression` is the new layer's (default: gzip for oci/oci-archive, none for docker-archive).
    """
    out = check_image_destination(ref)
    comp: Compression = compression or ("none" if out.transport == "docker-archive" else "gzip")
    when = resolve_epoch(epoch)
    layer, config, manifest = _prepare(base, result, comp, when)
    if out.transport == "oci":
        _write_oci_dir(out, base, layer, config, manifest)
    elif out.transport == "oci-archive":
        _write_oci_archive(out, base, layer, config, manifest, when)
    else:
        _write_docker_archive(out, base, layer, config, when)
    return WrittenImage(
        ref=ref,
        transport=out.transport,
        path=out.path,
        tag=out.tag,
        digest=_sha(config) if out.transport == "docker-archive" else _sha(manifest),
        config_digest=_sha(config),
        layer_digest=layer.digest,
        diff_id=layer.diff_id,
        layer_size=layer.size,
    )

