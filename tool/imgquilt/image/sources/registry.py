"""`docker://HOST/REPO[:TAG|@DIGEST]`: an image read where it lives, in a registry, without a copy.

A tag is resolved to a digest with one HEAD per run; a digest is never resolved again. Manifests
(and indexes) and configs are kept by digest in the shared cache, so a warm run asks the registry
for nothing but that HEAD. Layers are streamed when the reader needs them, top layer first (the
next ones down read ahead, and cancelled when not needed): decompressed, hashed and walked as they
arrive, exactly as a local layer is read (the digest is checked before the end of the stream is seen).
A seekable layer's TOC and files are fetched by HTTP Range (read_range) and checked against the TOC.
A digest the manifest lists more than once is fetched once: its first download is teed into a
private temp directory (blob_memo) that the later listings read.
"""
from __future__ import annotations

import atexit
import threading
from collections import Counter
from functools import cached_property
from typing import BinaryIO

from ...cache import metadata
from ...errors import BadImage, UsageError
from ..layers.blob_layer import BlobLayer, TarStream
from ..layers.blobio import BlobFile, file_location
from ..layers.compression import Decompressed, detect
from ..layers.readahead import ReadAhead
from ..mediatypes import INDEXES, MANIFESTS, Compression, compression_of
from ..model import Descriptor
from ..registry import Registries, RegistryClient, RegistryRef, blob_memo, parse_registry_ref
from .oci_reader import MAX_CONFIG, config_and_layers, image_platform, index_entries, parse_json
from .platforms import choose
from .stored_image import StoredImage

TLS_ENV = "IMGQUILT_TLS_VERIFY"
_NO_FINGERPRINT = (0, 0, 0, 0, 0)  # a download has no file to fingerprint
_pool: Registries | None = None
_pool_lock = threading.Lock()


def tls_verify() -> bool | None:
    """IMGQUILT_TLS_VERIFY=false lets any registry be reached without TLS verification (or over HTTP)."""
    from ...settings import current

    raw = (current().tls_verify or "").strip().lower()  # --tls-verify, else IMGQUILT_TLS_VERIFY
    if raw in ("", "true", "1", "yes"):
        return None  # verify, except loopback and registries.conf `insecure = true`
    if raw in ("false", "0", "no"):
        return False
    raise UsageError(f"{TLS_ENV}={raw!r} is neither true nor false.")


def _bigger_reads() -> None:
    """httpcore reads a response 64 KiB per recv, with Python work for each; a layer download is
    hundreds of MB, and 1 MiB reads cut that work (measured on a 689 MB blob from 127.0.0.1: 1.7 ->
    1.5 s of CPU). A class attribute httpcore reads on every call; another httpcore keeps its default."""
    try:
        from httpcore._sync.http11 import HTTP11Connection
    except ImportError:  # pragma: no cover
        return
    if isinstance(getattr(HTTP11Connection, "READ_NUM_BYTES", None), int):
        HTTP11Connection.READ_NUM_BYTES = max(HTTP11Connection.READ_NUM_BYTES, 1 << 20)


def registries() -> Registries:
    """The process's registry clients: one per registry, connections reused by every reference."""
    global _pool
    with _pool_lock:
        _bigger_reads()
        if _pool is None or _pool.tls_verify != tls_verify():
            _pool = Registries(tls_verify=tls_verify())
            atexit.register(_pool.close)
        return _pool


