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
index that is believed is the pointer's seal (cache.seal): it names the index entry (by the sha256 of
its bytes) for that layer key under the cache key, so an index restored from another machine's or
job's cache, or planted, is not believed: the layer is read again and its index stored anew.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from . import DigestStore, cache_root
from .seal import cache_key, entry_seal, entry_sealed
from .trust import CacheDir

_LAYER_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KIND = "layer-index"


def cache_disabled() -> bool:
    """`IMGQUILT_NO_CACHE=1` turns the shared cache off (every read decompresses, as a cold run)."""
    from ..settings import current

    return current().flag("no_cache")


class LayerCache:
    """Serialized layer indexes by layer digest, and the file bytes they point to."""

    def __init__(self, root: Path | None = None) -> None:
        cache_key()  # a bad IMGQUILT_CACHE_KEY is refused here, before any read
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
        words = (self._pointers.read(pointer, cap=1 << 10) or b"").decode("ascii", "replace").split()
        target = words[0] if len(words) == 2 and _HEX64.match(words[0]) else None
        if target is None or not entry_sealed(words[1], _KIND, layer_digest, target):
            return None  # not one this user (or team key) wrote: read the layer again, never an error
        data = self.indexes.get(target)
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
        hexdigest = hashlib.sha256(payload).hexdigest()
        seal = entry_seal(_KIND, layer_digest, hexdigest)
        if seal is None:
            return  # no cache key: nothing stored is ever believed, so nothing is stored
        self.indexes.put(payload)
        self._pointers.write(pointer, f"{hexdigest} {seal}\n".encode(), mode=0o644)

    def forget(self, layer_digest: str) -> None:
        pointer = self._pointer(layer_digest)
        if pointer is not None:
            self._pointers.unlink(pointer)
