"""Push a new image to a registry (`--output-image docker://HOST/REPO:TAG`), uploading only what is missing.

As crane append does: each base blob the target repository already holds is found with a HEAD; one
held by the source repository on the same registry is mounted across repositories (no bytes move);
anything else is streamed from the base image, checked against its digest on the way. Then the new
layer and the config are uploaded, and the manifest PUT last: until it succeeds no tag points at
anything, so a failure before it leaves the tag as it was (unreferenced blobs are the registry's
garbage). The digest reported is the one the registry answers for the manifest.
"""
from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from ...errors import BadImage, UsageError
from ...fs.content import is_spooled, open_reader
from ..mediatypes import OCI_INDEX, OCI_MANIFEST
from ..registry import RegistryRef, parse_registry_ref
from ...util.jsonin import loads_or_none
from ..referrers import Referrer, add_to_index, fallback_tag
from .base_blobs import open_checked, unique_layers
from .mutate import NewImage

FALLBACK_ATTEMPTS = 4  # read-modify-write rounds of the fallback tag before giving up on a racing writer


@dataclass(frozen=True)
class PushReport:
    """What a push moved: the manifest digest the registry answered, and each blob's fate."""

    digest: str
    blobs: dict[str, str]  # digest -> "exists" | "mounted" | "uploaded"

    @property
    def uploaded(self) -> list[str]:
        return [d for d, how in self.blobs.items() if how == "uploaded"]


def parse_push_ref(ref: str) -> RegistryRef:
    """`docker://HOST/REPO[:TAG]` to push to; a digest is refused (the registry decides it)."""
    try:
        parsed = parse_registry_ref(ref)
    except BadImage as exc:
        raise UsageError(exc.message, hint=exc.hint) from None
    if parsed.digest is not None:
        raise UsageError(f"An output image cannot be named by digest ({ref!r}): the digest is what gets written.",
                         hint="Name a tag: docker://HOST/REPO:TAG.")
    return parsed


_CHECKED: set[str] = set()


def check_push_destination(ref: str) -> RegistryRef:
    """Parse `ref` and make sure the registry takes a push there (once per process)."""
    from ..sources.registry import registries

    dest = parse_push_ref(ref)
    if ref not in _CHECKED:
        registries().client(dest).check_push(dest.repository)
        _CHECKED.add(ref)
    return dest


def _source_repository(layer, domain: str) -> str | None:
    """The repository a registry layer was read from, when it is on the registry pushed to."""
    client = getattr(layer, "client", None)
    if client is not None and getattr(client, "domain", None) == domain:
        return getattr(layer, "repository", None)
    return None


def push_index(images: list[NewImage], index: bytes, ref: str) -> PushReport:
    """Push every image's blobs and manifest (by digest), then the index under `ref`'s tag, last."""
    from ..sources.registry import registries

    blobs: dict[str, str] = {}
    for img in images:
        blobs.update(push_image(img, ref, by_digest=True).blobs)
    dest = parse_push_ref(ref)
    digest = registries().client(dest).put_manifest(dest.repository, dest.tag or "latest", index, OCI_INDEX)
    return PushReport(digest, blobs)


def push_image(img: NewImage, ref: str, *, by_digest: bool = False) -> PushReport:
    """Push `img` to `ref` (a docker:// reference with a tag); the manifest goes last (under its digest
    only, with `by_digest`: a member of an index pushed next)."""
    from ..sources.registry import registries

    dest = parse_push_ref(ref)
    client = registries().client(dest)
    repo = dest.repository
    blobs: dict[str, str] = {}
    for layer in unique_layers(img.base):
        digest = layer.descriptor.digest
        mount_from = _source_repository(layer, dest.domain)
        if client.blob_exists(repo, digest):
            blobs[digest] = "exists"
        elif mount_from and mount_from != repo and client.mount_blob(repo, digest, mount_from):
            blobs[digest] = "mounted"
        else:
            with closing(open_checked(layer)) as stream:  # checked against the base's digest while it streams
                client.upload_blob(repo, digest, stream)
            blobs[digest] = "uploaded"
    config_digest = img.config_digest
    small = [(config_digest, img.config)] if img.layer is None else [(img.layer.digest, img.layer.data), (config_digest, img.config)]
    for digest, data in small:
        blobs[digest] = client.push_blob(repo, digest, open_reader(data) if is_spooled(data) else data)
    where = img.manifest_digest if by_digest else dest.tag or "latest"
    manifest_digest = client.put_manifest(repo, where, img.manifest, OCI_MANIFEST)
    return PushReport(manifest_digest, blobs)



def push_referrer(ref: str, referrer: Referrer) -> str:
    """Store `referrer` beside its subject in the repository `ref` names; say where it is listed:
    "referrers API" (the registry answered OCI-Subject), else "tag sha256-<hex>", the fallback tag's
    index, read, added to and written back, then read again to make sure a racing writer did not drop
    it (each writer checks its own entry, so two racing writers both end up listed)."""
    from ..sources.registry import registries

    dest = parse_push_ref(ref)
    client = registries().client(dest)
    repo = dest.repository
    for digest, data in referrer.blobs:
        client.push_blob(repo, digest, data)
    digest, subject = client.put_referrer(repo, referrer.manifest, OCI_MANIFEST)
    if subject == referrer.subject.digest:
        return "referrers API"
    tag = fallback_tag(referrer.subject.digest)

    def listed() -> dict | None:
        found = client.find_manifest(repo, tag)
        if found is None:
            return None
        index = loads_or_none(found.data)  # not JSON, or nested past what the parser takes: not an index
        if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
            raise BadImage(f"The tag {tag} in {dest.domain}/{repo} is not an image index of referrers; imgquilt does "
                           "not replace it.", hint="Remove or repair that tag, then attest again.")
        return index

    for _attempt in range(FALLBACK_ATTEMPTS):
        client.put_manifest(repo, tag, add_to_index(listed(), referrer.descriptor()), OCI_INDEX)
        now = listed()
        if now is not None and any(isinstance(m, dict) and m.get("digest") == digest for m in now["manifests"]):
            return f"tag {tag}"
    raise BadImage(f"The referrers tag {tag} in {dest.domain}/{repo} kept changing under imgquilt ({FALLBACK_ATTEMPTS} tries); "
                   "the attestation is not listed.", hint="Another writer is updating it; attest again later.")
