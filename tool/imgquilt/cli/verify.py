"""`verify`: check the signed attestations of an image against a public key and the queue."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import G, ImageOpt, PlatformOpt, ProfileOpt, emit_outcome, say


def verify_cmd(
    image: Optional[str] = ImageOpt,
    key: Path = typer.Option(..., "--key", metavar="PUB", help="The PEM public key (Ed25519 or ECDSA P-256) the attestation must be signed with."),
    platform: Optional[str] = PlatformOpt,
    profile: Optional[str] = ProfileOpt,
) -> None:
    """Find the image's attestations (OCI referrers) and check each: signature, subject digest, and that
    the attested apply record matches the queue (series sha256 and every file hash).

    Exit 0 when one verifies (for every platform, with --platform all); 3 when none does, naming why
    for each candidate (wrong key, bad signature, other subject, stale series, ...). With --profile
    NAME, the record must match that profile's patches and env defaults (--profile all: each
    profile's pinned image... is not an output: name the output with --image and one profile).

    \b
    Examples:
      imgquilt verify --image oci:out:1.0-fixed --key key.pub
      imgquilt verify --image docker://reg/app:1.0-fixed --key cosign.pub --platform all --json
    """
    from ..verbs.verify import VerifyRequest, run_verify
    from .documents import verify_doc

    verified = run_verify(VerifyRequest(G.queue, image, key, platform, profile))
    found = verified.found
    failing = [v for v in found if v.verified is None]
    failure = failing[0].failure() if failing else None
    if len(failing) > 1:
        failure.message = "\n".join(v.failure().message for v in failing)  # type: ignore[union-attr]
    if G.json:
        emit_outcome(verify_doc(found, image, verified.every_platform), failure)
        return
    for v in found:
        ok = v.verified
        if ok is None:
            continue
        series = (ok.record or {}).get("series_sha256")
        say((f"Profile {profile}: " if profile else "") + f"Verified {v.ref} ({v.digest}, {v.platform}): attestation {ok.digest} ({ok.where}), signed by key "
            f"{v.key.key_id} ({v.key.algorithm}); series {series}: {len((ok.record or {}).get('patches') or [])} patch(es) "
            "match the queue.")
        for c in v.candidates:
            if not c.verified:
                say(f"  also found {c.digest} ({c.where}): {c.reason}")
    if failure is not None:
        raise failure


COMMANDS = {"verify": verify_cmd}
