"""The `verify` verb: the signed attestations of an image checked against a public key and the
queue, one Verification per platform (`--platform all`: every platform of the index)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import UsageError
from .attest import Verification


@dataclass(frozen=True)
class VerifyRequest:
    """`imgquilt verify` as asked (api.verify's keywords)."""

    queue: str | os.PathLike[str] | None = None
    image: str | None = None
    key: str | os.PathLike[str] = ""
    platform: str | None = None
    profile: str | None = None


@dataclass(frozen=True)
class Verified:
    """What the CLI's verify found: one Verification per platform, and whether every platform of the
    image was asked for (`--platform all`: one document over them)."""

    found: tuple[Verification, ...]
    every_platform: bool


def refuse_verify(req: VerifyRequest) -> None:
    """`verify` checks one image's attestation: one profile, not all."""
    from .fanout import select

    if select(req.profile).every_profile:
        raise UsageError(
            "verify checks the attestation of one image: name the profile it was applied for (--profile NAME).",
            hint="`imgquilt audit --profile all --image REF` says which profile an image is.",
        )


def run_verify(req: VerifyRequest) -> Verified:
    """The CLI's `verify`: refused combinations first, then every platform asked for."""
    from .fanout import select

    refuse_verify(req)
    return Verified(verify(req), select(None, req.platform).every_platform)


def verify(req: VerifyRequest) -> tuple[Verification, ...]:
    """api.verify says how."""
    from ..sources import open_image
    from .attest import verify_image
    from .fanout import fan_out, select
    from .profiles import lock_file, need_pin, resolve
    from .refs import cache_dir, load_queue, pick_ref, public_key

    pub = public_key(req.key)
    q = load_queue(req.queue)
    lf = lock_file(q.root)
    chosen = resolve(q, req.profile, lf)
    need_pin(chosen, lf, req.image)
    ref = pick_ref(req.image, chosen.lock, q.root)
    cells = fan_out(select(None, req.platform), q, ref=ref, named=False)  # an image that names none: none verified
    return tuple(
        verify_image(
            chosen.queue, open_image(ref, platform=c.platform, cache_dir=cache_dir(q.root)), ref, pub, env=chosen.env
        )
        for c in cells
    )
