"""JSON from bytes imgquilt did not write (a registry's answer, an image's blob, a file in a root).

`json.loads` raises ValueError on bad JSON and RecursionError on JSON nested deeper than CPython's
parser recurses (a few hundred kilobytes of `[` are enough): both mean "not a document imgquilt can
read", never an internal error.
"""
from __future__ import annotations

import json
from typing import Any


def loads_or_none(data: bytes | str) -> Any | None:
    """The JSON value in `data`, or None when it is not JSON (or too deep to parse)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def member_or_none(data: bytes | str, key: str) -> Any | None:
    """The value of `key` in the JSON object in `data`; None when `data` is not JSON (or too deep to
    parse), not an object, or has no such member. The caller checks the value's type."""
    doc = loads_or_none(data)
    return doc.get(key) if isinstance(doc, dict) else None


def unreadable(exc: BaseException) -> bool:
    """Whether `exc` is what json.loads raises on bytes that are not a readable document."""
    return isinstance(exc, (ValueError, RecursionError))
