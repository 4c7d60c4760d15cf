"""Digest strings ("sha256:<hex>"): checked before use, since they also name files in layouts."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ..errors import BadImage, DigestMismatch

_DIGEST = re.compile(r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$")


def check_digest(digest: object, *, what: str) -> str:
    """Return `digest` if it is a well-formed sha256/sha512 digest, else raise BadImage."""
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise BadImage(f"The {what} has an invalid digest {digest!r}.")
    return digest


def split_digest(digest: str) -> tuple[str, str]:
    """("sha256", "<hex>") of a checked digest."""
    algo, _, hexpart = digest.partition(":")
    return algo, hexpart


def new_hasher(digest: str):
    return hashlib.new(split_digest(digest)[0])


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_of(data: bytes, like: str) -> str:
    """The digest of `data` with the algorithm of `like`."""
    algo = split_digest(like)[0]
    return f"{algo}:{hashlib.new(algo, data).hexdigest()}"


@dataclass(frozen=True)
class CopyCheck:
    """A blob checked while it is copied to an output: the size its descriptor gives, what to tell the user."""

    size: int
    hint: str


def verify_digest(expected: str, hexdigest: str, *, what: str, where: str | None = None,
                  copy: CopyCheck | None = None, read: int = 0, hint: str | None = None) -> None:
    """Raise DigestMismatch unless the bytes read (`hexdigest`, same algorithm) are `expected`'s.

    The one place that compares a blob with its digest and says so; every reader and writer ends here.
    A copy also checks the byte count (`read`) against the descriptor's size. `hint` replaces the
    default advice (e.g. what an upload did about it).
    """
    actual = f"{split_digest(expected)[0]}:{hexdigest}"
    if actual == expected and (copy is None or read == copy.size):
        return
    if copy is not None:
        raise mismatch(f"The {what} {expected} does not match its descriptor (read {read} bytes with digest "
                       f"{actual}, expected {copy.size} bytes).", hint=hint if hint is not None else copy.hint,
                       used_nothing=False)
    subject = (f"The {what} {expected} at {where} does not match its digest" if where is not None
               else f"The {what} does not match its digest {expected}")
    raise mismatch(f"{subject}: its bytes hash to {actual}.",
                   hint=hint if hint is not None else "The image is corrupt or was modified; fetch or copy it again.")


def mismatch(subject: str, *, hint: str, used_nothing: bool = True) -> DigestMismatch:
    """The one constructor of DigestMismatch (exit 6): `subject` says which bytes are not what vouches for
    them (their digest, their descriptor, the walk of the tar stream a TOC was checked against); the
    message ends by saying nothing from them was used (a copy's hint says what became of the output)."""
    return DigestMismatch(subject + (" Nothing from it was used." if used_nothing else ""), hint=hint)
