"""Parsed patches as bytes and back, for a cache of parses (verbs.refs keeps a queue's parses in the
shared cache, sealed, so a warm run of a 1000-patch queue does not parse 1000 patches again).

pickle, because the parse is a tree of frozen dataclasses of bytes, str and ints that it writes and
reads back exactly and fast. The entry is sealed (cache/seal.py) and its seal checked before these
bytes are read; and the reader still builds only the patch format's own value classes: any other
global an entry names is refused (a ValueError: the patches are parsed again)."""
from __future__ import annotations

import io
import os
import pickle
import sys
from functools import lru_cache
from typing import Any

from . import binarypatch, difftext, hunks, pathquote, patchfile, streamed

_CLASSES = {
    (m.__name__, c.__name__): c
    for m, c in (
        (patchfile, patchfile.Patch),
        (patchfile, patchfile.Header),
        (patchfile, patchfile.FileSection),
        (hunks, hunks.Hunk),
        (hunks, hunks.HunkLine),
        (binarypatch, binarypatch.BinaryPatch),
        (binarypatch, binarypatch.BinaryBlock),
    )
}


class _Reader(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _CLASSES.get((module, name))
        if found is None:
            raise ValueError(f"not a patch value: {module}.{name}")
        return found


def encode(patches: list[patchfile.Patch]) -> bytes:
    return pickle.dumps(list(patches), protocol=pickle.HIGHEST_PROTOCOL)


def decode(body: bytes) -> list[patchfile.Patch]:
    try:
        patches = _Reader(io.BytesIO(body)).load()
    except (pickle.UnpicklingError, EOFError, TypeError, AttributeError, ImportError, IndexError, KeyError) as exc:
        raise ValueError(f"not a list of patches: {exc}") from None
    if not isinstance(patches, list) or not all(isinstance(p, patchfile.Patch) for p in patches):
        raise ValueError("not a list of patches")
    return patches


@lru_cache(maxsize=1)
def parser_key() -> bytes:
    """What a parse depends on besides the patch: this codec, the Python, and the parser's own source
    files (their sizes and change times: an edited parser never reads an older parse)."""
    parts = [b"patchcodec-1", sys.version.encode()]
    for module in (patchfile, hunks, binarypatch, streamed, difftext, pathquote, sys.modules[__name__]):
        try:
            st = os.stat(module.__file__ or "")
            parts.append(b"%s:%d:%d" % (module.__name__.encode(), st.st_size, st.st_mtime_ns))
        except OSError:
            parts.append(os.urandom(16))  # no source to stat: never a hit
    return b"\0".join(parts)
