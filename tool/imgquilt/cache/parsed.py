"""Parses kept by the digest of what was parsed: `parsed/ab/ab12…` in the shared cache.

A 1000-patch queue's targets.lock is ~600 KB of TOML, and the standard library's TOML reader
takes 0.07-0.2 s on it, every run, for a document that changes only when the queue is locked
again. `remembered` keeps the parse as JSON (read back by the C JSON reader in milliseconds),
named by the sha256 over the kind and the exact bytes parsed, so an edited file is a new name and
is parsed afresh. The entry says more than its name proves (that the JSON is what those bytes
parse to), so it carries a seal (cache/seal.py) over the kind, the name and the JSON text, and is
believed only when the seal verifies; anything else is parsed again and stored sealed.

Small inputs are parsed directly (reading an entry costs about what parsing them does). A parse
that does not come back from JSON exactly as it went in (a TOML date, a float JSON cannot spell)
is not stored. This is a speed-up only: no cache, `IMGQUILT_NO_CACHE=1`, an unsafe cache or no
cache key all mean the input is parsed, never an error of its own.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from ..errors import ImgquiltError

KIND = "parsed"
MIN_SIZE = 64 << 10  # below this a parse costs no more than a cache read
_CAP = 64 << 20


def _body(doc: Any) -> bytes | None:
    """`doc` as JSON text, or None when JSON would not give it back exactly."""
    try:
        body = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
        return None
    try:
        return body if json.loads(body) == doc else None
    except (ValueError, RecursionError):
        return None


def remembered(kind: str, data: bytes, parse: Callable[[bytes], Any]) -> Any:
    """parse(data), from the shared cache when a sealed entry holds it; an exception of `parse` is raised
    as it is (a bad input is never stored)."""
    if len(data) < MIN_SIZE:
        return parse(data)
    return remembered_as(kind, kind.encode() + b"\0" + data, lambda: parse(data), _body, _json_doc)


def remembered_as(kind: str, key: bytes, compute: Callable[[], Any], encode: Callable[[Any], bytes | None],
                  decode: Callable[[bytes], Any]) -> Any:
    """compute(), from the shared cache when a sealed entry named by sha256(`key`) holds it: `key` must be
    every byte the result depends on. `encode` gives the entry's body (None: not stored), `decode`
    reads it back (raising ValueError when it cannot); the seal is checked before decode sees a byte."""
    name = hashlib.sha256(key).hexdigest()
    part, found = _lookup(kind, name, decode)
    if found is not None:
        return found[0]
    doc = compute()
    if part is not None:
        _store(part, kind, name, encode(doc))
    return doc


def _json_doc(body: bytes) -> Any:
    return json.loads(body)


def _lookup(kind: str, name: str, decode: Callable[[bytes], Any]) -> tuple[Any, tuple[Any] | None]:
    """(the cache part or None when none is usable, (the sealed parse,) or None)."""
    from . import cache_root
    from .layers import cache_disabled
    from .seal import entry_sealed
    from .trust import CacheDir

    rel = f"{name[:2]}/{name}"
    try:
        if cache_disabled():
            return None, None
        part = CacheDir(cache_root(), KIND)
        raw = part.read(rel, cap=_CAP)
        if raw is None:
            return part, None
        seal, _, body = raw.partition(b"\n")
        if seal.isascii() and entry_sealed(seal.decode("ascii"), KIND, kind, name, body):
            try:
                return part, (decode(body),)
            except (ValueError, RecursionError):
                pass
        part.unlink(rel)  # unsealed, forged or damaged: parsed again
        return part, None
    except (ImgquiltError, OSError):  # no usable cache (unsafe, a bad key): just parse
        return None, None


def _store(part: Any, kind: str, name: str, body: bytes | None) -> None:
    from .seal import entry_seal

    try:
        seal = None if body is None else entry_seal(KIND, kind, name, body)
        if body is not None and seal is not None:
            part.write(f"{name[:2]}/{name}", seal.encode() + b"\n" + body, durable=False)
    except (ImgquiltError, OSError):
        pass  # not stored: the next run parses again