class RegistryLayer:
    """A layer blob in a registry: streamed when read, checked against its digest before its end."""

    location = None  # no file: nothing a sink can link, nothing VerifiedBlobs can remember
    verify = "blob"
    on_download = None  # the progress of its download (image.sources.OnDownload), given by its ImageSource

    def __init__(self, client: RegistryClient, repository: str, descriptor: Descriptor, diff_id: str,
                 memo: blob_memo.BlobMemo | None = None) -> None:
        self.client = client
        self.repository = repository
        self.descriptor = descriptor
        self.diff_id = diff_id
        self.what = f"layer {descriptor.digest}"
        self._memo = memo  # this image's own, for a digest it lists twice; else the fleet's, if any

    def _downloads(self) -> blob_memo.BlobMemo | None:
        return self._memo or blob_memo.active()

    @property
    def check_digest(self) -> str:
        return self.descriptor.digest

    @cached_property
    def compression(self) -> Compression:
        return compression_of(self.descriptor.media_type)

    def _download(self):
        d = self.descriptor
        stream = self.client.open_blob(self.repository, d.digest, size=d.size, what=self.what)
        if self.on_download is not None:
            stream.on_bytes = self.on_download(self.what, d.size)
        return stream

    def _local_copy(self) -> BlobLayer | None:
        """Within a fleet run: this blob as another image's reader downloaded it (None: download it here)."""
        memo = self._downloads()
        if memo is None:
            return None
        claim = memo.claim(self.descriptor.digest)
        if claim.ready is None:
            self._spool = claim.spool
            return None
        loc = file_location(claim.ready)
        return BlobLayer(self.descriptor, self.diff_id, loc, verify="blob", what=self.what)  # type: ignore[arg-type]

    def _teed(self, stream):
        spool, self._spool = getattr(self, "_spool", None), None
        if spool is not None:
            memo = self._downloads()
            stream.tee(spool, lambda ok: memo.finished(self.descriptor.digest, spool, ok))  # type: ignore[union-attr]
        return stream

    def read_range(self, offset: int, length: int) -> bytes | None:
        """`length` bytes of the blob at `offset` by an HTTP Range request (None: the registry ignores
        Range); not verified here: a seekable layer's reader checks them against its TOC."""
        return self.client.read_blob_range(self.repository, self.descriptor.digest, offset, length, what=self.what)

    def open_blob(self) -> BinaryIO:
        return BlobFile(self._download())  # type: ignore[return-value]

    def open_tar(self) -> BinaryIO:
        return BlobFile(self.open_stream(trusted=False))  # type: ignore[return-value]

    def open_stream(self, *, trusted: bool) -> TarStream:
        """The tar stream of a download; the blob is always hashed (a download is never trusted)."""
        local = self._local_copy()
        if local is not None:
            return local.open_stream(trusted=False)
        try:
            raw = self._teed(self._download())
        except BaseException:
            self._release()
            raise
        try:
            kind = detect(raw.peek(8), what=self.what)  # the bytes decide, as for a local blob
        except BaseException:
            raw.close()
            raise
        ahead = ReadAhead(raw)  # received and hashed by a thread of its own, decompressed by another
        tar = ahead if kind == "none" else Decompressed(ahead, kind, what=self.what)
        return TarStream(tar, ahead, ahead, seekable=False, fingerprint=_NO_FINGERPRINT)

    def _release(self) -> None:
        """A claimed download that never started: let another reader fetch the blob."""
        spool, self._spool = getattr(self, "_spool", None), None
        if spool is not None:
            self._downloads().finished(self.descriptor.digest, spool, False)  # type: ignore[union-attr]


def _cached_manifest(client: RegistryClient, ref: RegistryRef, digest: str) -> bytes:
    cache = metadata.manifests()
    data = cache.get(digest)
    if data is None:
        data = client.get_manifest(ref.repository, digest).data  # verified against the digest
        cache.put(digest, data)
    return data


def _cached_config(client: RegistryClient, ref: RegistryRef, desc: Descriptor) -> bytes:
    cache = metadata.configs()
    data = cache.get(desc.digest)
    if data is None:
        data = client.read_blob(ref.repository, desc.digest, size=desc.size, what="config", limit=MAX_CONFIG)
        cache.put(desc.digest, data)
    return data


def _own_memo() -> blob_memo.BlobMemo:
    """A memo for one image's repeated digests; its temp directory goes when the process ends."""
    memo = blob_memo.BlobMemo()
    atexit.register(memo.close)
    return memo


def resolve_digest(ref: RegistryRef, client: RegistryClient) -> str:
    """The manifest digest `ref` names: its own digest, else one HEAD for the tag."""
    return ref.digest or client.resolve(ref).digest


def open_registry_image(raw: str, *, platform: str | None) -> StoredImage:
    """The image `raw` (docker://...) names, for `platform` when it is an index."""
    ref = parse_registry_ref(raw)
    client = registries().client(ref)
    digest = resolve_digest(ref, client)
    where = str(ref)
    for _depth in range(4):
        data = _cached_manifest(client, ref, digest)
        manifest = parse_json(data, f"manifest {digest} of {where}")
        media = manifest.get("mediaType") or ("index" if "manifests" in manifest else "manifest")
        if media in INDEXES or media == "index":
            entries = index_entries(manifest, f"image index {digest} of {where}")
            digest = choose([(e.platform, e.digest) for e in entries], platform,
                            where=f"The image index {digest} of {where}")[1]
            continue
        if media not in MANIFESTS and media != "manifest":
            raise BadImage(f"The manifest {digest} of {where} has media type {media!r}, not an image manifest.")
        return _image(client, ref, raw, digest, data, manifest, platform)
    raise BadImage(f"{where}: image indexes are nested too deeply.")


def _image(client: RegistryClient, ref: RegistryRef, raw: str, digest: str, data: bytes, manifest: dict,
           platform: str | None) -> StoredImage:
    where = f"{ref.domain}/{ref.repository}@{digest}"
    config_bytes, config, found = config_and_layers(manifest, where, lambda d: _cached_config(client, ref, d))
    counts = Counter(ldesc.digest for ldesc, _, _ in found)
    memo = _own_memo() if max(counts.values(), default=0) > 1 else None
    layers = [RegistryLayer(client, ref.repository, ldesc, diff_id, memo if counts[ldesc.digest] > 1 else None)
              for ldesc, diff_id, _ in found]
    return StoredImage(ref=raw, manifest_digest=digest, manifest_bytes=data, config_bytes=config_bytes,
                       platform=image_platform(config, platform, where), layers=layers,  # type: ignore[arg-type]
                       transport="docker", names=(str(ref),))
