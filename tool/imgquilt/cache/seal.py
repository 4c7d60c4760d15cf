"""Seals on the shared cache's verdict-bearing entries: a cache is data, not a trust root.

An entry that says more than its name proves (a layer's index says what a blob holds, a `verified/`
marker that a local blob matched its digest, a Python-check row that a file is clean; a
content-addressed entry, named by the sha256 of its bytes, proves itself) is kept with an HMAC-SHA256
over its kind and its content, under the cache key, and believed only when that seal verifies. An
entry without one, or sealed under another key (a cache restored from another machine, job or
branch, or written by anyone else), is not believed: it is recomputed (and then stored sealed),
never an error.

The cache key is derived from the user's own journal key (util.sealing, kept outside every cache
and queue), or from IMGQUILT_CACHE_KEY when it is set: a secret of at least 32 characters (say
`openssl rand -hex 32`) that a team gives every CI job sharing one cache on purpose. Without a key
(no state directory can be made) verdict entries are neither believed nor stored.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from typing import Callable

from ..errors import BadCacheKey, UnsafeStateKey

CACHE_KEY_ENV = "IMGQUILT_CACHE_KEY"
MIN_KEY_CHARS = 32
_DOMAIN = b"imgquilt cache v1"
_memo: dict[str, bytes | None] = {}


def cache_key() -> bytes | None:
    """The key that seals cache entries (see the module docstring); None when there is none."""
    from ..settings import current

    settings = current()
    explicit = settings.of(CACHE_KEY_ENV)
    # asked once per entry (thousands a run): memoized by what decides the key, not the Path built from it
    memo = f"env:{explicit}" if explicit else f"state:{settings.state_dir and os.path.abspath(settings.state_dir)}:{os.environ.get('XDG_STATE_HOME')}:{os.environ.get('HOME')}"
    if memo in _memo:
        return _memo[memo]
    if explicit:
        if len(explicit) < MIN_KEY_CHARS:
            raise BadCacheKey(f"{CACHE_KEY_ENV} holds {len(explicit)} characters; a cache key needs at least "
                              f"{MIN_KEY_CHARS}.", hint="Set it to a secret such as `openssl rand -hex 32` gives, the same "
                                                      "in every job that shares the cache, or unset it.")
        key: bytes | None = hmac.new(_DOMAIN, explicit.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()
    else:
        from ..util.sealing import user_key

        try:
            own = user_key()
        except UnsafeStateKey:
            own = None  # no key of the user's: nothing in the cache is believed, nothing is sealed
        key = None if own is None else hmac.new(own, _DOMAIN, hashlib.sha256).digest()
    _memo[memo] = key
    return key


def _mac(key: bytes, kind: str, fields: tuple[str | bytes, ...]) -> str:
    h = hmac.new(key, kind.encode(), hashlib.sha256)
    for f in fields:
        raw = f if isinstance(f, bytes) else f.encode("utf-8", "surrogateescape")
        h.update(b"\0" + str(len(raw)).encode() + b"\0" + raw)  # lengths: no two field lists run together alike
    return h.hexdigest()


def entry_seal(kind: str, *fields: str | bytes) -> str | None:
    """The seal of a cache entry of `kind` holding `fields`; None when there is no cache key (then
    the entry is not stored)."""
    key = cache_key()
    return None if key is None else _mac(key, kind, fields)


def entry_sealed(tag: object, kind: str, *fields: str | bytes) -> bool:
    """Whether `tag` is the seal of that entry under the cache key (False without a key or a tag)."""
    key = cache_key()
    return isinstance(tag, str) and key is not None and hmac.compare_digest(tag, _mac(key, kind, fields))


def entry_checker(kind: str) -> Callable[..., bool]:
    """entry_sealed for many entries of `kind`: the cache key found once (a batch of rows checks
    hundreds of seals; finding the key is a settings and home-directory lookup each time)."""
    key = cache_key()

    def sealed(tag: object, *fields: str | bytes) -> bool:
        return isinstance(tag, str) and key is not None and hmac.compare_digest(tag, _mac(key, kind, fields))

    return sealed


def entry_sealer(kind: str) -> Callable[..., str | None]:
    """entry_seal for many entries of `kind`, the cache key found once (None: no key, nothing stored)."""
    key = cache_key()

    def seal(*fields: str | bytes) -> str | None:
        return None if key is None else _mac(key, kind, fields)

    return seal
