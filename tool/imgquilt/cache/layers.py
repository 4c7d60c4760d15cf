"""Layer indexes and file bytes in the shared cache, by the digest a layer was verified against.

A layer blob is content-addressed, so what it holds never changes: its index (every member's
metadata, whiteouts, opaque directories) is written once, after the blob was read to its end and its
digest matched, and serves every later run on any image holding that blob, from any transport.

- `layer-index/ab/ab12…`: the serialized index (a DigestStore entry, so its own sha256 is checked
  on every read);
- `layers/sha256-<hex>`: a pointer from the layer's digest to its current index entry (the index
  grows when more of the layer's files are stored, so its own digest moves);
- `files/ab/ab12…`: file bytes by sha256 (a DigestStore).

A pointer or entry that is damaged reads as absent (and the entry is removed): the layer is then read
again and the index rebuilt. The sha256 checks catch damage; what keeps anyone else from writing an
index is the cache's trust model (trust.py): the cache is used only when it is the user's alone.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from . import DigestStore, cache_root
from .trust import CacheDir

_LAYER_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEX64 = re.compile(rb"^[0-9a-f]{64}$")


def cache_disabled() -> bool:
    """`IMGQUILT_NO_CACHE=1` turns the shared cache off (every read decompresses, as a cold run)."""
    return os.environ.get("IMGQUILT_NO_CACHE", "") not in ("", "0")


class LayerCache:
    """Serialized layer indexes by layer digest, and the file bytes they point to."""

    def __init__(self, root: Path | None = None) -> None:
        base = root or cache_root()
        self.indexes = DigestStore("layer-index", base)
        self.files = DigestStore("files", base)
        self._pointers = CacheDir(base, "layers")

    @staticmethod
    def _pointer(layer_digest: str) -> str | None:
        if not _LAYER_DIGEST.match(layer_digest or ""):
            return None
        return layer_digest.replace(":", "-")

    def load(self, layer_digest: str) -> bytes | None:
        """The serialized index of the layer, or None (never indexed, or damaged: then forgotten)."""
        pointer = self._pointer(layer_digest)
        if pointer is None:
            return None
        target = (self._pointers.read(pointer, cap=1 << 10) or b"").strip()
        data = self.indexes.get(target.decode()) if _HEX64.match(target) else None
        if data is None:
            self.forget(layer_digest)
        return data

    def has(self, layer_digest: str) -> bool:
        """Whether an index of the layer is recorded (not checked: `load` checks it)."""
        pointer = self._pointer(layer_digest)
        return pointer is not None and self._pointers.exists(pointer)

    def save(self, layer_digest: str, payload: bytes) -> None:
        """Record `payload` as the layer's index; a cache that cannot be written is not an error."""
        pointer = self._pointer(layer_digest)
        if pointer is None:
            return
        hexdigest = self.indexes.put(payload)
        self._pointers.write(pointer, hexdigest.encode() + b"\n", mode=0o644)

    def forget(self, layer_digest: str) -> None:
        pointer = self._pointer(layer_digest)
        if pointer is not None:
            self._pointers.unlink(pointer)
