"""Findings of the Python check by content, in the shared cache: `pycheck/<checker version>/ab/ab12…`.

An entry is keyed by the sha256 of the checked file's bytes and holds the findings with a checksum
over key, version and findings; an entry that does not match is dropped and the file checked again.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from ..util.atomic import atomic_write
from . import cache_root

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _sum(key: str, version: str, errors: list[str]) -> str:
    return hashlib.sha256(json.dumps([key, version, errors]).encode()).hexdigest()


class PyCheckResults:
    """A pycheck.Memo kept in the shared cache, for one checker version."""

    def __init__(self, version: str, root: Path | None = None) -> None:
        self.version = version
        self.dir = (root or cache_root()) / "pycheck" / hashlib.sha256(version.encode()).hexdigest()[:16]

    def _path(self, key: str) -> Path | None:
        return self.dir / key[:2] / key if _HEX64.match(key) else None

    def get(self, key: str) -> list[str] | None:
        path = self._path(key)
        if path is None:
            return None
        try:
            doc = json.loads(path.read_bytes())
            errors = doc["errors"]
            if (doc["key"], doc["version"]) == (key, self.version) and isinstance(errors, list) \
                    and all(isinstance(e, str) for e in errors) and doc["sum"] == _sum(key, self.version, errors):
                return errors
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            pass
        try:
            path.unlink()  # damaged: check the file again
        except OSError:
            pass
        return None

    def put(self, key: str, errors: list[str]) -> None:
        path = self._path(key)
        if path is None:
            return
        doc = {"key": key, "version": self.version, "errors": errors, "sum": _sum(key, self.version, errors)}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # not durable: many small entries, and one a crash leaves empty fails its checksum
            atomic_write(path, json.dumps(doc).encode(), durable=False)
        except OSError:
            pass
