"""A layer whose blob lies in a file (layout, archive member, flat tar): the model.Layer of every transport."""
from __future__ import annotations

import hashlib
from functools import cached_property
from typing import BinaryIO, Literal

from .blobio import (BlobFile, BlobLocation, CheckedRange, FileRange, Fingerprint, HashingRange, HashingStream,
                     fingerprint)
from .compression import Decompressed, detect
from ..mediatypes import LAYER_MEDIA_TYPES, Compression
from ..model import Descriptor
from ...util.reader import Wrapper

Verify = Literal["blob", "diff_id"] | None


class TarStream(Wrapper):
    """A layer's uncompressed tar stream plus what reading its blob to the end proves."""

    def __init__(self, tar, raw, checker, *, seekable: bool, fingerprint: Fingerprint) -> None:
        super().__init__(tar)
        self._tar = tar
        self.raw = raw
        self.fingerprint = fingerprint  # of the file when the stream was opened
        self._checker = checker  # the object whose .verified turns True once the digest matched
        self.seekable = seekable

    def pread(self, n: int, pos: int) -> bytes:
        return self._tar.pread(n, pos)

    @property
    def verified(self) -> bool:
        return self._checker is not None and self._checker.verified

    @property
    def stored_read(self) -> int | None:
        """How many bytes of the stored blob were read so far (None: not known, e.g. a download, which
        reports its own progress)."""
        found = getattr(self._tar, "stored_offset", None)
        return found if isinstance(found, int) else getattr(self.raw, "offset", None)


class BlobLayer:
    """One layer: its descriptor, diff_id, and where its blob's bytes are.

    `verify` says which digest reading checks: "blob" (the descriptor's digest over the stored
    bytes), "diff_id" (the config's diff_id over the uncompressed tar; legacy docker-archive layers
    have no other), or None (a flat tar: nothing to check against).
    """

    def __init__(self, descriptor: Descriptor | None, diff_id: str | None, location: BlobLocation,
                 *, verify: Verify, what: str) -> None:
        self._descriptor = descriptor
        self._diff_id = diff_id
        self.location = location
        self.verify = verify
        self.what = what
        # the source that reads this layer's blob remembers whether it verified it (image_source sets
        # it): a sink that links the blob into an output takes that instead of hashing it again
        self.verified_by = None

    # --- model.Layer ---
    @property
    def descriptor(self) -> Descriptor:
        if self._descriptor is None:
            self._descriptor = self._describe()
        return self._descriptor

    @property
    def diff_id(self) -> str:
        if self._diff_id is None:
            self._diff_id = self._hash_tar()
        return self._diff_id

    def open_blob(self) -> BinaryIO:
        """The stored bytes; checked against the descriptor's digest as they are read."""
        stream = HashingRange(self.location, self.descriptor.digest, what=self.what)
        return BlobFile(stream)  # type: ignore[return-value]

    def open_tar(self) -> BinaryIO:
        """The uncompressed tar; the blob's digest is checked when the stream reaches its end."""
        return BlobFile(self.open_stream(trusted=False))  # type: ignore[return-value]

    # --- reading ---
    @cached_property
    def compression(self) -> Compression:
        with FileRange(self.location, what=self.what) as f:
            return detect(f.peek(8), what=self.what)

    @property
    def check_digest(self) -> str | None:
        """The digest reading this layer verifies (None: nothing to verify)."""
        if self.verify == "blob":
            return self.descriptor.digest
        if self.verify == "diff_id":
            return self._diff_id
        return None

    def open_stream(self, *, trusted: bool) -> TarStream:
        """The tar stream. `trusted`: the blob is known good (verified earlier, file unchanged),
        so its digest is not computed again.

        The blob's digest is computed by a thread of its own over the stored bytes while the tar is
        read (and, in an uncompressed blob, skipped through by seeking); the end of the stream is
        reached only after it matched. A diff_id (legacy docker-archive) is a digest of the
        decompressed tar and is computed over what the decompressor hands out."""
        kind = self.compression
        digest = self.check_digest
        seen = fingerprint(self.location.path)
        if trusted or digest is None:
            raw = FileRange(self.location, what=self.what)
            checker = None
        elif self.verify == "diff_id" and kind != "none":
            raw = FileRange(self.location, what=self.what)
            checker = None  # set below, over the decompressed bytes
        else:
            # a compressed blob is read in order by its decompressor, which hashes it on the way
            raw = CheckedRange(self.location, digest, what=self.what, fold=kind != "none")
            checker = raw
        if kind == "none":
            return TarStream(raw, raw, checker, seekable=True, fingerprint=seen)
        tar = Decompressed(raw, kind, what=self.what)
        if checker is None and not trusted and digest is not None:
            tar = HashingStream(tar, digest, what=self.what)
            checker = tar
        return TarStream(tar, raw, checker, seekable=False, fingerprint=seen)

    def read_range(self, offset: int, length: int) -> bytes:
        """`length` stored bytes at `offset` (a seekable layer's TOC or file frames); not verified here."""
        with FileRange(self.location, what=self.what) as f:
            return f.pread(length, offset)

    def _describe(self) -> Descriptor:
        # only for blobs no manifest describes (legacy docker-archive, flat tar): hash the stored bytes
        h = hashlib.sha256()
        with FileRange(self.location, what=self.what) as f:
            while chunk := f.read(4 << 20):
                h.update(chunk)
        return Descriptor(LAYER_MEDIA_TYPES[self.compression], "sha256:" + h.hexdigest(), self.location.size)

    def _hash_tar(self) -> str:
        h = hashlib.sha256()
        with self.open_stream(trusted=True) as s:
            while chunk := s.read(4 << 20):
                h.update(chunk)
        return "sha256:" + h.hexdigest()
