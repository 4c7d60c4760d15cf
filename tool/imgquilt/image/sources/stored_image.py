"""An image read from a transport: the model.Image every reader returns."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ..layers.blob_layer import BlobLayer


@dataclass(frozen=True, eq=False)
class StoredImage:
    """One platform's image: verified manifest and config bytes, and its layers (bottom first)."""

    ref: str
    manifest_digest: str
    manifest_bytes: bytes
    config_bytes: bytes
    platform: str
    layers: list[BlobLayer]
    kind: Literal["image", "tar"] = "image"
    transport: str = "oci"
    names: tuple[str, ...] = field(default=())  # tags/names the image has where it is stored

    @property
    def config(self) -> dict[str, Any]:
        return _json_object(self.config_bytes)

    @property
    def manifest(self) -> dict[str, Any]:
        return _json_object(self.manifest_bytes)


def _json_object(data: bytes) -> dict[str, Any]:
    """A JSON object, or {} for anything else (the bytes were verified, not necessarily well-formed)."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}
