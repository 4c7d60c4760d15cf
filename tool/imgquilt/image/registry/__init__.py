"""Images in registries (OCI distribution spec): references, credentials, auth and a client.

The names are loaded on first use: the client needs httpx (0.1 s to import), which a command that
only touches `blob_memo` or `reference` (a local audit, a fleet list) never needs.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"Descriptor": "client", "Manifest": "client", "Registries": "client", "RegistryClient": "client",
          "RetryPolicy": "client", "RegistryRef": "reference", "is_loopback": "reference",
          "parse_registry_ref": "reference"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
