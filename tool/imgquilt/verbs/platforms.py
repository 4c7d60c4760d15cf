"""`--platform all`: every platform of a multi-platform image, each verified on its own bases.

Audit reports each platform on its own. Apply plans every platform first (each against the lock's
pins, so a platform whose bases drifted is refused by name) and writes nothing unless all verified;
then `--output-image` gets one index with one patched manifest per platform.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .audit import AuditReport, audit_source
from ..fs.types import Source


@dataclass(frozen=True)
class PlatformAudit:
    platform: str
    report: AuditReport


def audit_platforms(queue, platforms: list[str], open_platform: Callable[[str], Source], trust=None) -> list[PlatformAudit]:
    """Each platform audited on its own (with `trust`, a public key: from its attestation where one verifies)."""
    if trust is not None:
        from .attest import audit_trusting

        return [PlatformAudit(p, audit_trusting(queue, open_platform(p), trust)) for p in platforms]
    return [PlatformAudit(p, audit_source(queue, open_platform(p))) for p in platforms]


# --- apply ----------------------------------------------------------------------------------------
def apply_platforms(queue, platforms: list[str], open_platform: Callable[[str], Source], lock, output_image: str | None,
                    *, locked: bool = False, python_check: bool = True, attest=None, compression: str | None = None,
                    compression_level: int | None = None) -> tuple[list[tuple[str, object]], dict]:
    """Verify the series on every platform (a drifted one refused by name, before anything is written),
    then write one index with a patched manifest per platform to `output_image` (with `attest`, a
    verbs.attest.Attester: one signed attestation per platform manifest)."""
    from ..engine.plan import plan_apply
    from ..errors import ImgquiltError
    from ..image.sinks.image import check_index_destination, write_new_index
    from ..pycheck import checks
    from .apply import check_compression, new_image
    from ..sources import BackedByImage
    from ..store import remember

    from ..errors import UsageError

    if output_image is not None:
        check_index_destination(output_image)
    elif attest is not None:
        raise UsageError("--attest signs the image --output-image writes; give --output-image REF with it.")
    check_compression(compression, "oci" if output_image is not None else None)
    if compression_level is not None:
        from ..image.sinks.layer import check_level

        if output_image is None:
            raise UsageError("--compression-level sets the level of the new layer: give --output-image with it.")
        check_level(compression or "gzip", compression_level)
    done = []
    python = checks(python_check)
    for p in platforms:
        source = open_platform(p)
        try:
            result = plan_apply(queue, source, lock, locked=locked, python=python)
        except ImgquiltError as exc:
            exc.message = f"Platform {p}: {exc.message}"
            exc.hint = "\n".join(x for x in (exc.hint, f"Nothing was written for any platform. Rebase the queue onto {p}'s "
                                             "image, or apply to the other platforms by name (--platform OS/ARCH).") if x)
            raise
        done.append((p, source, result))
    for _, _, result in done:
        remember(queue.root, [x for f in result.files if f.patches for x in (f.target.data, f.final)])
    written: dict = {}
    if output_image is not None:
        images = []
        for _, source, result in done:
            assert isinstance(source, BackedByImage)
            images.append(new_image(source.image, result, compression or "gzip", level=compression_level))  # type: ignore[arg-type]
        referrers = [attest.referrer(r, img, output_image, p) for (p, _, r), img in zip(done, images)] if attest else []
        digest, stored = write_new_index(images, output_image, referrers)
        written["image"] = {"ref": output_image, "digest": digest, "platforms": [
            {"platform": p, "digest": img.manifest_digest, "config_digest": img.config_digest,
             "layer_digest": img.layer.digest if img.layer else None, "diff_id": img.layer.diff_id if img.layer else None,
             **({"attestations": attest.stored_json(((r.digest, w),))} if attest else {})}
            for (p, _, _), img, r, w in zip(done, images, referrers or [None] * len(images), stored or [None] * len(images))]}
    return [(p, result) for p, _, result in done], written
