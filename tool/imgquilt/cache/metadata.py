"""Manifests and configs by digest: a warm run reads an image's small blobs without the registry.

Both are immutable once named by their digest, so an entry never goes stale; a tag is never a key
(it is resolved again every run). Only sha256 digests are kept (the store's names are sha256).
"""
from __future__ import annotations

from . import DigestStore
from .usage import trim

MANIFESTS = "manifests"
CONFIGS = "configs"


def _hex(digest: str) -> str | None:
    algo, _, hexpart = digest.partition(":")
    return hexpart if algo == "sha256" else None


class MetadataCache:
    """Get and put manifests (and indexes) and configs by their digest; every read is checked again."""

    def __init__(self, kind: str) -> None:
        self.store = DigestStore(kind)

    def get(self, digest: str) -> bytes | None:
        hexpart = _hex(digest)
        return None if hexpart is None else self.store.get(hexpart)

    def put(self, digest: str, data: bytes) -> None:
        """Keep `data` (already checked against `digest`), then keep the cache under its cap."""
        if _hex(digest) is not None and self.store.get(_hex(digest) or "") is None:
            self.store.put(data)
            trim()


def manifests() -> MetadataCache:
    return MetadataCache(MANIFESTS)


def configs() -> MetadataCache:
    return MetadataCache(CONFIGS)
